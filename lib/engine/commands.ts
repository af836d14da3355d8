import { DateTime } from 'luxon';
import { LEASE_STATE_FLAGS, RESOURCE_STATE_FLAGS, type ObjectKind } from '../model/states.js';
import type { AlsoWrite, CommandRow, LeaseRow, ResourceRow, Unit } from '../store/store.js';
import { crashPoint } from './crash-points.js';
import type { LeaseMoved, Runtime } from './runtime.js';

/**
 * Consumes an object's unconsumed commands in order, each in the statement or
 * transaction of the status change it causes, so its effect happens exactly once. A
 * command the object cannot honour (released twice, a reclaim of a leased resource) is
 * consumed with the reason, never left behind. Returns the lease as the last command
 * left it when that is known without a read (commands written meanwhile wake the
 * object's work item, so its next pass sees them), or null.
 */
export async function consumeCommands(rt: Runtime, kind: ObjectKind, id: string, known?: LeaseRow): Promise<LeaseMoved | null> {
  const { store } = rt;
  const commands = known?.commands ?? (await store.commands(kind, id));
  let moved: LeaseMoved | null = null;
  // The lease as its worker just read it (no one else moves its status while the worker
  // holds its claim) serves the first command; after a command it is read again.
  let lease: LeaseRow | undefined = known;
  for (const command of commands) {
    crashPoint('command.read');
    // A command with no effect leaves the lease as the last one that had one left it.
    if (kind === 'lease') moved = (await applyToLease(rt, id, command, lease)) ?? moved;
    else await applyToResource(rt, id, command);
    lease = undefined;
    crashPoint('command.consumed');
  }
  if (moved) moved.lease.hasCommands = false;
  return moved;
}

/**
 * Whether a release or break of this object waits to be consumed. A worker asks before it
 * records a long hook's result as an activation: the command was written while the hook
 * ran, and must win over the late result (GARM's lost status update), not follow it.
 */
export async function stopRequested(rt: Runtime, u: Unit, kind: ObjectKind, id: string): Promise<boolean> {
  return (await rt.store.commands(kind, id, u.sql)).some((c) => c.command === 'release' || c.command === 'break');
}

/** The consumption of a command, as a write in the statement of the CAS it causes. */
function consumedWith(rt: Runtime, command: CommandRow, now: Unit['now']): AlsoWrite {
  return rt.store.consumedWith(command.id, now);
}

async function applyToLease(rt: Runtime, id: string, command: CommandRow, known: LeaseRow | undefined): Promise<LeaseMoved | null> {
  const { store } = rt;
  const lease = known ?? (await store.lease(id));
  if (!lease) {
    await store.single((u) => store.consume(u, command.id, 'rejected: no such lease'));
    return null;
  }
  if (command.command === 'reclaim') {
    await store.unit((u) => reject(rt, u, command, 'a lease cannot be reclaimed', { lease: lease.id }));
    return null;
  }
  if (command.command === 'extend') return extend(rt, lease, command);
  if (!LEASE_STATE_FLAGS[lease.status].releasable) {
    await store.single((u) => store.consume(u, command.id, `no effect: lease is already ${lease.status}`));
    return null;
  }
  const reason = typeof command.data.reason === 'string' ? command.data.reason : command.command === 'break' ? 'broken' : 'released';
  const release = command.command === 'release';
  const apply = async (u: Unit) => {
    // A release records the intent to destroy with it: the lease's next step runs
    // releaseLease and destroyLease at once, without another write.
    const row = await store.casLease(
      u,
      lease.id,
      lease.status,
      release ? 'released' : 'broken',
      release ? { phase: 'destroy', phase_attempts: 1 } : { broken_reason: reason },
      {
        logs: [release ? { type: 'lease.released', data: { reason, author: command.author }, lease: lease.id } : { type: 'lease.broken', data: { reason }, lease: lease.id }],
        also: [consumedWith(rt, command, u.now)],
      },
    );
    // The row the CAS returns, not the one read before it: a hand-off may have pointed the
    // lease at a reserved resource in between, and that reservation must be freed now.
    // (A lease past pending keeps the pointer it was acquired with, reserving nothing.)
    if (lease.status === 'pending') await store.dropReservation(u, row);
    return row;
  };
  // Only a pending lease can hold a reservation (a hand-off points only at pending leases):
  // the others need no second statement, so no transaction.
  const row = lease.status === 'pending' ? await store.unit(apply) : await store.single(apply);
  return { lease: row, intent: release ? 'destroy' : undefined };
}

