import { after } from '../time.js';
import type { Blueprint } from '../blueprint/contract.js';
import { NoBlueprintError } from '../errors/no-blueprint-error.js';
import type { DateTime } from 'luxon';
import type { JsonObject } from '../model/spec.js';
import { HookError } from '../errors/hook-error.js';
import { SlotRequest } from './slot-choice.js';
import { slotConflictKeys, type BlueprintFailure, type LeaseRow, type NewLease, type ResourceRow, type Unit } from '../store/store.js';
import { authorizationReasons, declinedReason, sortByAuthorization, type AuthorizationVerdict } from './authorizations.js';
import { crashPoint } from './crash-points.js';
import { fullQuota, overQuotaReason, quotaGate, quotasFor } from './quotas.js';
import { retirementOf } from './retirement.js';
import { baseContext, callHook, hasHook, hookFailureLog, leaseView, resourceView, type LeaseViewSource } from './hooks.js';
import { at, backoffDelay, blueprintsForType, REREAD, type HookFailure, type LeaseMoved, type LeaseStep, type Runtime } from './runtime.js';

interface Claim {
  chained: boolean;
}

/** Candidates are read a page at a time, in the allocator's order, until one takes the lease. */
const PAGE = 16;

/** Why this pass found nothing: a lease asking for the same would be refused the same, unless a hook said no to this lease. */
interface Reasons {
  list: string[];
  /** A hook refused this lease (canEverAllocate, canAllocate or canAcquireLease said no): a differently shaped lease might fare better. */
  leaseSpecific: boolean;
  /** The earliest time a backoff that held this pass back ends (the lease's own, or a blueprint's): look again then. */
  retryAt?: DateTime;
}

/**
 * The allocator for one pending lease, in Drydock's order: acquire an existing active
 * resource; else allocate a new one if `canAllocate`, the allocation limit and
 * `maxResources` allow; else reclaim an idle resource; else wait. A pending lease
 * drives at most one allocation at a time (`allocating_resource_id`) and waits for it.
 * Only the blueprints that authorized the lease's owner (or require no authorization)
 * are candidates; with none, the lease waits for an authorization, or breaks if every
 * one declined it.
 */
