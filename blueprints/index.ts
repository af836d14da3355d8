export { localHosts, CommandStartError } from './local-hosts/index.js';
export type { LocalHostsConfig, LocalHostsLeaseAttributes, LocalHostsResourceAttributes } from './local-hosts/index.js';
export { workingCopies, GitStepError } from './working-copies/index.js';
export type { WorkingCopiesConfig, WorkingCopiesLeaseAttributes, WorkingCopiesResourceAttributes, RepositorySpec } from './working-copies/index.js';
export { sshHosts, SshError } from './ssh-hosts/index.js';
export type { SshHostsConfig, SshHostConfig, SshHostsLeaseAttributes, SshHostsResourceAttributes } from './ssh-hosts/index.js';
