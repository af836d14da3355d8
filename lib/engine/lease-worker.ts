import type { Blueprint } from '../blueprint/contract.js';
import { LEASE_STATE_FLAGS } from '../model/states.js';
import type { LeaseRow, ResourceRow } from '../store/store.js';
import { allocate, breakLease } from './allocator.js';
import { consumeCommands, stopRequested } from './commands.js';
import { baseContext, callHook, errorCode, leaseView, resourceView } from './hooks.js';
import { at, backoffDelay, DELETE, PARK, type Outcome, type Runtime } from './runtime.js';

export interface LeaseClaim {
  id: string;
  chained: boolean;
  attempts: number;
}

const MAX_STEPS = 12;

/**
 * The single writer of one lease: consumes its commands, then moves it along
 * pending → acquired → active → released → destroyed until it has to wait.
 */
export async function processLease(rt: Runtime, claim: LeaseClaim): Promise<Outcome> {
  const { store } = rt;
  for (let step = 0; step < MAX_STEPS; step++) {
    const lease = await store.lease(claim.id);
    if (!lease) return DELETE;
    if (await consumeCommands(rt, 'lease', lease.id)) continue;
    const now = rt.clock.now();

    if (LEASE_STATE_FLAGS[lease.status].live) {
      if (lease.expiresAt && lease.expiresAt <= now) {
        await release(rt, lease, 'lease.expired', { at: lease.expiresAt.toISO()! }, 'expired');
        continue;
      }
      if (lease.status !== 'active' && lease.deadlineAt && lease.deadlineAt <= now) {
        await release(rt, lease, 'lease.timeout', { timeout: 'its acquire timeout' }, 'timeout');
        continue;
      }
    }

    switch (lease.status) {
      case 'pending': {
        const result = await allocate(rt, lease, claim);
        claim.chained = false;
        if (result === 'progress') continue;
        return result;
      }
      case 'acquired': {
        const result = await activate(rt, lease);
        if (result === 'progress') continue;
        return result;
      }
      case 'active':
        return lease.expiresAt ? at(lease.expiresAt) : PARK;
      case 'released':
      case 'broken':
        return destroy(rt, lease, claim);
      case 'destroyed':
        return DELETE;
    }
  }
  return at(rt.clock.now());
}

async function release(rt: Runtime, lease: LeaseRow, type: 'lease.expired' | 'lease.timeout', data: any, reason: string) {
  const { store } = rt;
  await store.unit(async (u) => {
    // The row the CAS returns: a hand-off may have pointed the lease at a reserved resource since it was read.
    const left = await store.casLease(u, lease.id, lease.status, 'released');
    await store.log(u, { type, data, lease: lease.id });
    await store.log(u, { type: 'lease.released', data: { reason, author: null }, lease: lease.id });
    await store.leaseLeftLive(u, left);
  });
}

function blueprintOf(rt: Runtime, resource: ResourceRow | null): Blueprint<any, any, any> | undefined {
  return resource ? rt.blueprints.get(resource.blueprint) : undefined;
}

function leaseOnResourceContext(rt: Runtime, blueprint: Blueprint<any, any, any>, lease: LeaseRow, resource: ResourceRow, leaseCount: number, resume: boolean) {
  return { ...baseContext(rt, blueprint, { lease: lease.id, resource: resource.id }, resume), lease: leaseView(lease), resource: resourceView(resource, leaseCount) };
}