export async function allocate(rt: Runtime, lease: LeaseRow, claim: Claim): Promise<LeaseStep> {
  const { store } = rt;
  const reasons: Reasons = { list: [], leaseSpecific: false };
  const ofType = blueprintsForType(rt, lease.type);
  const allowed = lease.blueprints ? ofType.filter((b) => lease.blueprints!.includes(b.name)) : ofType;
  const able: Blueprint<any, any, any>[] = [];
  for (const blueprint of allowed) {
    if (!blueprint.enabled) {
      reasons.list.push(`${blueprint.name} is disabled`);
      continue;
    }
    const ever = await leaseHook<boolean>(rt, blueprint, 'canEverAllocate', lease, true);
    if (!ever.ok) return hookTrouble(rt, lease, ever);
    if (ever.value) able.push(blueprint);
    else reasons.list.push(`${blueprint.name}: canEverAllocate said no`);
  }
  if (able.length === 0) {
    const error = new NoBlueprintError(lease.type, allowed.map((b) => b.name), reasons.list);
    await breakLease(rt, lease, error.message);
    return REREAD;
  }
  const verdict = await sortByAuthorization(rt, lease, able);
  if (verdict.allowed.length === 0) return unauthorized(rt, lease, claim, verdict, able.map((b) => b.name));
  const candidates = verdict.allowed;
  const refused = authorizationReasons(lease, verdict);
  if (refused.length > 0) {
    reasons.list.push(...refused);
    reasons.leaseSpecific = true;
  }
  const names = candidates.map((b) => b.name);
  const byName = new Map(candidates.map((b) => [b.name, b]));

  // A quota with no room: wait, with one log row; the lease that frees a place wakes the
  // best waiter the quota counts. A resource handed to this lease meanwhile goes to the
  // next waiter (one being built for it stays reserved: it will want it).
  const quotas = quotasFor(rt, lease);
  const noRoom = quotas.length > 0 ? await fullQuota(rt, quotas) : null;
  if (noRoom) {
    if (lease.allocatingResourceId && (await reservedResource(rt, lease))?.status !== 'pending') {
      await store.single((u) => store.forgetReservation(u, lease.id, lease.allocatingResourceId!));
      lease.allocatingResourceId = null;
      claim.chained = true;
    }
    return wait(rt, lease, claim, names, { list: [overQuotaReason(noRoom.quota, noRoom.count)], leaseSpecific: true });
  }

  // The allocation this lease already drives comes first; while it is pending, wait for it.
  if (lease.allocatingResourceId) {
    const driven = await reservedResource(rt, lease);
    if (driven?.status === 'pending') return wait(rt, lease, claim, names, { list: [`waiting for resource ${driven.id} to activate`], leaseSpecific: false });
    const blueprint = driven && byName.get(driven.blueprint);
    if (driven?.status === 'active' && blueprint) {
      const got = await tryAcquire(rt, lease, driven, blueprint, reasons);
      if (got !== 'no') return got;
    }
    // The resource this lease had built broke in a build hook before it could serve it: a
    // failed allocation. One broken by a command is no failure of the blueprint's.
    if (driven?.buildFailed && driven.brokenReason) {
      return allocationFailed(rt, lease, driven.blueprint, driven.brokenReason);
    }
    await store.single((u) => store.forgetReservation(u, lease.id, lease.allocatingResourceId!));
    lease.allocatingResourceId = null;
    // The reservation was a hand-off this lease could not use: pass it on.
    claim.chained = true;
  }

  // 1. An existing active resource: unleased ones first, then shared ones.
  // The resources this pass asked (and could not take): only those may be reclaimed.
  const asked = new Set<string>();
  const tryResources = async (leased: boolean) => {
    for (const blueprint of candidates) {
      for await (const resource of freeResources(rt, lease.id, blueprint, leased)) {
        asked.add(resource.id);
        const got = await tryAcquire(rt, lease, resource, blueprint, reasons);
        if (got !== 'no') return got;
      }
    }
    return 'no' as const;
  };
  let got = await tryResources(false);
  if (got !== 'no') return got;

  // 2. A new resource; supplemental blueprints grow before they share.
  const full: Blueprint<any, any, any>[] = [];
  const grow = async (list: Blueprint<any, any, any>[]): Promise<'no' | LeaseStep> => {
    for (const blueprint of list) {
      const result = await tryAllocate(rt, lease, blueprint, reasons);
      // A lease step: canAllocate failed and broke the lease, or an allocation was recorded.
      // Going on to the next blueprint would build a resource reserved for a broken lease.
      if (result === 'allocated' || result === 'look-again') return REREAD;
      if (typeof result === 'object' || result === REREAD) return result;
      if (result === 'full') full.push(blueprint);
    }
    return 'no';
  };
  const supplemental = candidates.filter((b) => b.limits.supplemental);
  let grew = await grow(supplemental);
  if (grew !== 'no') return grew;
  got = await tryResources(true);
  if (got !== 'no') return got;
  grew = await grow(candidates.filter((b) => !b.limits.supplemental));
  if (grew !== 'no') return grew;

  // 3. Reclaim an idle resource of a blueprint that is at its cap.
  for (const blueprint of full) {
    const reclaimed = await reclaimIdle(rt, lease, blueprint, asked);
    // Idle, but freed after this pass looked for free resources: take it rather than tear it down.
    if (reclaimed === 'look-again') return REREAD;
    if (reclaimed) {
      reasons.list.push(`reclaiming idle resource ${reclaimed} of ${blueprint.name}`);
      break;
    }
  }

  // 4. Wait.
  return wait(rt, lease, claim, names, reasons);
}

/**
 * The fast path of a new request: when an active resource is free and no lease of the type
 * waits, the lease is created already acquired on it, in one statement, and its worker goes
 * straight on to activate it; with no `activateLease` to call, it is created active. The same hooks run in the same order as in `allocate`
 * (canEverAllocate, canAcquireLease, acquireLease), before the lease row exists. Anything
 * else (no free resource, a hook that refuses, a race lost) returns null: the lease is
 * then queued and allocated as usual, and the hooks are asked again. A hook that fails
 * (throws, RetryLater, times out) is returned: the queued lease's first step deals with it
 * as the allocator would (`hookTrouble`), so that a failure is never asked away.
 */
