export { localHosts, CommandStartError } from './local-hosts/index.js';
export type { LocalHostsConfig, LocalHostsLeaseAttributes, LocalHostsResourceAttributes } from './local-hosts/index.js';
