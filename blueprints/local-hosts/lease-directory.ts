import { mkdir, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ValidationError } from '../../lib/index.js';

const SAFE_NAME = /^[A-Za-z0-9._-]+$/;

/**
 * The scratch directory of one lease: `<root>/<lease id>`. Always computed from the
 * blueprint's config and the lease id, never read from lease attributes, which the
 * requester also writes: a directory that is removed recursively must not be chosen by
 * whoever asked for the lease.
 */
export function leaseDirectory(root: string, leaseId: string): string {
  if (typeof leaseId !== 'string' || !SAFE_NAME.test(leaseId) || leaseId.includes('..')) {
    throw new ValidationError('lease.id', `cannot name a directory: ${JSON.stringify(leaseId)} (letters, digits, ".", "_" and "-" only, no "..")`);
  }
  const path = join(root, leaseId);
  if (dirname(path) !== root) throw new ValidationError('lease.id', `${JSON.stringify(leaseId)} would leave the root ${root}`);
  return path;
}

/** Creates the directory, and its parents. Existing is fine: a resumed activation finds its own. */
export async function createDirectory(path: string): Promise<void> {
  await mkdir(path, { recursive: true });
}

/** Removes the directory and everything in it. Already gone is success. */
export async function removeDirectory(path: string): Promise<void> {
  await rm(path, { recursive: true, force: true, maxRetries: 3 });
}