export async function acquireAtOnce(rt: Runtime, lease: NewLease, claim: { worker: string; until: DateTime }): Promise<LeaseMoved | HookFailure | null> {
  const { store } = rt;
  const view = { id: lease.id, type: lease.type, attributes: lease.attributes, owner: lease.owner, expiresAt: lease.expiresAt };
  const ofType = blueprintsForType(rt, lease.type).filter((b) => b.enabled && (!lease.blueprints || lease.blueprints.includes(b.name)));
  // Authorization is the allocator's to decide (and to request), and so is a quota: such a lease queues.
  if (ofType.some((b) => b.requireAuthorization) || quotasFor(rt, lease).length > 0) return null;
  const candidates: Blueprint<any, any, any>[] = [];
  for (const blueprint of ofType) {
    const ever = await leaseHook<boolean>(rt, blueprint, 'canEverAllocate', view, true);
    if (!ever.ok) return ever;
    if (ever.value) candidates.push(blueprint);
  }
  // The allocator's order: unleased resources; shared ones only where no blueprint would grow first.
  const passes = candidates.some((b) => b.limits.supplemental) ? [false] : [false, true];
  for (const leased of passes) {
    for (const blueprint of candidates) {
      for await (const resource of freeResources(rt, lease.id, blueprint, leased, FAST_PATH_TRIES)) {
        const can = await leaseHook<boolean>(rt, blueprint, 'canAcquireLease', view, true, resource);
        if (!can.ok) return can;
        if (!can.value) continue;
        const slots = new SlotRequest(store, { kind: 'lease', id: lease.id });
        try {
          const acquired = await leaseHook<{ attributes?: object } | undefined>(rt, blueprint, 'acquireLease', view, undefined, resource, {
            lockSlots: slots.lockSlots,
            lockOneOf: slots.lockOneOf,
          });
          if (!acquired.ok) return acquired;
          const attributes = acquired.value?.attributes ? { ...lease.attributes, ...acquired.value.attributes } : lease.attributes;
          // Created active only before its expiry: no lease is activated past it (the hooks above may have been slow).
          const active = !hasHook(blueprint, 'activateLease') && !(lease.expiresAt && lease.expiresAt <= rt.clock.now());
          const acquisition = { resourceId: resource.id, maxLeases: blueprint.limits.maxLeasesPerResource, slots: slots.keys, unlessWaiting: lease.type, retirement: retirementOf(blueprint, rt.clock.now()) };
          const done = await store.single((u) => store.insertAcquired(u, lease, acquisition, attributes as JsonObject, blueprint.name, claim, active));
          return done ? { ...done, intent: active ? undefined : 'activate' } : null;
        } catch (error) {
          if (slotConflictKeys(error)) return null;
          throw error;
        } finally {
          slots.settled();
        }
      }
    }
  }
  return null;
}

/** How many resources the fast path asks before it queues the lease instead. */
const FAST_PATH_TRIES = 4;

/**
 * The active resources of a blueprint this lease might take, in the allocator's order
 * (least leased, then oldest), a page at a time: unleased ones, or else those with
 * leases and room for one more (`maxLeasesPerResource`). Reading stops as soon as one
 * takes the lease, so the cost does not grow with the pool.
 */
async function* freeResources(rt: Runtime, leaseId: string, blueprint: Blueprint<any, any, any>, leased: boolean, limit = Infinity): AsyncGenerator<ResourceRow> {
  const { store } = rt;
  const max = blueprint.limits.maxLeasesPerResource;
  const low = leased ? 1 : 0;
  const high = leased ? (max === null ? 2_147_483_647 : max - 1) : 0;
  if (high < low) return;
  let after: ResourceRow | null = null;
  for (let left = limit; left > 0; ) {
    const rows = await store.freeResources(blueprint.name, leaseId, low, high, after, Math.min(PAGE, left), retirementOf(blueprint, rt.clock.now()));
    for (const row of rows) {
      after = row;
      yield after;
    }
    left -= rows.length;
    if (rows.length < PAGE) return;
  }
}

