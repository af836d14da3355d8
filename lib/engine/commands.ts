import { LEASE_STATE_FLAGS, RESOURCE_STATE_FLAGS, type ObjectKind } from '../model/states.js';
import type { CommandRow, LeaseRow, ResourceRow, Unit } from '../store/store.js';
import { crashPoint } from './crash-points.js';
import type { Runtime } from './runtime.js';

/**
 * Consumes an object's unconsumed commands in order, each in the transaction of the
 * status change it causes, so its effect happens exactly once. A command the object
 * cannot honour (released twice, a reclaim of a leased resource) is consumed with the
 * reason, never left behind. Returns whether any command was consumed.
 */
export async function consumeCommands(rt: Runtime, kind: ObjectKind, id: string): Promise<boolean> {
  const { store } = rt;
  const commands = await store.commands(kind, id);
  for (const command of commands) {
    crashPoint('command.read');
    await store.unit(async (u) => {
      if (kind === 'lease') {
        const lease = await store.lease(id, u.sql);
        if (lease) await applyToLease(rt, u, lease, command);
        else await store.consume(u, command.id, 'rejected: no such lease');
      } else {
        const resource = await store.resource(id, u.sql);
        if (resource) await applyToResource(rt, u, resource, command);
        else await store.consume(u, command.id, 'rejected: no such resource');
      }
    });
    crashPoint('command.consumed');
  }
  return commands.length > 0;
}

/**
 * Whether a release or break of this object waits to be consumed. A worker asks before it
 * records a long hook's result as an activation: the command was written while the hook
 * ran, and must win over the late result (GARM's lost status update), not follow it.
 */
export async function stopRequested(rt: Runtime, u: Unit, kind: ObjectKind, id: string): Promise<boolean> {
  return (await rt.store.commands(kind, id, u.sql)).some((c) => c.command === 'release' || c.command === 'break');
}

async function applyToLease(rt: Runtime, u: Unit, lease: LeaseRow, command: CommandRow) {
  const { store } = rt;
  const reason = typeof command.data.reason === 'string' ? command.data.reason : command.command === 'break' ? 'broken' : 'released';
  if (command.command === 'reclaim') return reject(rt, u, command, 'a lease cannot be reclaimed', { lease: lease.id });
  if (!LEASE_STATE_FLAGS[lease.status].releasable) {
    await store.consume(u, command.id, `no effect: lease is already ${lease.status}`);
    return;
  }
  // The row the CAS returns, not the one read before it: a hand-off may have pointed the lease
  // at a reserved resource in between, and that reservation must be freed now.
  let left: LeaseRow;
  if (command.command === 'release') {
    left = await store.casLease(u, lease.id, lease.status, 'released');
    await store.log(u, { type: 'lease.released', data: { reason, author: command.author }, lease: lease.id });
  } else {
    left = await store.casLease(u, lease.id, lease.status, 'broken', { broken_reason: reason });
    await store.log(u, { type: 'lease.broken', data: { reason }, lease: lease.id });
  }
  await store.leaseLeftLive(u, left);
  await store.consume(u, command.id, 'applied');
}

async function applyToResource(rt: Runtime, u: Unit, resource: ResourceRow, command: CommandRow) {
  const { store } = rt;
  const reason = typeof command.data.reason === 'string' ? command.data.reason : command.command;
  if (!RESOURCE_STATE_FLAGS[resource.status].releasable) {
    await store.consume(u, command.id, `no effect: resource is already ${resource.status}`);
    return;
  }
  if (command.command === 'reclaim') {
    // Lock the row before counting its leases: an acquisition holds this row lock until it
    // commits, so either its lease is counted here or it finds the resource released. Counting
    // first let an acquisition commit between the count and the CAS (seen on Postgres).
    const [locked] = await u.sql.query(`SELECT status, reserved_for FROM ${store.s}.resources WHERE id = $1 FOR UPDATE`, [resource.id]);
    resource = { ...resource, status: locked?.status ?? resource.status, reservedFor: locked ? (locked.reserved_for ?? null) : resource.reservedFor };
    const leases = await store.liveLeaseCount(resource.id, u.sql);
    if (resource.status !== 'active' || leases > 0 || resource.reservedFor) {
      return reject(rt, u, command, resource.status !== 'active' ? `resource is ${resource.status}` : 'resource is in use', { resource: resource.id, blueprint: resource.blueprint });
    }
    await store.casResource(u, resource.id, 'active', 'released');
    await store.log(u, { type: 'resource.reclaimed', data: { lease: typeof command.data.lease === 'string' ? command.data.lease : null }, resource: resource.id, blueprint: resource.blueprint });
  } else if (command.command === 'release') {
    await store.casResource(u, resource.id, resource.status, 'released');
    await store.log(u, { type: 'resource.released', data: { reason, author: command.author }, resource: resource.id, blueprint: resource.blueprint });
    await tellLeases(rt, u, resource, 'release', `resource ${resource.id} was released`);
  } else {
    await breakResource(rt, u, resource, reason);
  }
  await store.consume(u, command.id, 'applied');
}

async function reject(rt: Runtime, u: Unit, command: CommandRow, reason: string, target: { lease?: string; resource?: string; blueprint?: string }) {
  await rt.store.consume(u, command.id, `rejected: ${reason}`);
  await rt.store.log(u, { type: 'command.rejected', data: { command: command.command, reason }, ...target });
}

/** In the transaction that breaks a resource: its active leases break with the cause, and the leases waiting on it allocate again. */
export async function breakResource(rt: Runtime, u: Unit, resource: ResourceRow, reason: string) {
  const { store } = rt;
  await store.casResource(u, resource.id, resource.status, 'broken', { broken_reason: reason, reserved_for: null });
  await store.log(u, { type: 'resource.broken', data: { reason }, resource: resource.id, blueprint: resource.blueprint });
  await tellLeases(rt, u, resource, 'break', `resource ${resource.id} broke: ${reason}`);
  if (resource.reservedFor) await store.wake(u, 'lease', [resource.reservedFor]);
}

/** Commands to the live leases of a resource; those only acquired (not active yet) are woken to go back to allocation. */
async function tellLeases(rt: Runtime, u: Unit, resource: ResourceRow, command: 'release' | 'break', reason: string) {
  const { store } = rt;
  for (const lease of await store.leasesOnResource(resource.id, u.sql)) {
    if (lease.status === 'active' || (lease.status === 'acquired' && command === 'release')) {
      await store.command(u, 'lease', lease.id, command, { reason }, `resource:${resource.id}`);
    } else if (lease.status === 'acquired') {
      await store.wake(u, 'lease', [lease.id]);
    }
  }
}
