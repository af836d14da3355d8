import type { DateTime, Duration } from 'luxon';
import type { Blueprint } from '../blueprint/contract.js';
import { LEASE_STATE_FLAGS } from '../model/states.js';
import type { ClaimedWork, DestroyHandOff, LeaseRow, ReleasedBy, ResourceRow, Unit } from '../store/store.js';
import { after, humanDuration } from '../time.js';
import { allocate, breakLease, hookTrouble } from './allocator.js';
import { consumeCommands } from './commands.js';
import { crashPoint } from './crash-points.js';
import { baseContext, callHook, hasHook, hookFailureLog, inDestroyPhase, leaseView, resourceView, retryDestroy, retryPhase } from './hooks.js';
import { quotasFor } from './quotas.js';
import { recycles, retiredBecause, retirementOf } from './retirement.js';
import { at, DROP_WORK, PARK, REREAD, WORK_DROPPED, type HandedWork, type LeaseMoved, type LeaseStep, type Outcome, type Runtime } from './runtime.js';

export interface LeaseClaim {
  id: string;
  chained: boolean;
  attempts: number;
  /** The claimed work item's wake count: the destroy deletes the item only if no wake came during the pass. */
  wakeCount: number;
  /**
   * The worker whose slot runs this pass, and how long its claims live: a hand-off at the
   * lease's end claims the waiter's work item for it, so that the waiter's pass runs next
   * in that slot. `slot`: the slot is still to be asked for, and only a hand-off does (it
   * may be called again if the transaction is run again). Absent, or no slot free: the
   * waiter is only woken, for whichever worker claims it first.
   */
  handOffTo?: { worker: string; ttl: Duration; slot?: () => boolean };
  /**
   * A CAS of this pass recorded the intent of a phase whose hook has not been called yet
   * (acquired: activate; released: destroy). Kept for the whole pass, so a read in
   * between does not make the first call look like a resume.
   */
  intent?: 'activate' | 'destroy';
}

const MAX_STEPS = 12;

/**
 * The single writer of one lease: consumes its commands, then moves it along
 * pending → acquired → active → released → destroyed until it has to wait. Each step
 * hands the row its own write returned to the next, so a pass reads the lease once.
 */
export async function processLease(rt: Runtime, claim: LeaseClaim, known?: LeaseMoved): Promise<Outcome> {
  const { store } = rt;
  let moved: LeaseMoved | null = known ?? null;
  if (known?.intent) claim.intent = known.intent;
  for (let step = 0; step < MAX_STEPS; step++) {
    const lease: LeaseRow | null = moved?.lease ?? (await store.lease(claim.id));
    if (!lease) return DROP_WORK;
    if (lease.hasCommands) {
      const ended = await releaseAtOnce(rt, lease, claim);
      if (ended) return ended;
      moved = await consumeCommands(rt, 'lease', lease.id, lease);
      // The resource came with the read; the command's write did not move it.
      if (moved && !moved.resource && lease.resource) moved.resource = lease.resource;
      if (moved?.intent) claim.intent = moved.intent;
      continue;
    }
    const now = rt.clock.now();

    let result: LeaseStep;
    if (moved?.trouble) {
      result = await hookTrouble(rt, lease, moved.trouble);
    } else if (LEASE_STATE_FLAGS[lease.status].live && lease.expiresAt && lease.expiresAt <= now) {
      // The row a step returned does not show commands written while the step ran (a
      // keepalive's renewal during a long hook): a lease not active yet is read again first.
      if (moved && lease.status !== 'active') {
        moved = null;
        continue;
      }
      result = await release(rt, lease, 'lease.expired', { at: lease.expiresAt.toISO()! }, 'expired');
    } else if (LEASE_STATE_FLAGS[lease.status].live && lease.status !== 'active' && lease.deadlineAt && lease.deadlineAt <= now) {
      result = await release(rt, lease, 'lease.timeout', { timeout: timeoutText(lease) }, 'timeout');
    } else {
      switch (lease.status) {
        case 'pending':
          result = await allocate(rt, lease, claim);
          claim.chained = false;
          break;
        case 'acquired':
          result = await activate(rt, lease, claim, moved);
          break;
        case 'active':
          return lease.expiresAt ? at(lease.expiresAt) : PARK;
        case 'released':
        case 'broken':
          return destroy(rt, lease, claim, moved);
        case 'destroyed':
          return DROP_WORK;
      }
    }
    if (result === REREAD) moved = null;
    else if ('next' in result) return result;
    else {
      moved = result as LeaseMoved;
      if (moved.intent) claim.intent = moved.intent;
    }
  }
  return at(rt.clock.now());
}

