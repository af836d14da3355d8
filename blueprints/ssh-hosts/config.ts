import { isIP } from 'node:net';
import { posix } from 'node:path';
import { parseDuration, ValidationError, type DurationInput } from '../../lib/index.js';
import { describe } from '../describe-value.js';

/** One machine of an `sshHosts` pool. */
export interface SshHostConfig {
  /** A host name or an IP address (IPv6 without brackets), as `ssh` would be given it. */
  host: string;
  /** @defaultValue 22 */
  port?: number;
  /** The remote user. @defaultValue what `ssh` picks: your ssh config's `User`, else the local user name */
  user?: string;
  /** How many leases this machine serves at once, each holding one slot lock. @defaultValue 1 */
  slots?: number;
}

/** Configuration of an `sshHosts` blueprint. */
export interface SshHostsConfig {
  /** The machines; one resource each. */
  hosts: SshHostConfig[];
  /** The private key to log in with (`ssh -i`, with `IdentitiesOnly=yes`). Never logged. @defaultValue what `ssh` picks (your agent and ssh config) */
  identityFile?: string;
  /** The known_hosts file host keys are checked against (`UserKnownHostsFile`). @defaultValue ssh's own (`~/.ssh/known_hosts`) */
  knownHostsFile?: string;
  /**
   * `strict`: a host whose key is not in the known_hosts file, or differs from it, is
   * refused (`StrictHostKeyChecking=yes`). `accept-new`: a host never seen before is
   * added on first contact; a changed key is still refused. @defaultValue 'strict'
   */
  hostKeyPolicy?: 'strict' | 'accept-new';
  /** How long `ssh` may take to connect (`ConnectTimeout`, whole seconds). @defaultValue 10 seconds */
  connectTimeout?: DurationInput;
  /** Absolute directory on each host holding one scratch directory per lease. @defaultValue '/tmp/slipway-ssh' */
  root?: string;
}

/** A host as the hooks see it: every default filled in. */
export type SshHostSettings = Required<Omit<SshHostConfig, 'user'>> & { user: string | null };

/** The config as the hooks see it: `validateConfig` has filled in every default. */
export interface SshHostsSettings {
  hosts: SshHostSettings[];
  identityFile: string | null;
  knownHostsFile: string | null;
  hostKeyPolicy: 'strict' | 'accept-new';
  connectTimeoutSeconds: number;
  root: string;
}

export const MAX_SLOTS = 1024;
export const MAX_HOSTS = 1024;
export const DEFAULT_ROOT = '/tmp/slipway-ssh';

const KNOWN_KEYS = ['hosts', 'identityFile', 'knownHostsFile', 'hostKeyPolicy', 'connectTimeout', 'root'];
const HOST_KEYS = ['host', 'port', 'user', 'slots'];

// Labels of letters, digits, "-" and "_" (internal names use it), not starting or ending with "-".
const HOSTNAME = /^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?$/;
// What useradd accepts, plus "." and a trailing "$" (machine accounts).
const USER = /^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$/;
const CONTROL = /[\u0000-\u001f\u007f]/;

/** Checks an `sshHosts` config and fills in its defaults. Throws a ValidationError naming the field. */
export function validateSshHostsConfig(config: unknown): SshHostsSettings {
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new ValidationError('config', `must be an object like { hosts: [{ host: 'build-1.example.com' }] } (got ${describe(config)})`);
  }
  const input = config as Record<string, unknown>;
  for (const key of Object.keys(input)) {
    if (!KNOWN_KEYS.includes(key)) throw new ValidationError(`config.${key}`, `is not an sshHosts option (known: ${KNOWN_KEYS.join(', ')})`);
  }
  if (!Array.isArray(input.hosts) || input.hosts.length === 0 || input.hosts.length > MAX_HOSTS) {
    throw new ValidationError('config.hosts', `must be an array of 1 to ${MAX_HOSTS} hosts like { host: 'build-1.example.com', port: 22, user: 'ci', slots: 2 }`);
  }
  const hosts = input.hosts.map((h, i) => validateHost(h, `config.hosts[${i}]`));
  const seen = new Map<string, number>();
  hosts.forEach((h, i) => {
    const key = hostKey(h);
    const first = seen.get(key);
    if (first !== undefined) throw new ValidationError(`config.hosts[${i}]`, `names the same machine as config.hosts[${first}] (${key}): list each host once and give it slots`);
    seen.set(key, i);
  });

  const identityFile = input.identityFile === undefined ? null : localPath(input.identityFile, 'config.identityFile', { secret: true });
  const knownHostsFile = input.knownHostsFile === undefined ? null : localPath(input.knownHostsFile, 'config.knownHostsFile', { secret: false });

  const policy = input.hostKeyPolicy === undefined ? 'strict' : input.hostKeyPolicy;
  if (policy !== 'strict' && policy !== 'accept-new') {
    throw new ValidationError('config.hostKeyPolicy', `must be 'strict' or 'accept-new' (got ${describe(input.hostKeyPolicy)}); checking cannot be turned off`);
  }

  let connectTimeoutSeconds = 10;
  if (input.connectTimeout !== undefined) {
    const ms = parseDuration(input.connectTimeout, 'config.connectTimeout').toMillis();
    if (!(ms >= 1000 && ms <= 3_600_000)) throw new ValidationError('config.connectTimeout', `must be from 1 second to 1 hour (got ${describe(input.connectTimeout)})`);
    connectTimeoutSeconds = Math.round(ms / 1000);
  }

  const root = input.root === undefined ? DEFAULT_ROOT : remoteDirectory(input.root, 'config.root');
  return { hosts, identityFile, knownHostsFile, hostKeyPolicy: policy, connectTimeoutSeconds, root };
}

