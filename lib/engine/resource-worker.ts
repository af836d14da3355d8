import { after } from '../time.js';
import { DateTime } from 'luxon';
import { SlotRequest } from './slot-choice.js';
import type { Blueprint } from '../blueprint/contract.js';
import { ChildLeaseCycleError } from '../errors/child-lease-cycle-error.js';
import { LeaseBrokenError } from '../errors/lease-broken-error.js';
import { SlotLockConflictError } from '../errors/slot-lock-conflict-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { normalizeSpec, type JsonObject, type LeaseSpec, type NormalizedSpec } from '../model/spec.js';
import { type LeaseRow, type ResourceRow, type Unit } from '../store/store.js';
import { breakResource, consumeCommands, stopRequested } from './commands.js';
import { baseContext, callHook, hookFailureLog, leaseView, resourceView, retryDestroy, retryPhase, WaitingForChild } from './hooks.js';
import { retiredBecause, retiresAt } from './retirement.js';
import { mayExpireIdle } from './warm-pool.js';
import { at, backoffDelay, blueprintsForType, DROP_WORK, PARK, type Outcome, type Runtime } from './runtime.js';

export interface ResourceClaim {
  id: string;
  attempts: number;
}

const MAX_STEPS = 12;

/**
 * The single writer of one resource: consumes its commands, allocates and activates
 * it, watches its idle expiry, and destroys it once its leases are gone.
 */
export async function processResource(rt: Runtime, claim: ResourceClaim): Promise<Outcome> {
  const { store } = rt;
  for (let step = 0; step < MAX_STEPS; step++) {
    const resource = await store.resource(claim.id);
    if (!resource) return DROP_WORK;
    if (resource.hasCommands) {
      await consumeCommands(rt, 'resource', resource.id);
      continue;
    }
    const blueprint = rt.blueprints.get(resource.blueprint);
    if (!blueprint) return at(after(rt.clock.now(), rt.waitRecheck), claim.attempts);
    switch (resource.status) {
      case 'pending': {
        const result = await build(rt, resource, blueprint, claim);
        if (result === 'progress') continue;
        return result;
      }
      case 'active':
        return watchIdle(rt, resource, blueprint);
      case 'released':
      case 'broken': {
        if (resource.leaseCount > 0) return PARK;
        return destroy(rt, resource, blueprint, claim);
      }
      case 'destroyed':
        return DROP_WORK;
    }
  }
  return at(rt.clock.now());
}

/** allocateResource, then activateResource; each with its intent recorded first, so a crash in between is resumed. */
async function build(rt: Runtime, resource: ResourceRow, blueprint: Blueprint<any, any, any>, claim: ResourceClaim): Promise<'progress' | Outcome> {
  const { store } = rt;
  const phase = resource.allocated ? 'activate' : 'allocate';
  const hook = phase === 'allocate' ? 'allocateResource' : 'activateResource';
  const resume = resource.phase === phase;
  const intent = async (u: Unit) => {
    await store.update(u, 'resource', resource.id, 'pending', { phase, phase_attempts: resource.phaseAttempts + 1 });
    if (resume) await store.log(u, { type: 'resource.resume', data: { phase: hook, attempt: resource.phaseAttempts + 1 }, resource: resource.id, blueprint: blueprint.name });
  };
  await (resume ? store.unit(intent) : store.single(intent));
  const slots = new SlotRequest(store, { kind: 'resource', id: resource.id });
  try {
    return await runBuildHook(rt, resource, blueprint, claim, { phase, hook, resume }, slots);
  } finally {
    slots.settled();
  }
}

