import { posix } from 'node:path';
import { defineBlueprint, ValidationError, type Blueprint, type BlueprintOptions, type FilesystemInterface } from '../../lib/index.js';
import { KILL_GRACE_MS } from '../command-options.js';
import { commandInterface } from './command.js';
import { hostKey, validateSshHostsConfig, type SshHostsConfig, type SshHostsSettings } from './config.js';
import { closeMaster, controlPathOf, ensureMaster } from './master.js';
import { CREATE_LEASE, DESTROY_LEASE } from './remote-scripts.js';
import type { SshTarget } from './ssh-args.js';
import { runScriptOrThrow } from './ssh-process.js';

export type { SshHostsConfig, SshHostConfig } from './config.js';
export { SshError } from './ssh-error.js';

/** Attributes of one machine's resource. */
export type SshHostsResourceAttributes = {
  host: string;
  port: number;
  /** The remote user, or null for ssh's choice. */
  user: string | null;
  /** The directory on the host holding the leases' scratch directories. */
  root: string;
};

/** Attributes this blueprint adds to a lease, next to the requester's own. */
export type SshHostsLeaseAttributes = {
  /** The slot index the lease holds on its host, from 0 to `slots - 1`. */
  slot: number;
  /** The lease's scratch directory on the host, also `lease.interface('filesystem').path`. */
  path: string;
};

/** How long one of the blueprint's own steps on a host may take (a destroy stops processes with a grace period first). */
const STEP_TIMEOUT_MS = 60_000;

const hostSlotKey = (blueprint: string, key: string) => `ssh-hosts:${blueprint}:host:${key}`;
const leaseSlotKey = (resourceId: string, index: number) => `ssh-hosts:${resourceId}:slot:${index}`;

// validateConfig fills in every default, so the hooks may read the config as settings.
const settings = (config: SshHostsConfig) => config as unknown as SshHostsSettings;

const SAFE_NAME = /^[A-Za-z0-9._-]+$/;

/**
 * A lease's scratch directory, `<root>/<lease id>`, and its process registry,
 * `<root>/.processes/<lease id>`. Computed from the resource's root and the lease id,
 * never from lease attributes, which the requester also writes: these are removed with
 * `rm -rf`.
 */
function leasePaths(root: string, leaseId: string): { directory: string; registry: string } {
  if (!SAFE_NAME.test(leaseId) || leaseId.includes('..')) throw new ValidationError('lease.id', `cannot name a directory: ${JSON.stringify(leaseId)}`);
  return { directory: posix.join(root, leaseId), registry: posix.join(root, '.processes', leaseId) };
}

function targetOf(resource: { id: string; attributes: SshHostsResourceAttributes }): SshTarget {
  const { host, port, user } = resource.attributes;
  return { host, port, user: user ?? null, controlPath: controlPathOf(resource.id) };
}

/** The configured slots of a resource's host; 1 if the host left the config since. */
function slotsOf(config: SshHostsSettings, attributes: SshHostsResourceAttributes): number {
  const key = hostKey({ host: attributes.host, port: attributes.port, user: attributes.user ?? null });
  return config.hosts.find((h) => hostKey(h) === key)?.slots ?? 1;
}