/** Expiry and acquire timeout: the lease's own worker releases it, and records the intent to destroy it with that. */
async function release(rt: Runtime, lease: LeaseRow, type: 'lease.expired' | 'lease.timeout', data: any, reason: 'expired' | 'timeout'): Promise<LeaseStep> {
  const { store } = rt;
  const row = await store.unit(async (u) => {
    // The row the CAS returns: a hand-off may have pointed the lease at a reserved resource since it was read.
    // `end_cause` tells a waiter which error to report (LeaseTimeoutError for a timeout).
    const left = await store.casLease(u, lease.id, lease.status, 'released', { phase: 'destroy', phase_attempts: 1, end_cause: reason }, {
      logs: [
        { type, data, lease: lease.id },
        { type: 'lease.released', data: { reason, author: null }, lease: lease.id },
      ],
    });
    await store.dropReservation(u, left);
    return left;
  });
  return { lease: row, intent: 'destroy' };
}

/** The acquire timeout as a person reads it ("5 seconds"), from the lease's own deadline. */
function timeoutText(lease: LeaseRow): string {
  return humanDuration(lease.deadlineAt!.diff(lease.createdAt));
}

function blueprintOf(rt: Runtime, resource: ResourceRow | null): Blueprint<any, any, any> | undefined {
  return resource ? rt.blueprints.get(resource.blueprint) : undefined;
}

function leaseOnResourceContext(rt: Runtime, blueprint: Blueprint<any, any, any>, lease: LeaseRow, resource: ResourceRow, resume: boolean) {
  return { ...baseContext(rt, blueprint, { lease: lease.id, resource: resource.id }, resume), lease: leaseView(lease), resource: resourceView(resource) };
}

/** The lease's resource as the read of the lease returned it, if that read is the one at hand. */
function resourceReadWith(lease: LeaseRow): ResourceRow | null {
  return lease.resourceId && lease.resource?.id === lease.resourceId ? lease.resource : null;
}

/** Whether a lease of this blueprint can end with no hook to call (neither `releaseLease` nor `destroyLease`). */
function endsWithoutHooks(blueprint: Blueprint<any, any, any>): boolean {
  return !hasHook(blueprint, 'releaseLease') && !hasHook(blueprint, 'destroyLease');
}

/** The resource a step already holds, the one read with the lease, or a fresh read of it. */
async function resourceOf(rt: Runtime, lease: LeaseRow, moved: LeaseMoved | null): Promise<ResourceRow | null> {
  if (!lease.resourceId) return null;
  if (moved?.resource?.id === lease.resourceId) return moved.resource;
  return resourceReadWith(lease) ?? rt.store.resource(lease.resourceId);
}

/**
 * An active lease whose only command is a release, on a blueprint with neither
 * `releaseLease` nor `destroyLease`: there is no hook whose intent must be recorded before
 * it runs, so the lease is released and destroyed in one statement that also consumes the
 * command, and the hand-off follows in its transaction. Null when the lease takes the
 * usual path (another command, a hook to call, a resource this broker has no blueprint for).
 */
async function releaseAtOnce(rt: Runtime, lease: LeaseRow, claim: LeaseClaim): Promise<Outcome | null> {
  const [command, ...more] = lease.commands ?? [];
  if (!command || more.length > 0 || command.command !== 'release' || lease.status !== 'active') return null;
  const resource = resourceReadWith(lease);
  const blueprint = blueprintOf(rt, resource);
  if (!resource || !blueprint || !endsWithoutHooks(blueprint)) return null;
  crashPoint('releaseAtOnce.before');
  const reason = typeof command.data.reason === 'string' ? command.data.reason : 'released';
  const released = { type: 'lease.released' as const, data: { reason, author: command.author }, lease: lease.id };
  const outcome = await destroyAndHandOff(rt, { lease, resource, blueprint, claim, releasedBy: { commandId: command.id, logs: [released] } });
  crashPoint('releaseAtOnce.after');
  return outcome;
}