/** `user@host:port`: what tells two configured machines apart. */
export function hostKey(h: { host: string; port: number; user: string | null }): string {
  return `${h.user === null ? '' : `${h.user}@`}${h.host.includes(':') ? `[${h.host}]` : h.host}:${h.port}`;
}

function validateHost(value: unknown, at: string): SshHostSettings {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new ValidationError(at, `must be an object like { host: 'build-1.example.com' } (got ${describe(value)})`);
  const h = value as Record<string, unknown>;
  for (const key of Object.keys(h)) {
    if (!HOST_KEYS.includes(key)) throw new ValidationError(`${at}.${key}`, `is not a host option (known: ${HOST_KEYS.join(', ')})`);
  }
  const host = h.host;
  // Shown as JSON: a value with control characters must not forge lines of a log.
  if (typeof host !== 'string' || host === '') throw new ValidationError(`${at}.host`, `must be a non-empty string (got ${describe(host)})`);
  // A leading "-" would be an option of ssh; "[::1]" is ssh_config syntax, not a host.
  if (host.startsWith('-') || !(HOSTNAME.test(host) || isIP(host) !== 0)) {
    throw new ValidationError(`${at}.host`, `must be a host name or an IP address (IPv6 without brackets), with no leading "-", whitespace or control characters (got ${describe(host)})`);
  }
  const port = h.port === undefined ? 22 : h.port;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) throw new ValidationError(`${at}.port`, `must be an integer from 1 to 65535 (got ${describe(h.port)})`);
  let user: string | null = null;
  if (h.user !== undefined) {
    if (typeof h.user !== 'string' || !USER.test(h.user)) {
      throw new ValidationError(`${at}.user`, `must be a user name: a letter or "_", then up to 31 letters, digits, ".", "_" or "-" (got ${describe(h.user)})`);
    }
    user = h.user;
  }
  const slots = h.slots === undefined ? 1 : h.slots;
  if (typeof slots !== 'number' || !Number.isInteger(slots) || slots < 1 || slots > MAX_SLOTS) {
    throw new ValidationError(`${at}.slots`, `must be an integer from 1 to ${MAX_SLOTS} (got ${describe(h.slots)})`);
  }
  return { host, port, user, slots };
}

/**
 * An absolute local path handed to ssh. ssh expands `%` tokens and `~` in these options,
 * and splits `UserKnownHostsFile` at whitespace: such a path would name another file.
 * The identity file's path is never repeated in a message (`secret`).
 */
function localPath(value: unknown, at: string, { secret }: { secret: boolean }): string {
  const shown = secret ? '' : ` (got ${describe(value)})`;
  if (typeof value !== 'string' || value === '') throw new ValidationError(at, `must be a non-empty string${shown}`);
  if (!value.startsWith('/')) throw new ValidationError(at, `must be an absolute path${shown}`);
  if (CONTROL.test(value)) throw new ValidationError(at, `must not contain NUL, newlines or other control characters${shown}`);
  if (value.includes('%')) throw new ValidationError(at, `must not contain "%" (ssh would expand it as a token)${shown}`);
  if (/\s/.test(value)) throw new ValidationError(at, `must not contain whitespace (ssh splits such a path)${shown}`);
  return value;
}

/** An absolute directory on the remote hosts; lease directories under it are removed with `rm -rf`. */
function remoteDirectory(value: unknown, at: string): string {
  if (typeof value !== 'string' || value === '') throw new ValidationError(at, `must be a non-empty string (got ${describe(value)})`);
  if (!value.startsWith('/')) throw new ValidationError(at, `must be an absolute path (got ${describe(value)})`);
  if (CONTROL.test(value)) throw new ValidationError(at, `must not contain NUL, newlines or other control characters (got ${describe(value)})`);
  if (value.split('/').includes('..')) throw new ValidationError(at, `must not contain ".." (got ${describe(value)})`);
  const normalized = posix.normalize(value).replace(/\/+$/, '');
  if (normalized === '') throw new ValidationError(at, 'must not be "/": lease directories under it are removed recursively');
  return normalized;
}