async function leaseHook<T>(rt: Runtime, blueprint: Blueprint<any, any, any>, hook: string, lease: LeaseViewSource, fallback: T, resource?: ResourceRow, extra: object = {}) {
  const ctx = {
    ...baseContext(rt, blueprint, { lease: lease.id, resource: resource?.id }, false),
    lease: leaseView(lease),
    ...(resource ? { resource: resourceView(resource) } : {}),
    ...extra,
  };
  return callHook<T>(rt, blueprint, hook, ctx, fallback);
}

/** A hook of the allocator that did not answer: RetryLater waits, anything else breaks the lease. */
export async function hookTrouble(rt: Runtime, lease: LeaseRow, result: HookFailure): Promise<LeaseStep> {
  const { store } = rt;
  if (result.kind === 'retry') {
    await store.single((u) => store.log(u, { type: 'hook.retry-later', data: { hook: 'allocator', reason: result.reason, retryAt: result.at.toISO()! }, lease: lease.id }));
    return at(result.at);
  }
  if (result.kind === 'child') return at(after(rt.clock.now(), rt.waitRecheck));
  await store.single((u) => store.log(u, hookFailureLog(result.error, { lease: lease.id })));
  await breakLease(rt, lease, result.error.message);
  return REREAD;
}

export async function breakLease(rt: Runtime, lease: LeaseRow, reason: string): Promise<void> {
  const { store } = rt;
  await store.unit(async (u) => {
    const left = await store.casLease(u, lease.id, lease.status, 'broken', { broken_reason: reason }, { logs: [{ type: 'lease.broken', data: { reason }, lease: lease.id }] });
    await store.dropReservation(u, left);
  });
}

/** The resource the lease drives or has reserved: as the pass's read of the lease found it, else read now. */
function reservedResource(rt: Runtime, lease: LeaseRow): Promise<ResourceRow | null> | ResourceRow | null {
  if (!lease.allocatingResourceId) return null;
  if (lease.reserved?.id === lease.allocatingResourceId) return lease.reserved;
  return rt.store.resource(lease.allocatingResourceId);
}

/**
 * canAcquireLease and acquireLease (no transaction open), then one short transaction:
 * the resource row takes the lease (still active, not reserved for another, below
 * `maxLeasesPerResource`), the slot locks, and the lease's CAS to acquired, which also
 * records the intent to activate it: the next step calls activateLease at once. A
 * blueprint without activateLease has the CAS go on to active.
 */
async function tryAcquire(rt: Runtime, lease: LeaseRow, resource: ResourceRow, blueprint: Blueprint<any, any, any>, reasons: Reasons): Promise<'no' | LeaseStep> {
  const { store } = rt;
  const can = await leaseHook<boolean>(rt, blueprint, 'canAcquireLease', lease, true, resource);
  if (!can.ok) return hookTrouble(rt, lease, can);
  if (!can.value) {
    reasons.list.push(`${resource.id} cannot take this lease`);
    reasons.leaseSpecific = true;
    return 'no';
  }
  const slots = new SlotRequest(store, { kind: 'lease', id: lease.id });
  try {
    return await acquireWith(rt, lease, resource, blueprint, reasons, slots);
  } finally {
    slots.settled();
  }
}

