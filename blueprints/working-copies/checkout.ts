import { posix } from 'node:path';
import { COMMITTER, type Git } from './git.js';
import { GitStepError } from './git-step-error.js';
import type { RepositorySpec } from './spec.js';

const identity = ['-c', `user.name=${COMMITTER.name}`, '-c', `user.email=${COMMITTER.email}`];

/** Once per resource: `git clone -- <url> <root>/<dir>`, starting over from nothing after a crash mid-clone. */
export async function clone(git: Git, root: string, dir: string, url: string): Promise<void> {
  const path = posix.join(root, dir);
  await git.remove(path);
  await git.run('clone', dir, undefined, ['clone', '--no-checkout', '--', url, path]);
}

/**
 * Each lease: a clean tree at the target, then the staging ref, then each merge. Returns the
 * commit checked out. A failing step throws a GitStepError; a conflicting merge leaves the
 * tree reset, never half-merged.
 */
export async function prepare(git: Git, root: string, dir: string, repo: RepositorySpec): Promise<string> {
  const cwd = posix.join(root, dir);
  await git.run('checkout', dir, cwd, ['reset', '--hard', '-q']).catch(() => undefined);
  await git.run('clean', dir, cwd, ['clean', '-ffdx', '-q']);
  await git.run('fetch', dir, cwd, ['fetch', '--prune', '--quiet', '--', 'origin']);
  await git.run('checkout', dir, cwd, ['reset', '--hard', '-q']);
  if (repo.branch !== undefined) {
    await git.run('checkout', dir, cwd, ['checkout', '-q', '-B', repo.branch, `refs/remotes/origin/${repo.branch}`, '--']);
  } else if (repo.ref !== undefined) {
    await fetchRef(git, 'fetch', dir, cwd, repo.url, repo.ref);
    await git.run('checkout', dir, cwd, ['checkout', '-q', '--detach', repo.ref, '--']);
  } else {
    await git.run('checkout', dir, cwd, ['checkout', '-q', '--detach', repo.commit ?? 'refs/remotes/origin/HEAD', '--']);
  }
  if (repo.stagingRef !== undefined) {
    await fetchRef(git, 'staging', dir, cwd, repo.url, repo.stagingRef);
    await git.run('staging', dir, cwd, ['checkout', '-q', '--detach', repo.stagingRef, '--']);
  }
  for (const ref of repo.merges ?? []) await merge(git, dir, cwd, repo.url, ref);
  return (await git.run('checkout', dir, cwd, ['rev-parse', '--verify', '--end-of-options', 'HEAD^{commit}'])).trim();
}

function fetchRef(git: Git, phase: string, dir: string, cwd: string, url: string, ref: string) {
  return git.run(phase, dir, cwd, ['fetch', '--no-tags', '--quiet', '--update-head-ok', '--', url, `+${ref}:${ref}`]);
}

async function merge(git: Git, dir: string, cwd: string, url: string, ref: string): Promise<void> {
  const phase = `merge ${ref}`;
  await fetchRef(git, phase, dir, cwd, url, ref);
  const merged = await git.tryRun(cwd, [...identity, 'merge', '--no-stat', '--squash', '--', ref]);
  if (merged.exitCode !== 0) {
    // Never hand out a half-merged tree: back to the last commit, untracked leftovers gone.
    await git.tryRun(cwd, ['reset', '--hard', '-q']);
    await git.tryRun(cwd, ['clean', '-ffdx', '-q']);
    const conflict = /CONFLICT|conflict/.test(merged.stdout + merged.stderr);
    throw new GitStepError(phase, dir, merged.exitCode, merged.stdout + merged.stderr, conflict ? `merge of ${ref} conflicts in ${dir}` : undefined);
  }
  await git.run(phase, dir, cwd, [...identity, 'commit', '-q', '--no-verify', '--allow-empty', '-m', `Squash merge of ${ref}`]);
}