/** acquired → active, once the resource is active and `activateLease` has prepared the lease. */
async function activate(rt: Runtime, lease: LeaseRow, claim: LeaseClaim, moved: LeaseMoved | null): Promise<LeaseStep> {
  const { store } = rt;
  const resource = await resourceOf(rt, lease, moved);
  if (resource?.status === 'pending') return PARK;
  const blueprint = blueprintOf(rt, resource);
  if (!resource || resource.status !== 'active' || !blueprint) {
    await store.unit(async (u) => {
      await store.casLease(u, lease.id, 'acquired', 'pending', { resource_id: null, allocating_resource_id: null, phase: null, phase_attempts: 0 }, {
        logs: [{ type: 'lease.requeued', data: { resource: lease.resourceId ?? '?', reason: resource ? `it is ${resource.status}` : 'it is gone' }, lease: lease.id }],
      });
      await store.releaseSlots(u, 'lease', lease.id);
      // A released or broken resource parks until its leases are gone: this one no longer counts.
      if (resource) {
        await store.uncountLease(u, resource.id);
        await store.wake(u, 'resource', [resource.id]);
      }
    });
    return REREAD;
  }
  // The acquisition recorded the intent to activate with its own CAS; a later pass finds
  // the intent and tells the hook it may be a resume.
  const fresh = claim.intent === 'activate' && lease.phase === 'activate';
  claim.intent = undefined;
  const resume = !fresh && lease.phase === 'activate';
  if (!fresh) await store.single((u) => store.update(u, 'lease', lease.id, 'acquired', { phase: 'activate', phase_attempts: lease.phaseAttempts + 1 }));
  const attempt = fresh ? 1 : lease.phaseAttempts + 1;
  const result = await callHook<{ attributes?: object } | undefined>(rt, blueprint, 'activateLease', leaseOnResourceContext(rt, blueprint, lease, resource, resume), undefined, attempt);
  if (!result.ok) {
    if (result.kind === 'retry') {
      await store.unit(async (u) => {
        await store.log(u, { type: 'hook.retry-later', data: { hook: 'activateLease', reason: result.reason, retryAt: result.at.toISO()! }, lease: lease.id, blueprint: blueprint.name });
        // Its outcome is recorded: the next call is a new try, not a resume.
        await store.update(u, 'lease', lease.id, 'acquired', { phase: retryPhase('activate') });
      });
      return at(result.at);
    }
    if (result.kind === 'child') return at(after(rt.clock.now(), rt.waitRecheck));
    await store.single((u) => store.log(u, hookFailureLog(result.error, { lease: lease.id, resource: resource.id })));
    await breakLease(rt, { ...lease, status: 'acquired' }, result.error.message);
    return REREAD;
  }
  const attributes = result.value?.attributes ? { ...lease.attributes, ...result.value.attributes } : lease.attributes;
  // Expired while the hook ran: a renewal written meanwhile (a keepalive) is applied first,
  // so the activating statement, which checks the expiry, sees it and the hook is not run again.
  if (lease.expiresAt && lease.expiresAt <= rt.clock.now()) await consumeCommands(rt, 'lease', lease.id);
  // One statement: while activateLease ran, the lease may have been released (acquire()
  // gave up, its holder let go), its resource may have broken, or it may have expired (its
  // late hook ran past expires_at). The late result then never activates it; a break after
  // the statement sees this lease active and breaks it too.
  // With no command waiting, the same statement ends the pass: it releases the claim on the
  // lease's work item, due at the expiry (a statement and a commit fewer per acquire).
  const activated = await store.single((u) =>
    store.activateLease(
      u,
      lease.id,
      resource,
      { phase: null, phase_attempts: 0, attributes },
      [{ type: 'lease.activated', data: { resource: resource.id }, lease: lease.id, resource: resource.id, blueprint: blueprint.name }],
      { workerId: rt.workerId, wakeCount: claim.wakeCount },
    ),
  );
  if (activated?.finished) return { next: 'finished', ...activated.finished };
  if (activated) return { lease: activated.row };
  // The next step consumes the command, or finds the resource gone and requeues the lease.
  await store.single((u) => store.update(u, 'lease', lease.id, 'acquired', { phase: null, phase_attempts: 0 }));
  return REREAD;
}