const implementation = defineBlueprint<SshHostsConfig, SshHostsResourceAttributes, SshHostsLeaseAttributes>({
  type: 'host',
  description: 'A static pool of machines reached with the system ssh: one resource per host, a slot per concurrent lease, a scratch directory per lease, commands over one multiplexed connection.',
  validateConfig: (config) => validateSshHostsConfig(config) as unknown as SshHostsConfig,

  // One resource per configured host: the host is chosen by a slot lock held for the
  // resource's life, so two brokers sharing a database never build two for one machine.
  async allocateResource(ctx) {
    const s = settings(ctx.blueprint.config);
    const keys = s.hosts.map((h) => hostSlotKey(ctx.blueprint.name, hostKey(h)));
    const host = s.hosts[keys.indexOf(await ctx.lockOneOf(keys))]!;
    return { attributes: { host: host.host, port: host.port, user: host.user, root: s.root } };
  },

  // Connects (the master connection, which checks the host key) and creates the root: a
  // host that cannot be reached, or whose key is wrong, breaks here, before any lease.
  async activateResource(ctx) {
    const s = settings(ctx.blueprint.config);
    const target = targetOf(ctx.resource);
    await ensureMaster(s, target);
    await runScriptOrThrow(s, target, `create ${ctx.resource.attributes.root}`, CREATE_LEASE, [ctx.resource.attributes.root], STEP_TIMEOUT_MS);
    await ctx.log('ssh-hosts.connected', { host: hostKey(target) });
  },

  canAcquireLease: (ctx) => ctx.resource.leaseCount < slotsOf(settings(ctx.blueprint.config), ctx.resource.attributes),

  async acquireLease(ctx) {
    const keys = Array.from({ length: slotsOf(settings(ctx.blueprint.config), ctx.resource.attributes) }, (_, i) => leaseSlotKey(ctx.resource.id, i));
    const key = await ctx.lockOneOf(keys);
    return { attributes: { slot: keys.indexOf(key) } };
  },

  async activateLease(ctx) {
    const target = targetOf(ctx.resource);
    const { directory } = leasePaths(ctx.resource.attributes.root, ctx.lease.id);
    await ensureMaster(settings(ctx.blueprint.config), target);
    await runScriptOrThrow(settings(ctx.blueprint.config), target, `create the lease directory ${directory}`, CREATE_LEASE, [directory], STEP_TIMEOUT_MS);
    await ctx.log('ssh-hosts.directory-created', { host: hostKey(target), path: directory });
    return { attributes: { path: directory } };
  },

  // The lease's processes go first, and only then its directory: its slot (held until
  // this returns) is never reused under a live process. A host that cannot be reached
  // fails the destroy, which is retried with backoff.
  async destroyLease(ctx) {
    const s = settings(ctx.blueprint.config);
    const target = targetOf(ctx.resource);
    const { directory, registry } = leasePaths(ctx.resource.attributes.root, ctx.lease.id);
    await ensureMaster(s, target);
    const out = await runScriptOrThrow(s, target, `destroy the lease directory ${directory}`, DESTROY_LEASE, [registry, directory, String(KILL_GRACE_MS / 100)], STEP_TIMEOUT_MS);
    const stopped = Number.parseInt(out.trim(), 10) || 0;
    if (stopped > 0) await ctx.log('ssh-hosts.processes-stopped', { host: hostKey(target), count: stopped });
    await ctx.log('ssh-hosts.directory-removed', { host: hostKey(target), path: directory });
  },

  // The machine outlives its resource: only the connection goes.
  async destroyResource(ctx) {
    if (!ctx.resource.attributes.host) return; // never allocated
    const target = targetOf(ctx.resource);
    await closeMaster(settings(ctx.blueprint.config), target);
    await ctx.log('ssh-hosts.disconnected', { host: hostKey(target) });
  },

  interfaces: {
    command: (ctx) => {
      const paths = leasePaths(ctx.resource.attributes.root, ctx.lease.id);
      return commandInterface({ id: ctx.lease.id, ...paths, settings: settings(ctx.blueprint.config), target: targetOf(ctx.resource), signal: () => ctx.signal });
    },
    filesystem: (ctx): FilesystemInterface => ({ path: leasePaths(ctx.resource.attributes.root, ctx.lease.id).directory }),
  },

  logTypes: {
    'ssh-hosts.connected': (data) => `Connected to ${String(data.host)}.`,
    'ssh-hosts.disconnected': (data) => `Closed the connection to ${String(data.host)}.`,
    'ssh-hosts.directory-created': (data) => `Scratch directory ${String(data.path)} created on ${String(data.host)}.`,
    'ssh-hosts.directory-removed': (data) => `Scratch directory ${String(data.path)} removed on ${String(data.host)}.`,
    'ssh-hosts.processes-stopped': (data) => `Stopped ${String(data.count)} process group(s) the lease's commands left running on ${String(data.host)}.`,
  },
});

/**
 * A static pool of machines reached with the system `ssh`, as `host` resources:
 * `sshHosts({ name: 'builders', config: { hosts: [{ host: 'build-1.example.com', slots: 4 }] } })`.
 *
 * One resource per configured host, so `limits.maxResources` is at most the number of
 * hosts (and defaults to it); concurrency is each host's `slots`.
 */
export function sshHosts(options: BlueprintOptions<SshHostsConfig>): Blueprint<SshHostsConfig, SshHostsResourceAttributes, SshHostsLeaseAttributes> {
  // Not an object: the implementation's own check names it (`blueprint`), before anything is spread.
  if (!options || typeof options !== 'object' || Array.isArray(options)) return implementation(options);
  const limits = options.limits;
  const hosts = (options.config as { hosts?: unknown } | undefined)?.hosts;
  // A bad config is the implementation's to refuse, naming the field.
  if (!Array.isArray(hosts) || (limits !== undefined && (limits === null || typeof limits !== 'object'))) return implementation(options);
  if (limits?.maxResources !== undefined && (typeof limits.maxResources !== 'number' || limits.maxResources > hosts.length)) {
    throw new ValidationError('limits.maxResources', `must be at most ${hosts.length} for sshHosts: one resource per configured host (got ${JSON.stringify(limits.maxResources)})`);
  }
  // Each lease holds one of its host's slot locks; with equal slots the allocator skips full hosts itself.
  const slots = hosts.map((h) => (h as { slots?: unknown } | null)?.slots ?? 1);
  const same = slots.every((n) => n === slots[0]) && Number.isInteger(slots[0]);
  return implementation({ ...options, limits: { ...(same ? { maxLeasesPerResource: slots[0] as number } : {}), ...limits, maxResources: limits?.maxResources ?? hosts.length } });
}