/** tryAcquire from acquireLease on, with the slot locks the hook asks for in `slots`. */
async function acquireWith(rt: Runtime, lease: LeaseRow, resource: ResourceRow, blueprint: Blueprint<any, any, any>, reasons: Reasons, slots: SlotRequest): Promise<'no' | LeaseStep> {
  const { store } = rt;
  const acquired = await leaseHook<{ attributes?: object } | undefined>(rt, blueprint, 'acquireLease', lease, undefined, resource, {
    lockSlots: slots.lockSlots,
    lockOneOf: slots.lockOneOf,
  });
  if (!acquired.ok) return hookTrouble(rt, lease, acquired);
  const attributes = acquired.value?.attributes ? { ...lease.attributes, ...acquired.value.attributes } : lease.attributes;
  const max = blueprint.limits.maxLeasesPerResource;
  try {
    // One statement: the resource takes the lease (still active, not reserved for another,
    // below maxLeasesPerResource, not retired by recycling or a drain), the slot locks are taken, and the lease moves to
    // acquired with the intent to activate it recorded; all of it, or none.
    // A hand-off may have reserved another resource for this lease since the pass read it:
    // the statement frees that one for the next waiter (`freed`), or it would stay reserved
    // for a lease that never comes.
    // With no activateLease there is no intent to record: the lease goes on to active in the
    // same statement, which takes nothing if the lease has expired by then (`unexpired`). A
    // release that comes meanwhile is the next step's.
    const active = !hasHook(blueprint, 'activateLease');
    const take = (u: Unit) =>
      store.acquireOnResource(
        u,
        lease.id,
        { resourceId: resource.id, maxLeases: max, slots: slots.keys, retirement: retirementOf(blueprint, rt.clock.now()), unexpired: active },
        // allocating_resource_id is left as it is: the statement reads it to free the reservation.
        { resource_id: resource.id, wait_log_id: null, attributes, phase: active ? null : 'activate', phase_attempts: active ? 0 : 1 },
        [{ type: 'lease.acquired', data: { resource: resource.id, blueprint: blueprint.name }, lease: lease.id, resource: resource.id, blueprint: blueprint.name }],
        active ? { log: { type: 'lease.activated', data: { resource: resource.id }, lease: lease.id, resource: resource.id, blueprint: blueprint.name }, resource } : undefined,
      );
    // On a blueprint that requires authorization, the acquisition commits only while the
    // owner is authorized: checked under the blueprint's authorization lock, in its
    // transaction. Under a quota, only while the quota has room: counted under its lock.
    const quotas = quotasFor(rt, lease);
    const result =
      blueprint.requireAuthorization || quotas.length > 0
        ? await store.unit(async (u) => {
            if (blueprint.requireAuthorization && (await store.authorizationGate(u, blueprint.name, lease.authorizingOwner)) !== 'authorized') return UNAUTHORIZED;
            if (quotas.length > 0 && (await quotaGate(rt, u, quotas))) return OVER_QUOTA;
            return take(u);
          })
        : await store.single(take);
    // The authorization changed since this pass read it: the next pass sorts the candidates
    // again. A quota filled meanwhile: the next pass sees it and waits.
    if (result === UNAUTHORIZED || result === OVER_QUOTA) return REREAD;
    if (!result) {
      reasons.list.push(`${resource.id} is no longer available`);
      return 'no';
    }
    const taken = result.resource;
    // Wake-ups for others, after the fact (lost in a crash, they cost a waiter its recheck
    // interval, nothing more): the reservation freed above goes to the next waiter; and a
    // resource that may take more leases gets the best waiter's look now.
    const wakes: Array<[string, string]> = result.freed.filter((f) => f.free).map((f) => [f.type, f.blueprint]);
    if (max === null || taken.leaseCount < max) wakes.push([resource.type, blueprint.name]);
    for (const [type, name] of wakes) await store.single((u) => store.wakeNextWaiting(u, [type], [name]));
    return { lease: result.lease, resource: taken, intent: active ? undefined : 'activate' };
  } catch (error) {
    const keys = slotConflictKeys(error);
    if (!keys) throw error;
    const data = { keys, resource: resource.id };
    // Invariant 5: the same conflict seen again on a recheck bumps its row instead of writing a new one.
    await store.unit((u) =>
      store.logCoalesced(u, { type: 'lease.slot-lock-failure', data, lease: lease.id, resource: resource.id, blueprint: blueprint.name }, ['resource', 'keys'], lease.statusChangedAt),
    );
    reasons.list.push(`slot locks ${keys.join(', ')} are held`);
    return 'no';
  }
}

const UNAUTHORIZED = 'unauthorized' as const;
const OVER_QUOTA = 'over-quota' as const;

type AllocateResult = 'allocated' | 'look-again' | 'no' | 'rate-limited' | 'backing-off' | 'full' | LeaseStep;