/** The destroy phase: `releaseLease` once, `destroyLease` until it succeeds (capped backoff), then destroyed. */
async function destroy(rt: Runtime, lease: LeaseRow, claim: LeaseClaim, moved: LeaseMoved | null): Promise<Outcome> {
  const { store } = rt;
  const resource = await resourceOf(rt, lease, moved);
  const blueprint = blueprintOf(rt, resource);
  if (resource && !blueprint) {
    // Another broker registers this blueprint; without it this one cannot run its hooks.
    return at(after(rt.clock.now(), rt.waitRecheck), claim.attempts);
  }
  if (resource && blueprint) {
    // A release recorded the intent to destroy with its own CAS; a later pass finds it.
    const fresh = claim.intent === 'destroy' && lease.phase === 'destroy';
    claim.intent = undefined;
    // releaseLease runs once, on the first try of the destroy phase; a resume is a try after one whose outcome was never recorded.
    const firstTry = fresh || !inDestroyPhase(lease.phase);
    const resume = !fresh && lease.phase === 'destroy';
    if (!fresh) await store.single((u) => store.update(u, 'lease', lease.id, lease.status, { phase: 'destroy', phase_attempts: lease.phaseAttempts + 1 }));
    const ctx = leaseOnResourceContext(rt, blueprint, lease, resource, resume);
    if (firstTry && lease.status === 'released') {
      const released = await callHook(rt, blueprint, 'releaseLease', ctx, undefined);
      if (!released.ok && released.kind === 'failed') {
        await store.single((u) => store.log(u, hookFailureLog(released.error, { lease: lease.id })));
      }
    }
    const attempt = claim.attempts + 1;
    const destroyed = await callHook(rt, blueprint, 'destroyLease', ctx, undefined, attempt);
    if (!destroyed.ok) return retryDestroy(rt, 'destroyLease', destroyed, attempt, { kind: 'lease', id: lease.id, status: lease.status }, { lease: lease.id, resource: resource.id, blueprint: blueprint.name });
  }
  return destroyAndHandOff(rt, { lease, resource, blueprint, claim });
}

/**
 * How a lease ends: its row as the pass has it, its resource and blueprint (none when it
 * never had a resource), the claim of the pass, and the release recorded with the destroy
 * (`releasedBy`: the command consumed, or written consumed), if any.
 */
interface Ending {
  lease: LeaseRow;
  resource: ResourceRow | null;
  blueprint: Blueprint<any, any, any> | undefined;
  claim: Pick<LeaseClaim, 'wakeCount' | 'handOffTo'>;
  releasedBy?: ReleasedBy;
}

/**
 * The unit of work that ends a lease: destroyed (and released with it, given `releasedBy`),
 * and its freed capacity handed on; the waiter's work item, when the hand-off claimed it
 * for this pass's worker, is the outcome's `then`. With the hand-off in the destroy's own
 * statement (`handsOffInStatement`), no quota to wake and no reservation held elsewhere,
 * that statement is the whole unit and commits by itself: no transaction around it.
 */
async function destroyAndHandOff(rt: Runtime, ending: Ending): Promise<Outcome> {
  const { lease } = ending;
  const reservedElsewhere = lease.allocatingResourceId !== null && lease.allocatingResourceId !== lease.resourceId;
  const alone = handsOffInStatement(ending) && !reservedElsewhere && quotasFor(rt, lease).length === 0;
  const { dropped, handedTo, freed } = alone ? await rt.store.single((u) => destroyIn(rt, u, ending, true)) : await rt.store.unit((u) => destroyIn(rt, u, ending));
  // A reservation held on another resource that the statement found all the same (the
  // lease's acquisition gives those back) is passed on next, in a unit of its own: a
  // crash before it leaves that resource to its waiter's recheck.
  if (freed.length > 0) await rt.store.unit(async (u) => { for (const f of freed) await rt.store.wakeNextWaiting(u, [f.type], [f.blueprint]); });
  if (!handedTo) return dropped ? WORK_DROPPED : DROP_WORK;
  return { next: dropped ? 'deleted' : 'delete', then: handedTo };
}

