import { SlipwayError } from '../../lib/index.js';

/** How many lines of ssh's stderr an error quotes. */
const STDERR_LINES = 8;

/**
 * `ssh` itself failed, before or instead of the remote command: the host cannot be
 * reached, its key is unknown or changed (`Host key verification failed.`), the login is
 * refused, or a step of the blueprint on the host failed. Names the host, what was being
 * done and the end of ssh's stderr, with the identity file's path already redacted.
 */
export class SshError extends SlipwayError {
  constructor(
    /** `user@host:port`. */
    readonly host: string,
    /** What was being done: `connect`, `create the lease directory`, ... */
    readonly step: string,
    readonly exitCode: number | null,
    stderr: string,
  ) {
    const tail = stderr.trimEnd().split('\n').slice(-STDERR_LINES).join('\n');
    super('SSH_FAILED', `ssh to ${host} failed to ${step} (exit code ${exitCode ?? 'none'})${tail ? `: ${tail}` : ''}`);
  }
}