/** acquired → active, once the resource is active and `activateLease` has prepared the lease. */
async function activate(rt: Runtime, lease: LeaseRow): Promise<'progress' | Outcome> {
  const { store } = rt;
  const resource = lease.resourceId ? await store.resource(lease.resourceId) : null;
  if (resource?.status === 'pending') return PARK;
  const blueprint = blueprintOf(rt, resource);
  if (!resource || resource.status !== 'active' || !blueprint) {
    await store.unit(async (u) => {
      await store.casLease(u, lease.id, 'acquired', 'pending', { resource_id: null, phase: null, phase_attempts: 0 });
      await store.releaseSlots(u, 'lease', lease.id);
      // A released or broken resource parks until its leases are gone: this one no longer counts.
      if (resource) await store.wake(u, 'resource', [resource.id]);
      await store.log(u, { type: 'lease.requeued', data: { resource: lease.resourceId ?? '?', reason: resource ? `it is ${resource.status}` : 'it is gone' }, lease: lease.id });
    });
    return 'progress';
  }
  const resume = lease.phase === 'activate';
  await store.unit((u) => store.update(u, 'lease', lease.id, 'acquired', { phase: 'activate', phase_attempts: lease.phaseAttempts + 1 }));
  const leaseCount = await store.liveLeaseCount(resource.id);
  const result = await callHook<{ attributes?: object } | undefined>(rt, blueprint, 'activateLease', leaseOnResourceContext(rt, blueprint, lease, resource, leaseCount, resume), undefined, lease.phaseAttempts + 1);
  if (!result.ok) {
    if (result.kind === 'retry') {
      await store.unit((u) => store.log(u, { type: 'hook.retry-later', data: { hook: 'activateLease', reason: result.reason, retryAt: result.at.toISO()! }, lease: lease.id, blueprint: blueprint.name }));
      return at(result.at);
    }
    if (result.kind === 'child') return at(rt.clock.now().plus(rt.waitRecheck));
    await store.unit((u) =>
      store.log(u, { type: 'hook.failure', data: { hook: 'activateLease', error: result.error.message, code: errorCode(result.error), retry: false }, lease: lease.id, resource: resource.id, blueprint: blueprint.name }),
    );
    await breakLease(rt, { ...lease, status: 'acquired' }, result.error.message);
    return 'progress';
  }
  await store.unit(async (u) => {
    // While activateLease ran, the lease may have been released (acquire() gave up, its
    // holder let go) or its resource may have broken. The late result then never activates
    // it: the next step consumes the command, or finds the resource gone and requeues the
    // lease. FOR SHARE holds the resource's status until this commits: a break after it
    // sees this lease active and breaks it too.
    const [current] = await u.sql.query(`SELECT status FROM ${store.s}.resources WHERE id = $1 FOR SHARE`, [resource.id]);
    if (current?.status !== 'active' || (await stopRequested(rt, u, 'lease', lease.id))) {
      await store.update(u, 'lease', lease.id, 'acquired', { phase: null, phase_attempts: 0 });
      return;
    }
    const attributes = result.value?.attributes ? { ...lease.attributes, ...result.value.attributes } : lease.attributes;
    await store.casLease(u, lease.id, 'acquired', 'active', { phase: null, phase_attempts: 0, attributes });
    await store.log(u, { type: 'lease.activated', data: { resource: resource.id }, lease: lease.id, resource: resource.id, blueprint: blueprint.name });
  });
  return 'progress';
}

/** The destroy phase: `releaseLease` once, `destroyLease` until it succeeds (capped backoff), then destroyed. */
async function destroy(rt: Runtime, lease: LeaseRow, claim: LeaseClaim): Promise<Outcome> {
  const { store } = rt;
  const resource = lease.resourceId ? await store.resource(lease.resourceId) : null;
  const blueprint = blueprintOf(rt, resource);
  if (resource && !blueprint) {
    // Another broker registers this blueprint; without it this one cannot run its hooks.
    return at(rt.clock.now().plus(rt.waitRecheck), claim.attempts);
  }
  if (resource && blueprint) {
    const firstTry = lease.phase !== 'destroy';
    await store.unit((u) => store.update(u, 'lease', lease.id, lease.status, { phase: 'destroy', phase_attempts: lease.phaseAttempts + 1 }));
    const leaseCount = await store.liveLeaseCount(resource.id);
    const ctx = leaseOnResourceContext(rt, blueprint, lease, resource, leaseCount, !firstTry);
    if (firstTry && lease.status === 'released') {
      const released = await callHook(rt, blueprint, 'releaseLease', ctx, undefined);
      if (!released.ok && released.kind === 'failed') {
        await store.unit((u) => store.log(u, { type: 'hook.failure', data: { hook: 'releaseLease', error: released.error.message, code: errorCode(released.error), retry: false }, lease: lease.id, blueprint: blueprint.name }));
      }
    }
    const attempt = claim.attempts + 1;
    const destroyed = await callHook(rt, blueprint, 'destroyLease', ctx, undefined, attempt);
    if (!destroyed.ok) {
      const retryAt = destroyed.kind === 'retry' ? destroyed.at : rt.clock.now().plus(backoffDelay(rt, attempt));
      const error = destroyed.kind === 'failed' ? destroyed.error.message : destroyed.kind === 'retry' ? destroyed.reason : 'waiting';
      await store.unit((u) =>
        store.log(u, { type: 'hook.failure', data: { hook: 'destroyLease', error, code: destroyed.kind === 'failed' ? errorCode(destroyed.error) : null, retry: true, attempt, retryAt: retryAt.toISO() }, lease: lease.id, resource: resource.id, blueprint: blueprint.name }),
      );
      return at(retryAt, attempt);
    }
  }
  await store.unit(async (u) => {
    await store.casLease(u, lease.id, lease.status, 'destroyed', { phase: null, phase_attempts: 0 });
    await store.releaseSlots(u, 'lease', lease.id);
    await store.log(u, { type: 'lease.destroyed', data: {}, lease: lease.id, resource: lease.resourceId, blueprint: resource?.blueprint ?? null });
    await store.leaseLeftLive(u, lease);
    if (resource && blueprint) await store.handOff(u, resource.id, blueprint.type, blueprint.name);
  });
  return DELETE;
}