/** What the allocation transaction decided; the two objects are handled once it has ended. */
const DRAINING = 'draining' as const;

type AllocationDecision = 'allocated' | 'look-again' | 'rate-limited' | 'full' | typeof UNAUTHORIZED | typeof DRAINING | { backingOff: BlueprintFailure } | { policyFailed: HookError };

async function tryAllocate(rt: Runtime, lease: LeaseRow, blueprint: Blueprint<any, any, any>, reasons: Reasons): Promise<AllocateResult> {
  const { store } = rt;
  if (lease.allocateAfter && lease.allocateAfter > rt.clock.now()) {
    reasons.list.push(`this lease backs off after ${lease.allocationFailures} failed allocation(s), until ${lease.allocateAfter.toISO()}`);
    reasons.retryAt = earliest(reasons.retryAt, lease.allocateAfter);
    return 'backing-off';
  }
  const can = await leaseHook<boolean>(rt, blueprint, 'canAllocate', lease, true);
  if (!can.ok) return hookTrouble(rt, lease, can);
  if (!can.value) {
    reasons.list.push(`${blueprint.name} has no capacity now`);
    reasons.leaseSpecific = true;
    return 'no';
  }
  const resourceId = store.newId('res');
  const result = await store.unit(async (u): Promise<AllocationDecision> => {
    // A hand-off may have reserved an active resource for this lease since the pass read it:
    // then use that one (the caller looks again) instead of overwriting the pointer, which
    // would leave that resource reserved for a lease that never comes for it.
    if (!(await store.lockLeaseForAllocation(u, lease.id))) return 'look-again' as const;
    // The owner must still be authorized, under the lock that an authorization change takes.
    if (blueprint.requireAuthorization && (await store.authorizationGate(u, blueprint.name, lease.authorizingOwner)) !== 'authorized') return UNAUTHORIZED;
    // Short and hook-free: allocation decisions of one blueprint are serialized here.
    const counts = await store.lockAllocations(u, blueprint.name);
    // Draining is operational state of every broker's: it serves no new lease, so it builds none.
    if (counts.draining) return DRAINING;
    const failure = counts.failure;
    if (failure && failure.retryAt > u.now) return { backingOff: failure };
    let limit: number;
    try {
      limit = blueprint.limits.allocationLimit(counts.active);
    } catch (thrown) {
      // A policy function of the blueprint threw: its failure, like a hook's (nothing written yet).
      return { policyFailed: new HookError(blueprint.name, 'limits.allocationLimit', thrown) };
    }
    if (counts.allocating >= limit) return 'rate-limited' as const;
    const max = blueprint.limits.maxResources;
    if (max !== null && !(await store.takeCapacitySlot(u, blueprint.name, max, resourceId))) return 'full' as const;
    await store.insertPendingResource(u, { id: resourceId, type: blueprint.type, blueprint: blueprint.name, reservedFor: lease.id, authorizingOwner: lease.authorizingOwner });
    await store.update(u, 'lease', lease.id, 'pending', { allocating_resource_id: resourceId });
    await store.log(u, { type: 'resource.allocating', data: { lease: lease.id }, lease: lease.id, resource: resourceId, blueprint: blueprint.name });
    // Room for one more allocation: the next waiter gets a look now. It passes the wake on
    // only if it allocates too, so a burst fills the allocation limit, and no more.
    if (counts.allocating + 1 < limit) await store.wakeNextWaiting(u, [blueprint.type], [blueprint.name]);
    return 'allocated' as const;
  });
  if (typeof result === 'object') {
    if ('policyFailed' in result) return policyFailed(rt, lease, blueprint, result.policyFailed);
    const f = result.backingOff;
    reasons.list.push(`${blueprint.name} backs off after ${f.streak} failure(s) in a row (last: ${f.lastError}), until ${f.retryAt.toISO()}`);
    reasons.retryAt = earliest(reasons.retryAt, f.retryAt);
    return 'backing-off';
  }
  // The authorization changed since this pass read it: the next pass sorts the candidates again.
  if (result === UNAUTHORIZED) return REREAD;
  if (result === DRAINING) {
    reasons.list.push(`${blueprint.name} is draining (broker.drainBlueprint): it serves no new lease until it is resumed`);
    return 'no';
  }
  if (result === 'allocated') crashPoint('allocate.recorded');
  if (result === 'rate-limited') reasons.list.push(`${blueprint.name} is at its allocation limit`);
  if (result === 'full') reasons.list.push(noRoom(blueprint));
  return result;
}