/** The build hook of `step`, and the record of its outcome with the slot locks it asked for in `slots`. */
async function runBuildHook(
  rt: Runtime,
  resource: ResourceRow,
  blueprint: Blueprint<any, any, any>,
  claim: ResourceClaim,
  step: { phase: 'allocate' | 'activate'; hook: 'allocateResource' | 'activateResource'; resume: boolean },
  slots: SlotRequest,
): Promise<'progress' | Outcome> {
  const { store } = rt;
  const { phase, hook, resume } = step;
  const driver = resource.reservedFor ? await store.lease(resource.reservedFor) : null;
  let children = 0;
  const ctx = {
    ...baseContext(rt, blueprint, { resource: resource.id }, resume),
    resource: resourceView(resource),
    lease: driver && driver.status === 'pending' ? leaseView(driver) : null,
    lockSlots: slots.lockSlots,
    lockOneOf: slots.lockOneOf,
    acquireLease: (spec: LeaseSpec, options?: { key?: string }) => childLease(rt, resource, driver, spec, options?.key ?? `child-${children++}`),
  };
  const result = await callHook<{ attributes?: object } | undefined>(rt, blueprint, hook, ctx, undefined, claim.attempts + 1);
  if (!result.ok) {
    if (result.kind === 'child') return PARK;
    if (result.kind === 'retry') {
      await store.unit(async (u) => {
        await store.log(u, { type: 'hook.retry-later', data: { hook, reason: result.reason, retryAt: result.at.toISO()! }, resource: resource.id, blueprint: blueprint.name });
        // Its outcome is recorded: the next call is a new try, not a resume.
        await store.update(u, 'resource', resource.id, 'pending', { phase: retryPhase(phase) });
      });
      return at(result.at, claim.attempts + 1);
    }
    await store.unit(async (u) => {
      await store.log(u, hookFailureLog(result.error, { resource: resource.id }));
      const current = await store.resource(resource.id, u.sql);
      if (current?.status !== 'pending') return;
      await breakResource(rt, u, current, result.error.message, { build_failed: true });
      // A failed build: the blueprint backs off before its next allocation (invariant 8).
      await store.blueprintFailed(u, blueprint.name, result.error.message, rt.backoff);
    });
    return 'progress';
  }
  const attributes = { ...resource.attributes, ...(result.value?.attributes ?? {}) };
  try {
    await record(rt, resource, blueprint, phase, attributes, slots.keys);
  } catch (error) {
    if (!(error instanceof SlotLockConflictError)) throw error;
    return slotConflict(rt, resource, blueprint, hook, error.keys, claim);
  }
  return 'progress';
}

/** The outcome of a successful allocateResource or activateResource, with the slot locks it asked for: all of it, or nothing (SlotLockConflictError). */
async function record(rt: Runtime, resource: ResourceRow, blueprint: Blueprint<any, any, any>, phase: 'allocate' | 'activate', attributes: JsonObject, slots: string[]) {
  const { store } = rt;
  await store.unit(async (u) => {
    await store.lockSlots(u, 'resource', resource.id, slots);
    if (phase === 'allocate') {
      await store.update(u, 'resource', resource.id, 'pending', { attributes, allocated: true, phase: null, phase_attempts: 0 });
      await store.log(u, { type: 'resource.allocated', data: {}, resource: resource.id, blueprint: blueprint.name });
      return;
    }
    if (await stopRequested(rt, u, 'resource', resource.id)) {
      // Released or broken while activateResource ran: keep what it built for destroyResource,
      // stay pending; the next step consumes the command. A late result never activates.
      await store.update(u, 'resource', resource.id, 'pending', { attributes, phase: null, phase_attempts: 0 });
      return;
    }
    const activated = await store.casResource(u, resource.id, 'pending', 'active', { attributes, phase: null, phase_attempts: 0, idle_since: u.now }, {
      logs: [{ type: 'resource.activated', data: {}, resource: resource.id, blueprint: blueprint.name }],
    });
    await store.blueprintRecovered(u, blueprint.name);
    // One more active resource may serve a waiter directly, and raises the allocation
    // limit: one allocation fewer is in flight. A reserved one wakes its lease, and the
    // next waiter gets a look for the room to allocate (it passes the wake on only if it
    // allocates too). An unreserved one goes to the best waiter.
    if (activated.reservedFor) {
      await store.wake(u, 'lease', [activated.reservedFor]);
      await store.wakeNextWaiting(u, [blueprint.type], [blueprint.name]);
    } else {
      await store.handOff(u, resource.id, blueprint.type, blueprint.name);
    }
  });
}

/**
 * The slot locks a build hook asked for are held by another object (two pools over one
 * host). While a lease may still want this resource, it tries again with capped
 * backoff (the hook is called again with `resume: true`, as allowed: build hooks are
 * idempotent); when none does, it is released, and its destroy undoes what the hook built.
 */
