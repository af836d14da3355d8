import { hostname } from 'node:os';
import { defineBlueprint, ValidationError, type Blueprint, type BlueprintOptions, type FilesystemInterface } from '../../lib/index.js';
import { KILL_GRACE_MS } from '../command-options.js';
import { commandInterface } from './command.js';
import { validateLocalHostsConfig, type LocalHostsConfig, type LocalHostsSettings } from './config.js';
import { createDirectory, leaseDirectory, removeDirectory } from './lease-directory.js';
import { removeRegistry, stopLeaseProcesses } from './process-registry.js';

export type { LocalHostsConfig } from './config.js';
export { CommandStartError } from './command-error.js';

/** Attributes of the local machine's resource. */
export type LocalHostsResourceAttributes = {
  hostname: string;
  /** The directory holding the leases' scratch directories. */
  root: string;
};

/** Attributes this blueprint adds to a lease, next to the requester's own. */
export type LocalHostsLeaseAttributes = {
  /** The slot index the lease holds, from 0 to `slots - 1`. */
  slot: number;
  /** The lease's scratch directory, also `lease.interface('filesystem').path`. */
  path: string;
};

const slotKey = (resourceId: string, index: number) => `local-hosts:${resourceId}:slot:${index}`;

// validateConfig fills in every default, so the hooks may read the config as settings.
const settings = (config: LocalHostsConfig) => config as LocalHostsSettings;

const implementation = defineBlueprint<LocalHostsConfig, LocalHostsResourceAttributes, LocalHostsLeaseAttributes>({
  type: 'host',
  description: 'The local machine: a slot per concurrent lease, a scratch directory per lease, commands run as this process.',
  validateConfig: validateLocalHostsConfig,

  async allocateResource(ctx) {
    return { attributes: { hostname: hostname(), root: settings(ctx.blueprint.config).root } };
  },

  async activateResource(ctx) {
    await createDirectory(settings(ctx.blueprint.config).root);
  },

  canAcquireLease: (ctx) => ctx.resource.leaseCount < settings(ctx.blueprint.config).slots,

  // The library picks a free one of the resource's slots; the lock makes it exclusive across processes.
  async acquireLease(ctx) {
    const keys = Array.from({ length: settings(ctx.blueprint.config).slots }, (_, i) => slotKey(ctx.resource.id, i));
    const key = await ctx.lockOneOf(keys);
    return { attributes: { slot: keys.indexOf(key) } };
  },

  async activateLease(ctx) {
    const path = leaseDirectory(settings(ctx.blueprint.config).root, ctx.lease.id);
    await createDirectory(path);
    await ctx.log('local-hosts.directory-created', { path });
    return { attributes: { path } };
  },

  // The lease's processes go first, wherever they were started, and only then its
  // directory: its slot (held until this returns) is never reused under a live process.
  async destroyLease(ctx) {
    const root = settings(ctx.blueprint.config).root;
    const path = leaseDirectory(root, ctx.lease.id);
    const stopped = await stopLeaseProcesses(root, ctx.lease.id, { graceMs: KILL_GRACE_MS });
    if (stopped > 0) await ctx.log('local-hosts.processes-stopped', { count: stopped });
    await removeDirectory(path);
    // After the directory: until then the registry's marker keeps new commands from starting.
    await removeRegistry(root, ctx.lease.id);
    await ctx.log('local-hosts.directory-removed', { path });
  },

  // No destroyResource: the machine outlives its resource record, there is nothing to tear down.

  interfaces: {
    command: (ctx) => {
      const root = settings(ctx.blueprint.config).root;
      return commandInterface({ id: ctx.lease.id, directory: leaseDirectory(root, ctx.lease.id), root, signal: () => ctx.signal });
    },
    filesystem: (ctx): FilesystemInterface => ({ path: leaseDirectory(settings(ctx.blueprint.config).root, ctx.lease.id) }),
  },

  logTypes: {
    'local-hosts.directory-created': (data) => `Scratch directory ${String(data.path)} created.`,
    'local-hosts.directory-removed': (data) => `Scratch directory ${String(data.path)} removed.`,
    'local-hosts.processes-stopped': (data) => `Stopped ${String(data.count)} process group(s) the lease's commands left running.`,
  },
});

/**
 * The local machine as a `host` resource: `localHosts({ name: 'local', config: { slots: 2 } })`.
 *
 * One resource stands for the machine, so `limits.maxResources` is always 1: a second
 * resource would be the same machine again and double its slots. Concurrency is `config.slots`.
 */
export function localHosts(options: BlueprintOptions<LocalHostsConfig>): Blueprint<LocalHostsConfig, LocalHostsResourceAttributes, LocalHostsLeaseAttributes> {
  // Not an object: the implementation's own check names it (`blueprint`), before anything is spread.
  if (!options || typeof options !== 'object' || Array.isArray(options)) return implementation(options);
  const limits = options.limits;
  if (limits === undefined || (limits !== null && typeof limits === 'object')) {
    if (limits?.maxResources !== undefined && limits.maxResources !== 1) {
      throw new ValidationError('limits.maxResources', `must be 1 for localHosts: one resource is the local machine (got ${JSON.stringify(limits.maxResources)}); use config.slots for concurrency`);
    }
    // Each lease holds one of `slots` slot locks: the resource is full at `slots` leases.
    const slots = (options.config as LocalHostsConfig | undefined)?.slots ?? 1;
    return implementation({ ...options, limits: { ...(Number.isInteger(slots) ? { maxLeasesPerResource: slots } : {}), ...limits, maxResources: 1 } });
  }
  return implementation(options);
}