/**
 * Moves a live lease's expiry to the command's `until`. Refused when the lease is on its
 * way out, when it is active and its expiry has passed already (its holder's signal has
 * aborted: the lease is over even if this worker has not released it yet), or when `until`
 * has passed by now. Both times are judged holding the lease's row, which the signal's read
 * at the expiry waits for: judged before, a renewal could commit after the holder had read
 * the old expiry and been told the lease expired.
 */
async function extend(rt: Runtime, lease: LeaseRow, command: CommandRow): Promise<LeaseMoved | null> {
  const { store } = rt;
  const until = typeof command.data.until === 'string' ? DateTime.fromISO(command.data.until, { setZone: true }) : null;
  const refusal = !LEASE_STATE_FLAGS[lease.status].live ? `no effect: lease is already ${lease.status}` : !until?.isValid ? 'rejected: no valid until' : null;
  if (refusal) {
    await store.single((u) => store.consume(u, command.id, refusal));
    return null;
  }
  return store.unit(async (u) => {
    const expiresAt = await store.lockLeaseExpiry(u, lease.id, lease.status);
    // Its status moved under it (not by this worker): the next pass reads it and the command again.
    if (expiresAt === undefined) return null;
    const now = rt.clock.now();
    // An active lease past its expiry is over: its holder's signal has aborted. One not active
    // yet has no holder to tell, and a renewal written while a hook ran (a keepalive) keeps it.
    let late: string | null = null;
    if (lease.status === 'active' && expiresAt && expiresAt <= now) late = `rejected: lease expired at ${expiresAt.toUTC().toISO()}`;
    else if (until! <= now) late = `rejected: ${until!.toUTC().toISO()} has passed`;
    if (late) {
      await store.consume(u, command.id, late);
      return null;
    }
    const row = await store.extendLease(u, lease, until!, command.id, { type: 'lease.extended', data: { from: expiresAt?.toUTC().toISO() ?? null, to: until!.toUTC().toISO()!, author: command.author }, lease: lease.id });
    return row ? { lease: row } : null;
  });
}

async function applyToResource(rt: Runtime, id: string, command: CommandRow): Promise<void> {
  const { store } = rt;
  await store.unit(async (u) => {
    let resource = await store.resource(id, u.sql);
    if (!resource) {
      await store.consume(u, command.id, 'rejected: no such resource');
      return;
    }
    const reason = typeof command.data.reason === 'string' ? command.data.reason : command.command;
    if (!RESOURCE_STATE_FLAGS[resource.status].releasable) {
      await store.consume(u, command.id, `no effect: resource is already ${resource.status}`);
      return;
    }
    if (command.command === 'reclaim') {
      // Lock the row before reading its lease count: an acquisition holds this row lock until
      // it commits, so either its lease is counted here or it finds the resource released.
      const locked = await store.lockResource(u, resource.id);
      resource = { ...resource, status: locked?.status ?? resource.status, reservedFor: locked ? locked.reservedFor : resource.reservedFor, leaseCount: locked?.leaseCount ?? 0 };
      if (resource.status !== 'active' || resource.leaseCount > 0 || resource.reservedFor) {
        return reject(rt, u, command, resource.status !== 'active' ? `resource is ${resource.status}` : 'resource is in use', { resource: resource.id, blueprint: resource.blueprint });
      }
      await store.casResource(u, resource.id, 'active', 'released', {}, {
        logs: [{ type: 'resource.reclaimed', data: { lease: typeof command.data.lease === 'string' ? command.data.lease : null }, resource: resource.id, blueprint: resource.blueprint }],
      });
    } else if (command.command === 'release') {
      await store.casResource(u, resource.id, resource.status, 'released', {}, {
        logs: [{ type: 'resource.released', data: { reason, author: command.author }, resource: resource.id, blueprint: resource.blueprint }],
      });
      await tellLeases(rt, u, resource, 'release', `resource ${resource.id} was released`);
    } else {
      await breakResource(rt, u, resource, reason);
    }
    await store.consume(u, command.id, 'applied');
  });
}

async function reject(rt: Runtime, u: Unit, command: CommandRow, reason: string, target: { lease?: string; resource?: string; blueprint?: string }) {
  await rt.store.consume(u, command.id, `rejected: ${reason}`);
  await rt.store.log(u, { type: 'command.rejected', data: { command: command.command, reason }, ...target });
}

/** In the transaction that breaks a resource: its active leases break with the cause, and the leases waiting on it allocate again. */
export async function breakResource(rt: Runtime, u: Unit, resource: ResourceRow, reason: string, sets: Record<string, unknown> = {}) {
  const { store } = rt;
  await store.casResource(u, resource.id, resource.status, 'broken', { broken_reason: reason, reserved_for: null, ...sets }, {
    logs: [{ type: 'resource.broken', data: { reason }, resource: resource.id, blueprint: resource.blueprint }],
  });
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