async function slotConflict(rt: Runtime, resource: ResourceRow, blueprint: Blueprint<any, any, any>, hook: string, keys: string[], claim: ResourceClaim): Promise<'progress' | Outcome> {
  const { store } = rt;
  const attempt = claim.attempts + 1;
  const demand = await store.demandFor(resource.type, blueprint.name, resource.reservedFor);
  const retryAt = demand ? rt.clock.now().plus(backoffDelay(rt, attempt)) : null;
  await store.unit(async (u) => {
    // One row per conflict: a retry that meets the same conflict again bumps it.
    await store.logCoalesced(u, { type: 'resource.slot-lock-failure', data: { keys, phase: hook, retryAt: retryAt?.toISO() ?? null }, resource: resource.id, blueprint: blueprint.name }, ['keys', 'phase']);
    if (retryAt) return;
    await store.casResource(u, resource.id, 'pending', 'released', { phase: null, phase_attempts: 0, reserved_for: null }, {
      logs: [{ type: 'resource.released', data: { reason: `slot locks ${keys.join(', ')} are held and no lease waits for it`, author: null }, resource: resource.id, blueprint: blueprint.name }],
    });
  });
  return retryAt ? at(retryAt, attempt) : 'progress';
}

/** A child lease owned by this resource: found again by key on a repeated call, awaited by suspending the hook. */
async function childLease(rt: Runtime, resource: ResourceRow, driver: LeaseRow | null, spec: LeaseSpec, key: string) {
  const { store } = rt;
  let child = await store.childLease(resource.id, key);
  if (!child) {
    const normalized = normalizeSpec({ owner: `resource:${resource.id}`, ...spec });
    // Its holder is the resource, in no process in particular: nothing would renew it.
    if (normalized.keepAlive) throw new ValidationError('spec.keepAlive', 'a child lease is held by its resource, not by a process: give it no keepAlive (a ttl, or none, and it lives as long as the resource holds it)');
    await refuseCycle(rt, resource, driver, normalized);
    child = await rt.createLease(normalized, { parentResourceId: resource.id, childKey: key });
  }
  if (child.status === 'active') return rt.leaseObject(child);
  if (child.status === 'pending' || child.status === 'acquired') throw new WaitingForChild(child.id);
  throw new LeaseBrokenError(child.id, child.brokenReason ?? `child lease is ${child.status}`);
}

/** How deep child leases may nest (a resource whose build takes a child whose resource takes a child ...). */
export const MAX_CHILD_DEPTH = 16;

/**
 * Walks the parent chain of a resource about to take a child lease: the lease it is
 * built for, that lease's owner resource, and so on up to a lease of the host app. If
 * every blueprint that could serve the child is already in the chain, the child would
 * wait on its own ancestor forever (A's resource takes a B, whose resource takes an A):
 * each lease of the chain is told to break with the cycle, and the hook fails with it.
 */
async function refuseCycle(rt: Runtime, resource: ResourceRow, driver: LeaseRow | null, spec: NormalizedSpec): Promise<void> {
  const { store } = rt;
  const names = [resource.blueprint];
  const leases: string[] = [];
  let lease = driver;
  while (lease) {
    leases.push(lease.id);
    if (!lease.parentResourceId) break;
    const parent = await store.resource(lease.parentResourceId);
    if (!parent) break;
    names.unshift(parent.blueprint);
    if (names.length > MAX_CHILD_DEPTH) break;
    lease = parent.reservedFor ? await store.lease(parent.reservedFor) : null;
  }
  const candidates = blueprintsForType(rt, spec.type).filter((b) => b.enabled && (!spec.blueprints || spec.blueprints.includes(b.name)));
  const again = candidates.length > 0 && candidates.every((b) => names.includes(b.name)) ? candidates.find((b) => names.includes(b.name))! : null;
  const error = again
    ? new ChildLeaseCycleError([...names.slice(names.indexOf(again.name)), again.name])
    : names.length > MAX_CHILD_DEPTH
      ? new ChildLeaseCycleError(names, `child leases nest deeper than ${MAX_CHILD_DEPTH}: ${names.join(' → ')}`)
      : null;
  if (!error) return;
  await store.unit(async (u) => {
    for (const id of leases) await store.command(u, 'lease', id, 'break', { reason: error.message }, `resource:${resource.id}`);
  });
  throw error;
}

/**
 * An active resource with no leases releases itself once its blueprint's idle expiry has
 * passed (unless its warm pool would go below `minIdle`: then it looks again one idle
 * expiry later), or at once when it is retired: recycled (`maxResourceAge`,
 * `maxLeasesPerResourceLifetime`, `destroyOnRelease`) or of a draining blueprint. A leased
 * one is never released here: the worker of its last lease wakes it when it is gone.
 */
