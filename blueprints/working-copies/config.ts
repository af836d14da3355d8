import { ValidationError } from '../../lib/index.js';

/** `workingCopies({ config })`. */
export type WorkingCopiesConfig = {
  /** Names of the host blueprints a working copy may live on. @defaultValue any blueprint of type `host` */
  hosts?: string[];
  /** An absolute directory on the host holding one directory per working copy. @defaultValue a directory in the host lease's own scratch directory */
  root?: string;
};

export function validateWorkingCopiesConfig(config: unknown): WorkingCopiesConfig {
  if (config === undefined || config === null) return {};
  if (typeof config !== 'object' || Array.isArray(config)) throw new ValidationError('config', 'must be an object { hosts?, root? }');
  const { hosts, root, ...rest } = config as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length > 0) throw new ValidationError(`config.${extra[0]}`, 'is not a workingCopies option (hosts, root)');
  if (hosts !== undefined && (!Array.isArray(hosts) || hosts.length === 0 || hosts.some((h) => typeof h !== 'string' || h === ''))) {
    throw new ValidationError('config.hosts', 'must be a non-empty array of host blueprint names');
  }
  if (root !== undefined && (typeof root !== 'string' || !root.startsWith('/') || root.split('/').includes('..') || /[\u0000-\u001f]/.test(root))) {
    throw new ValidationError('config.root', 'must be an absolute path with no ".." and no control characters');
  }
  return { ...(hosts === undefined ? {} : { hosts: hosts as string[] }), ...(root === undefined ? {} : { root: root as string }) };
}
