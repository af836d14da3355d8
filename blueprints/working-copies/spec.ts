import { ValidationError, type JsonObject } from '../../lib/index.js';
import { checkCommit, checkDirectory, checkRefName, checkUrl } from './validate.js';

/** One repository of a working-copy lease, as the requester asks for it. */
export type RepositorySpec = {
  /** Where to clone from: https, http, ssh, git or file transport, or `user@host:path`. */
  url: string;
  /** Check out this commit, detached. At most one of `commit`, `branch` and `ref`. */
  commit?: string;
  /** Check out this branch, reset to `origin/<branch>`. */
  branch?: string;
  /** Fetch this ref (`refs/...`) and check it out, detached. */
  ref?: string;
  /** Fetch this ref and check it out on top of everything else, detached (an in-review change). */
  stagingRef?: string;
  /** Refs fetched and squash-merged, in order, each committed with a fixed identity. */
  merges?: string[];
};

/** The attributes of a working-copy lease. */
export type WorkingCopiesLeaseAttributes = {
  /** By directory under the working copy's root. Active, each also has `head`: the commit checked out. */
  repositories: { [dir: string]: RepositorySpec & { head?: string } };
  /** Reuse only a working copy that holds exactly these repositories. @defaultValue false */
  strict?: boolean;
};

const KEYS = new Set(['url', 'commit', 'branch', 'ref', 'stagingRef', 'merges', 'head']);
const MAX_REPOSITORIES = 32;
const MAX_MERGES = 32;

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Checks a lease's attributes and returns them typed. Throws a ValidationError naming the field; runs nothing. */
export function parseLeaseAttributes(attributes: JsonObject): WorkingCopiesLeaseAttributes {
  const repositories = attributes.repositories;
  if (!isObject(repositories)) throw new ValidationError('attributes.repositories', 'must be an object of <dir>: { url, ... }');
  const dirs = Object.keys(repositories);
  if (dirs.length === 0 || dirs.length > MAX_REPOSITORIES) throw new ValidationError('attributes.repositories', `must name 1 to ${MAX_REPOSITORIES} repositories`);
  const strict = attributes.strict;
  if (strict !== undefined && typeof strict !== 'boolean') throw new ValidationError('attributes.strict', 'must be a boolean');
  const out: WorkingCopiesLeaseAttributes['repositories'] = {};
  for (const dir of dirs) {
    const at = `attributes.repositories.${JSON.stringify(dir)}`;
    checkDirectory(`attributes.repositories`, dir);
    out[dir] = parseRepository(at, repositories[dir]);
  }
  return { repositories: out, ...(strict === undefined ? {} : { strict }) };
}

function parseRepository(at: string, value: unknown): RepositorySpec {
  if (!isObject(value)) throw new ValidationError(at, 'must be an object { url, commit?, branch?, ref?, stagingRef?, merges? }');
  for (const key of Object.keys(value)) if (!KEYS.has(key)) throw new ValidationError(`${at}.${key}`, 'is not a repository field');
  const text = (key: string): string | undefined => {
    const v = value[key];
    if (v === undefined) return undefined;
    if (typeof v !== 'string') throw new ValidationError(`${at}.${key}`, 'must be a string');
    return v;
  };
  const url = text('url');
  if (url === undefined) throw new ValidationError(`${at}.url`, 'is required');
  checkUrl(`${at}.url`, url);
  const spec: RepositorySpec = { url };
  const targets = ['commit', 'branch', 'ref'].filter((k) => value[k] !== undefined);
  if (targets.length > 1) throw new ValidationError(at, `give at most one of commit, branch and ref (got ${targets.join(', ')})`);
  const commit = text('commit');
  if (commit !== undefined) (checkCommit(`${at}.commit`, commit), (spec.commit = commit));
  const branch = text('branch');
  if (branch !== undefined) (checkRefName(`${at}.branch`, branch, 'branch'), (spec.branch = branch));
  const ref = text('ref');
  if (ref !== undefined) (checkRefName(`${at}.ref`, ref, 'ref'), (spec.ref = ref));
  const stagingRef = text('stagingRef');
  if (stagingRef !== undefined) (checkRefName(`${at}.stagingRef`, stagingRef, 'ref'), (spec.stagingRef = stagingRef));
  const merges = value.merges;
  if (merges !== undefined) {
    if (!Array.isArray(merges) || merges.length > MAX_MERGES) throw new ValidationError(`${at}.merges`, `must be an array of at most ${MAX_MERGES} refs`);
    spec.merges = merges.map((m, i) => {
      if (typeof m !== 'string') throw new ValidationError(`${at}.merges[${i}]`, 'must be a string');
      checkRefName(`${at}.merges[${i}]`, m, 'ref');
      return m;
    });
  }
  return spec;
}

/** dir → url of a lease's repositories: what a working copy must hold to serve it. */
export const urlsOf = (attributes: WorkingCopiesLeaseAttributes): Record<string, string> =>
  Object.fromEntries(Object.entries(attributes.repositories).map(([dir, r]) => [dir, r.url]));