/**
 * Why a blueprint at its `maxResources` cannot serve the lease: with `maxLeasesPerResource`
 * (as `localHosts` sets it to its `slots`), its resources are full, and that limit is what
 * the reader knows; the allocator skipped them without asking.
 */
function noRoom(blueprint: Blueprint<any, any, any>): string {
  const { maxResources, maxLeasesPerResource } = blueprint.limits;
  const resources = `${maxResources} resource${maxResources === 1 ? '' : 's'}`;
  if (maxLeasesPerResource === null) return `${blueprint.name} may build no more than ${resources} (maxResources), and none of them takes this lease now`;
  const leases = `${maxLeasesPerResource} lease${maxLeasesPerResource === 1 ? '' : 's'}`;
  return `${blueprint.name} is full: none of its resources has room for another lease (at most ${leases} each: maxLeasesPerResource), and it may build no more than ${resources} (maxResources)`;
}

function earliest(a: DateTime | undefined, b: DateTime): DateTime {
  return a && a < b ? a : b;
}

/** A policy function threw: the blueprint's failure streak grows, and the lease counts a failed allocation. */
async function policyFailed(rt: Runtime, lease: LeaseRow, blueprint: Blueprint<any, any, any>, error: HookError): Promise<LeaseStep> {
  const { store } = rt;
  await store.unit(async (u) => {
    await store.log(u, hookFailureLog(error, { lease: lease.id }));
    await store.blueprintFailed(u, blueprint.name, error.message, rt.backoff);
  });
  return allocationFailed(rt, lease, blueprint.name, error.message);
}

/**
 * An allocation this lease drove failed (its resource broke before serving it, or a
 * policy function threw). The lease counts it and starts no new allocation before its
 * capped exponential backoff has passed; after `maxAllocationFailures` in a row it breaks
 * with the last error. Either way the pass ends here: no retry in the same pass.
 */
async function allocationFailed(rt: Runtime, lease: LeaseRow, blueprint: string, error: string): Promise<LeaseStep> {
  const { store } = rt;
  const failures = lease.allocationFailures + 1;
  const retryAt = rt.clock.now().plus(backoffDelay(rt, failures));
  const giveUp = failures >= rt.maxAllocationFailures;
  await store.unit(async (u) => {
    if (lease.allocatingResourceId) await store.forgetReservation(u, lease.id, lease.allocatingResourceId);
    await store.update(u, 'lease', lease.id, 'pending', { allocation_failures: failures, last_failure: error, allocate_after: giveUp ? null : retryAt });
    await store.log(u, { type: 'lease.allocation-failure', data: { blueprint, reason: error, attempt: failures, retryAt: giveUp ? null : retryAt.toISO() }, lease: lease.id, blueprint });
  });
  if (!giveUp) return at(retryAt);
  await breakLease(rt, { ...lease, allocatingResourceId: null }, `allocation failed ${failures} times in a row; last: ${error}`);
  return REREAD;
}

/** Asks an idle resource of a full blueprint to release itself (a command: the resource's own worker decides). */
async function reclaimIdle(rt: Runtime, lease: LeaseRow, blueprint: Blueprint<any, any, any>, asked: ReadonlySet<string>): Promise<string | 'look-again' | null> {
  const { store } = rt;
  const idleBefore = () => rt.clock.now().minus(blueprint.limits.reclaimIdleAfter);
  // Most waits find nothing to reclaim: look without a transaction first.
  const seen = await store.reclaimable(blueprint.name, idleBefore(), lease.id, retirementOf(blueprint, rt.clock.now()));
  if (!seen) return null;
  // A resource this pass never asked became idle while it ran (a burst: a lease just let
  // go of it): the lease may well take it. Reclaiming it would destroy and rebuild it.
  if (!asked.has(seen)) return 'look-again';
  return store.unit(async (u) => {
    const id = await store.reclaimable(blueprint.name, idleBefore(), lease.id, retirementOf(blueprint, u.now), u);
    if (!id) return null;
    if (!asked.has(id)) return 'look-again';
    await store.command(u, 'resource', id, 'reclaim', { lease: lease.id }, `lease:${lease.id}`);
    await store.log(u, { type: 'lease.reclaim', data: { resource: id, blueprint: blueprint.name }, lease: lease.id, resource: id, blueprint: blueprint.name });
    return id;
  });
}