/**
 * Whether the destroy of `ending` hands its resource on in its own statement
 * (`Store.destroyLease`): when the lease has a resource whose blueprint this broker has,
 * and the claim of the waiter's work item needs no slot asked for first (the inline
 * release's does: it asks only once it knows a lease waits, so its hand-off is a
 * statement after the destroy).
 */
function handsOffInStatement({ resource, blueprint, claim }: Ending): boolean {
  return resource !== null && blueprint !== undefined && !claim.handOffTo?.slot;
}

/** That hand-off, as of `now` (see `handsOffInStatement`), or undefined. */
function handOffOf(ending: Ending, now: DateTime): DestroyHandOff | undefined {
  const { resource, blueprint, claim } = ending;
  if (!handsOffInStatement(ending) || !resource || !blueprint) return undefined;
  const to = claim.handOffTo;
  return {
    resourceId: resource.id,
    type: resource.type,
    blueprint: resource.blueprint,
    retirement: retirementOf(blueprint, now),
    claimFor: to && { worker: to.worker, until: after(now, to.ttl) },
  };
}

/**
 * `destroyAndHandOff` in a unit of the caller's; resolves with whether the lease's work
 * item went with it, the waiter's work item the hand-off claimed, if it did, and (`alone`:
 * the unit is one statement) the reservations held elsewhere still to pass on.
 */
async function destroyIn(
  rt: Runtime,
  u: Unit,
  ending: Ending,
  alone = false,
): Promise<{ dropped: boolean; handedTo: HandedWork | null; freed: Array<{ type: string; blueprint: string }> }> {
  const { lease, resource, blueprint, claim, releasedBy } = ending;
  const { store } = rt;
  const handOff = handOffOf(ending, u.now);
  // One statement: the lease is destroyed, its slot locks go, a reservation it held goes
  // to the next waiter, its resource counts one lease fewer (idle from now if it was the
  // last), and its work item goes unless a wake came during this pass; with `handOff`,
  // the resource is handed on in it too.
  const destroyed = await store.destroyLease(
    u,
    lease.id,
    lease.status,
    [{ type: 'lease.destroyed', data: {}, lease: lease.id, resource: lease.resourceId, blueprint: resource?.blueprint ?? null }],
    { workerId: rt.workerId, wakeCount: claim.wakeCount },
    releasedBy,
    handOff,
    // Left idle, a resource with an idle expiry or a recycling limit has it scheduled (the
    // statement wakes one on its way out or of a draining blueprint anyway).
    blueprint !== undefined && (blueprint.limits.idleExpiry !== null || recycles(blueprint)),
  );
  const { freed, left, dropped, waiting } = destroyed;
  if (!alone) {
    for (const f of freed) await store.wakeNextWaiting(u, [f.type], [f.blueprint]);
    // A place in each quota that counted it: the best waiter the quota holds back looks now.
    if (lease.resourceId) for (const quota of quotasFor(rt, lease)) await store.wakeQuotaWaiter(u, quota);
  }
  if (handOff) {
    const handed = destroyed.handedTo;
    // The waiter's pass starts from the statement's rows, with no read of its own.
    const handedTo = handed?.claimed ? { ...handed.claimed, ...(handed.waiter ? { moved: { lease: handed.waiter } } : {}) } : null;
    return { dropped, handedTo, freed: alone ? freed : [] };
  }
  crashPoint('destroy.beforeHandOff');
  if (!left) return { dropped, handedTo: null, freed: [] };
  const active = left.status === 'active';
  // Recycled or of a draining blueprint: it takes no new lease, so it is handed to no waiter.
  const retired = active && (blueprint ? retiredBecause(blueprint, left, u.now) !== null : left.blueprintDraining);
  // No lease waited for it when the destroy ran: no hand-off (one statement fewer on the usual release).
  if (!(active && !retired && waiting)) return { dropped, handedTo: null, freed: [] };
  const to = claim.handOffTo;
  const claimFor = to && (!to.slot || to.slot()) ? { worker: to.worker, until: after(u.now, to.ttl) } : undefined;
  const handed = await store.handOff(u, left.id, left.type, left.blueprint, claimFor);
  return { dropped, handedTo: handed?.claimed ?? null, freed: [] };
}