async function watchIdle(rt: Runtime, resource: ResourceRow, blueprint: Blueprint<any, any, any>): Promise<Outcome> {
  const { store } = rt;
  const now = rt.clock.now();
  // idle_since is kept by the transactions that add and remove leases (under the row lock).
  if (resource.leaseCount > 0) return PARK;
  let idleSince = resource.idleSince;
  if (!idleSince) {
    idleSince = now;
    await store.single((u) => store.markIdle(u, resource.id));
  }
  const retired = retiredBecause(blueprint, resource, now);
  // Reserved by a hand-off or for the lease it was built for: that lease cannot take it
  // now (the taking statement refuses a retired resource). Its reservation is dropped here
  // and the lease woken to look elsewhere; the next pass releases the resource.
  if (retired && resource.reservedFor) {
    const lease = resource.reservedFor;
    await store.unit(async (u) => {
      await store.forgetReservation(u, lease, resource.id);
      await store.wake(u, 'lease', [lease]);
    });
    return at(now);
  }
  const idle = blueprint.limits.idleExpiry;
  let reason = retired;
  if (!reason) {
    const expiry = idle ? idleSince.plus(idle) : null;
    const tooOld = retiresAt(blueprint, resource);
    const next = expiry && tooOld ? DateTime.min(expiry, tooOld) : (expiry ?? tooOld);
    if (!next) return PARK;
    if (next > now) return at(next);
    reason = `idle for ${idle!.toISO()}`;
  }
  // Promised to a waiting lease (a hand-off reserved it, or it was built for one): the
  // release's guard refuses it, and passing again at once would spin for as long as the
  // promise lasts. The lease takes it or lets go of it; this looks again an idle period later.
  if (!retired && resource.reservedFor) return at(after(now, idle!));
  const release = (u: Unit) =>
    // Guarded: a lease acquired since the read keeps the resource.
    store.casIf(u, 'resource', resource.id, 'active', 'released', {}, {
      guard: store.idleGuard,
      logs: [{ type: 'resource.released', data: { reason, author: null }, resource: resource.id, blueprint: blueprint.name }],
    });
  if (retired || blueprint.limits.minIdle === 0) await store.single(release);
  else {
    // An idle expiry spares the warm pool: only idle resources beyond minIdle go.
    const kept = await store.unit(async (u) => ((await mayExpireIdle(rt, u, blueprint)) ? (await release(u), false) : true));
    // Kept for the warm pool, and looked at again after another idle period: a resource can
    // become spare with no pass of its own (a lease lets go of the one a hand-off reserved
    // for it), and then the pool stands above minIdle until one of its resources looks.
    if (kept) return at(after(now, idle!));
  }
  // Released or not (a lease came first), the next pass looks again.
  return at(now);
}

/** destroyResource until it succeeds, with capped backoff; then destroyed, slot locks freed, child leases released. */
async function destroy(rt: Runtime, resource: ResourceRow, blueprint: Blueprint<any, any, any>, claim: ResourceClaim): Promise<Outcome> {
  const { store } = rt;
  const resume = resource.phase === 'destroy';
  await store.single((u) => store.update(u, 'resource', resource.id, resource.status, { phase: 'destroy', phase_attempts: resource.phaseAttempts + 1 }));
  const attempt = claim.attempts + 1;
  const ctx = { ...baseContext(rt, blueprint, { resource: resource.id }, resume), resource: resourceView(resource) };
  const result = await callHook(rt, blueprint, 'destroyResource', ctx, undefined, attempt);
  if (!result.ok) return retryDestroy(rt, 'destroyResource', result, attempt, { kind: 'resource', id: resource.id, status: resource.status }, { resource: resource.id, blueprint: blueprint.name });
  await store.unit(async (u) => {
    await store.casResource(u, resource.id, resource.status, 'destroyed', { phase: null, phase_attempts: 0 }, {
      logs: [{ type: 'resource.destroyed', data: {}, resource: resource.id, blueprint: blueprint.name }],
    });
    await store.releaseSlots(u, 'resource', resource.id);
    for (const child of await store.liveChildLeases(u, resource.id)) await store.command(u, 'lease', child, 'release', { reason: `owner ${resource.id} was destroyed` }, `resource:${resource.id}`);
    if (resource.reservedFor) await store.wake(u, 'lease', [resource.reservedFor]);
    await store.wakeNextWaiting(u, [blueprint.type], [blueprint.name]);
  });
  return DROP_WORK;
}