/** One wait is one log row: a repeated wait bumps its count instead of writing a new row. */
async function wait(rt: Runtime, lease: LeaseRow, claim: Claim, names: string[], reasons: Reasons): Promise<LeaseStep> {
  const { store } = rt;
  const data = { reasons: reasons.list.length ? reasons.list : ['no resource is free'], blueprints: names };
  const bumped = lease.waitLogId !== null && (await store.single((u) => store.bumpLog(u, lease.waitLogId!, data, 'lease.waiting-for-resources')));
  if (!bumped) {
    await store.unit(async (u) => {
      const id = await store.log(u, { type: 'lease.waiting-for-resources', data, lease: lease.id });
      await store.update(u, 'lease', lease.id, 'pending', { wait_log_id: id });
    });
  }
  // A wake this lease could not use passes on to the next waiting lease that asks for
  // something else; one asking for the same would be refused for the same reasons.
  // Refused for reasons no other lease would escape (the blueprint full or at its allocation
  // limit, every resource taken), the wake stops here.
  if (claim.chained && reasons.leaseSpecific) await store.single((u) => store.wakeNextWaiting(u, [lease.type], names, lease));
  return at(recheckAt(rt, lease, reasons.retryAt));
}

/** When a waiting lease looks again if nothing wakes it: after `waitRecheck`, or sooner at a backoff's end, its deadline or its expiry. */
function recheckAt(rt: Runtime, lease: LeaseRow, retryAt?: DateTime): DateTime {
  let next = after(rt.clock.now(), rt.waitRecheck);
  if (retryAt && retryAt < next) next = retryAt;
  if (lease.deadlineAt && lease.deadlineAt < next) next = lease.deadlineAt;
  if (lease.expiresAt && lease.expiresAt < next) next = lease.expiresAt;
  return next;
}

/**
 * No candidate authorized the lease's owner. Declined (or never to be authorized, having
 * no owner) by every one: the lease breaks with that reason. Else it waits, with one log
 * row however often it looks again, and lets go of a resource it drove or had reserved,
 * which it may not use now: the next waiter gets it. A change of an authorization that
 * concerns it wakes it (`broker.authorizations`), and so does its recheck.
 */
async function unauthorized(rt: Runtime, lease: LeaseRow, claim: Claim, verdict: AuthorizationVerdict, names: string[]): Promise<LeaseStep> {
  const { store } = rt;
  if (verdict.waiting.length === 0) {
    await breakLease(rt, lease, declinedReason(lease, verdict.declined));
    return REREAD;
  }
  const data = { owner: lease.authorizingOwner!, inheritedFrom: lease.parentResourceId, blueprints: verdict.waiting, declined: verdict.declined };
  await store.unit(async (u) => {
    const bumped = lease.waitLogId !== null && (await store.bumpLog(u, lease.waitLogId, data, 'lease.waiting-for-authorization'));
    if (!bumped) {
      const id = await store.log(u, { type: 'lease.waiting-for-authorization', data, lease: lease.id });
      await store.update(u, 'lease', lease.id, 'pending', { wait_log_id: id });
    }
    if (lease.allocatingResourceId) await store.forgetReservation(u, lease.id, lease.allocatingResourceId);
    // A wake this lease cannot use goes on to the next waiter that asks for something else
    // (another owner among them): one for the same owner would wait the same.
    if (claim.chained || lease.allocatingResourceId) await store.wakeNextWaiting(u, [lease.type], names, lease);
  });
  return at(recheckAt(rt, lease));
}