/** Why `releaseInline` left the release to the lease's worker: the transaction is rolled back, undoing the claim. */
class NotInline extends Error {}

/**
 * What the holder's release run inline did: the lease is destroyed already (its blueprint
 * has no hook to call at its end), with `handedTo` the waiting lease whose work item its
 * hand-off claimed, or released with the intent to destroy, and `moved` and the claim's
 * `wakeCount` are for the pass that runs its destroy phase. Either pass runs in the slot
 * the caller reserved. Null: nothing was written, and the release goes to the lease's worker.
 */
export type InlineRelease = { done: 'destroyed'; handedTo: ClaimedWork | null } | { done: 'released'; moved: LeaseMoved; wakeCount: number } | null;

/**
 * The holder's own release, run inline by its broker: when no worker holds the lease's work
 * item, the caller claims it (becoming the lease's single writer for that instant) and
 * writes its release command already consumed by the status change it causes. On a
 * blueprint with neither `releaseLease` nor `destroyLease` the lease is released and
 * destroyed there, and its capacity handed on: one transaction, no worker pass. On a
 * blueprint with either, the lease is released with the intent to destroy (as a consumed
 * command leaves it) in the statement that claims it, and the caller runs the destroy phase
 * as a pass of its own workers under the claim it now holds, in a slot `reserve` promised
 * first: a command write, a claim and a read fewer than the worker's path, and one
 * statement with no transaction around it. Resolves null, with nothing written, when
 * the usual path must run instead: no slot is free, a worker holds the item, or the lease
 * is not active or has commands waiting. With no hook to call, a slot is asked for only
 * when a lease waits for the resource: the hand-off claims that lease's work item for it
 * (`handOffTtl`, how long that claim lives), and its pass runs there next, as after a
 * worker's destroy. `reserve` must be idempotent: a transaction may run again.
 */
export async function releaseInline(
  rt: Runtime,
  leaseId: string,
  blueprintName: string,
  written: { data: { reason: string }; author: string | null },
  claimUntil: DateTime,
  reserve: () => boolean,
  handOffTtl: Duration,
): Promise<InlineRelease> {
  const { store } = rt;
  const blueprint = rt.blueprints.get(blueprintName);
  if (!blueprint) return null;
  const released = { type: 'lease.released' as const, data: { reason: written.data.reason, author: written.author }, lease: leaseId };
  if (!endsWithoutHooks(blueprint)) {
    if (!reserve()) return null;
    // As the worker's consumption of the command leaves it: released, with the intent to
    // destroy; claim and release in one statement, which commits by itself. A lease that
    // moved on, or is claimed, is the worker's path again, not an error.
    const done = await store.single((u) => store.releaseClaimed(u, leaseId, blueprintName, { workerId: rt.workerId, until: claimUntil }, { written, logs: [released] }));
    if (!done) return null;
    // Released, the claim held by this broker and no pass running yet: a crash here leaves the claim to expire and another worker to resume the destroy phase.
    crashPoint('releaseInline.released');
    return { done: 'released', moved: { lease: done.lease, resource: done.resource, intent: 'destroy' }, wakeCount: done.wakeCount };
  }
  try {
    return await store.unit(async (u): Promise<InlineRelease> => {
      const claimed = await store.claimLease(u, leaseId, rt.workerId, claimUntil);
      const lease = claimed?.lease;
      const resource = lease ? resourceReadWith(lease) : null;
      if (!claimed || !lease || lease.status !== 'active' || lease.hasCommands || !resource || resource.blueprint !== blueprintName) throw new NotInline();
      crashPoint('releaseInline.claimed');
      const handOffTo = { worker: rt.workerId, ttl: handOffTtl, slot: reserve };
      const { handedTo } = await destroyIn(rt, u, { lease, resource, blueprint, claim: { ...claimed, handOffTo }, releasedBy: { written, logs: [released] } });
      return { done: 'destroyed', handedTo };
    });
  } catch (error) {
    if (error instanceof NotInline) return null;
    throw error;
  }
}
