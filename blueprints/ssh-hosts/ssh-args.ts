import { ValidationError } from '../../lib/index.js';
import type { SshHostsSettings } from './config.js';

/** One machine to reach, and the control socket of its resource's master connection. */
export interface SshTarget {
  host: string;
  port: number;
  user: string | null;
  controlPath: string;
}

/** How long an idle master connection outlives its last session (`ControlPersist`); the next command starts a new one. */
export const CONTROL_PERSIST_SECONDS = 300;

/**
 * The options of every `ssh` this blueprint runs, before the destination. Each value is
 * its own argv word (ssh is spawned without a local shell), and every value was
 * validated: a host never starts with "-", paths have no `%`, whitespace or control
 * characters, which ssh would expand or split.
 *
 * - `BatchMode=yes`: never a password or passphrase prompt; a missing key fails at once.
 * - `StrictHostKeyChecking=yes` (or `accept-new`): a changed host key is always refused.
 *   Drydock turns checking off; this never does.
 * - `LogLevel=ERROR`: ssh's own warnings ("Permanently added ...") stay out of a command's stderr.
 * - `ControlPath`: the resource's master connection, so a build's many commands pay one
 *   handshake (see `master.ts`).
 */
export function sshOptions(settings: SshHostsSettings, target: SshTarget): string[] {
  const args = ['-T', '-o', 'BatchMode=yes', '-o', `StrictHostKeyChecking=${settings.hostKeyPolicy === 'strict' ? 'yes' : 'accept-new'}`];
  if (settings.knownHostsFile !== null) args.push('-o', `UserKnownHostsFile=${settings.knownHostsFile}`);
  args.push('-o', `ConnectTimeout=${settings.connectTimeoutSeconds}`);
  if (settings.identityFile !== null) args.push('-o', 'IdentitiesOnly=yes', '-i', settings.identityFile);
  args.push('-o', 'LogLevel=ERROR', '-o', `ControlPath=${target.controlPath}`, '-p', String(target.port));
  if (target.user !== null) args.push('-l', target.user);
  return args;
}

/** The whole argv of `ssh`: options, then `--`, the destination and the remote command (one word, for the remote shell). */
export function sshArgv(settings: SshHostsSettings, target: SshTarget, extra: readonly string[], remoteCommand?: string): string[] {
  return [...sshOptions(settings, target), ...extra, '--', target.host, ...(remoteCommand === undefined ? [] : [remoteCommand])];
}

/**
 * One word for a POSIX shell: single-quoted, so nothing in it is special (`$`, backquotes,
 * `;`, globs, newlines), and each `'` written as `'\''`. A NUL cannot be passed at all.
 */
export function shellQuote(word: string, field = 'argv'): string {
  if (word.includes('\0')) throw new ValidationError(field, 'must not contain a NUL character: it cannot reach a remote program');
  return `'${word.replaceAll("'", "'\\''")}'`;
}

/**
 * The remote command line: `sh -c '<script>' <name> '<arg>'...`, every word quoted.
 * ssh hands the line to the login shell of the remote user, which must be a POSIX shell
 * (sh, bash, dash, zsh, ksh); it unquotes the words and runs `sh` with them, so the
 * script and its arguments arrive as they were written here.
 */
export function remoteShellCommand(script: string, name: string, args: readonly string[]): string {
  return ['sh', '-c', shellQuote(script, 'script'), shellQuote(name), ...args.map((a, i) => shellQuote(a, `argv[${i}]`))].join(' ');
}

/** The identity file's path, replaced wherever ssh repeats it (its warnings name it), before any text is logged or thrown. */
export function redact(text: string, settings: Pick<SshHostsSettings, 'identityFile'>): string {
  return settings.identityFile === null ? text : text.split(settings.identityFile).join('<identityFile>');
}
