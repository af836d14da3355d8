import { tmpdir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { ValidationError } from '../../lib/index.js';
import { describe } from '../describe-value.js';

/** Configuration of a `localHosts` blueprint. */
export interface LocalHostsConfig {
  /**
   * How many leases the local machine serves at once. Each lease holds one slot lock,
   * so this holds across every broker process sharing one database.
   * @defaultValue 1
   */
  slots?: number;
  /**
   * Absolute directory under which each lease gets its own scratch directory, named by
   * the lease id. Created when the resource activates.
   * @defaultValue `join(os.tmpdir(), 'slipway-local-hosts')`
   */
  root?: string;
}

/** The config as the hooks see it: `validateConfig` has filled in every default. */
export type LocalHostsSettings = Required<LocalHostsConfig>;

export const MAX_SLOTS = 1024;

const KNOWN_KEYS = ['slots', 'root'];

export function defaultRoot(): string {
  return join(tmpdir(), 'slipway-local-hosts');
}

/** Checks a `localHosts` config and fills in its defaults. Throws a ValidationError naming the field. */
export function validateLocalHostsConfig(config: unknown): LocalHostsSettings {
  if (config === undefined || config === null) config = {};
  if (typeof config !== 'object' || Array.isArray(config)) throw new ValidationError('config', `must be an object like { slots: 2 } (got ${describe(config)})`);
  const input = config as Record<string, unknown>;
  for (const key of Object.keys(input)) {
    if (!KNOWN_KEYS.includes(key)) throw new ValidationError(`config.${key}`, `is not a localHosts option (known: ${KNOWN_KEYS.join(', ')})`);
  }

  // null is not "the default": the types say number, and a config file that writes null meant something.
  const slots = input.slots === undefined ? 1 : input.slots;
  if (typeof slots !== 'number' || !Number.isInteger(slots) || slots < 1 || slots > MAX_SLOTS) {
    throw new ValidationError('config.slots', `must be an integer from 1 to ${MAX_SLOTS} (got ${describe(input.slots)})`);
  }

  const root = input.root === undefined ? defaultRoot() : input.root;
  if (typeof root !== 'string' || root.length === 0) throw new ValidationError('config.root', `must be a non-empty string (got ${describe(input.root)})`);
  if (root.includes('\0')) throw new ValidationError('config.root', 'must not contain a NUL byte');
  // A relative root would move with the host process's working directory, and lease
  // directories are removed recursively: only an absolute path is predictable.
  if (!isAbsolute(root)) throw new ValidationError('config.root', `must be an absolute path (got ${JSON.stringify(root)})`);

  return { slots, root: resolve(root) };
}
