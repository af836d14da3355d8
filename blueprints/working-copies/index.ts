import { posix } from 'node:path';
import { defineBlueprint, type Blueprint, type BlueprintOptions, type CommandInterface, type FilesystemInterface } from '../../lib/index.js';
import { clone, prepare } from './checkout.js';
import { validateWorkingCopiesConfig, type WorkingCopiesConfig } from './config.js';
import { Git } from './git.js';
import { parseLeaseAttributes, urlsOf, type WorkingCopiesLeaseAttributes } from './spec.js';
import { redact } from './validate.js';

export type { WorkingCopiesConfig } from './config.js';
export type { WorkingCopiesLeaseAttributes, RepositorySpec } from './spec.js';
export { GitStepError } from './git-step-error.js';

/** Attributes of a working-copy resource. */
export type WorkingCopiesResourceAttributes = {
  /** The working copy's root on its host: `lease.interface('filesystem').path`. */
  root: string;
  /** dir → url of the repositories it holds (cloned once, reused by every lease). */
  repositories: Record<string, string>;
};

const HOST = 'host';
const slotKey = (resourceId: string) => `working-copies:${resourceId}:lease`;

async function hostCommand(ctx: { childLease(key: string): Promise<{ interface(name: 'command'): CommandInterface }> }): Promise<CommandInterface> {
  return (await ctx.childLease(HOST)).interface('command');
}

/** Does a working copy holding `held` serve a lease asking for `wanted`? Same dir → url for each wanted; with strict, nothing else. */
export function holds(held: Record<string, string>, wanted: Record<string, string>, strict: boolean): boolean {
  const wantedDirs = Object.keys(wanted);
  if (wantedDirs.some((dir) => held[dir] !== wanted[dir])) return false;
  return !strict || Object.keys(held).length === wantedDirs.length;
}

const implementation = defineBlueprint<WorkingCopiesConfig, WorkingCopiesResourceAttributes, WorkingCopiesLeaseAttributes>({
  type: 'working-copy',
  description: 'Git working copies on a host lease: cloned once per resource, cleaned and checked out per lease, every git command through the host\'s command interface.',
  validateConfig: validateWorkingCopiesConfig,

  // Throws a ValidationError naming the field for a hostile value: the lease breaks before any process starts.
  canEverAllocate(ctx) {
    parseLeaseAttributes(ctx.lease.attributes);
    return true;
  },

  async allocateResource(ctx) {
    if (!ctx.lease) throw new Error('a working copy is built for a lease, and none is waiting for it');
    const wanted = parseLeaseAttributes(ctx.lease.attributes);
    const { hosts, root: configuredRoot } = ctx.blueprint.config;
    const host = await ctx.acquireLease({ type: 'host', ...(hosts ? { blueprints: hosts } : {}) }, { key: HOST });
    const root = configuredRoot ? posix.join(configuredRoot, ctx.resource.id) : posix.join(host.interface('filesystem').path, 'working-copy');
    const git = new Git(host.interface('command'), ctx.signal);
    const repositories = urlsOf(wanted);
    for (const [dir, url] of Object.entries(repositories)) {
      await ctx.log('working-copies.clone', { dir, url: redact(url) });
      await clone(git, root, dir, url);
    }
    return { attributes: { root, repositories } };
  },

  canAcquireLease(ctx) {
    const wanted = parseLeaseAttributes(ctx.lease.attributes);
    return ctx.resource.leaseCount === 0 && holds(ctx.resource.attributes.repositories ?? {}, urlsOf(wanted), wanted.strict === true);
  },

  // One lease at a time per working copy, across processes.
  async acquireLease(ctx) {
    ctx.lockSlots([slotKey(ctx.resource.id)]);
  },

  async activateLease(ctx) {
    const wanted = parseLeaseAttributes(ctx.lease.attributes);
    const git = new Git(await hostCommand(ctx), ctx.signal);
    const repositories: WorkingCopiesLeaseAttributes['repositories'] = {};
    for (const [dir, repo] of Object.entries(wanted.repositories)) {
      try {
        const head = await prepare(git, ctx.resource.attributes.root, dir, repo);
        repositories[dir] = { ...repo, head };
        await ctx.log('working-copies.checked-out', { dir, head });
      } catch (error) {
        await ctx.log('working-copies.git-failed', { dir, message: redact((error as Error).message) });
        throw error;
      }
    }
    return { attributes: { repositories } };
  },

  async destroyResource(ctx) {
    const root = ctx.resource.attributes.root;
    if (!root) return; // never allocated: nothing on the host
    let command: CommandInterface;
    try {
      command = await hostCommand(ctx);
    } catch {
      return; // the host lease is gone, and its scratch directory with it
    }
    await new Git(command, ctx.signal).remove(root);
    await ctx.log('working-copies.removed', { root });
  },

  interfaces: {
    filesystem: (ctx): FilesystemInterface => ({ path: ctx.resource.attributes.root }),
    // Runs on the host, in the working copy: `cwd` is relative to its root (`{ cwd: 'app' }` is the checkout of `app`).
    command: (ctx): CommandInterface => ({
      run: async (argv, options) => {
        const root = ctx.resource.attributes.root;
        const cwd = options?.cwd === undefined ? root : posix.isAbsolute(options.cwd) ? options.cwd : posix.join(root, options.cwd);
        const signal = options?.signal ? AbortSignal.any([options.signal, ctx.signal]) : ctx.signal;
        return (await hostCommand(ctx)).run(argv, { ...options, cwd, signal });
      },
    }),
  },

  logTypes: {
    'working-copies.clone': (data) => `Cloning ${String(data.url)} into ${String(data.dir)}.`,
    'working-copies.checked-out': (data) => `${String(data.dir)} is at ${String(data.head)}.`,
    'working-copies.git-failed': (data) => `git failed in ${String(data.dir)}: ${String(data.message)}`,
    'working-copies.removed': (data) => `Working copy ${String(data.root)} removed.`,
  },
});

/**
 * Git working copies (type `working-copy`) on any `host` blueprint:
 * `workingCopies({ name: 'wc', config: { hosts: ['local'] } })`. One lease at a time per
 * working copy; a working copy is reused by a lease asking for the same `<dir> → url`.
 */
export function workingCopies(options: BlueprintOptions<WorkingCopiesConfig>): Blueprint<WorkingCopiesConfig, WorkingCopiesResourceAttributes, WorkingCopiesLeaseAttributes> {
  if (!options || typeof options !== 'object' || Array.isArray(options)) return implementation(options);
  return implementation({ ...options, limits: { maxLeasesPerResource: 1, ...(options.limits ?? {}) } });
}
