import type { Blueprint } from '../blueprint/contract.js';
import { NoBlueprintError } from '../errors/no-blueprint-error.js';
import { SlotLockConflictError } from '../errors/slot-lock-conflict-error.js';
import type { LeaseRow, ResourceRow } from '../store/store.js';
import { mapResource } from '../store/store.js';
import { toDb } from '../time.js';
import { crashPoint } from './crash-points.js';
import { baseContext, callHook, errorCode, leaseView, resourceView, type HookResult } from './hooks.js';
import { at, blueprintsForType, type Outcome, type Runtime } from './runtime.js';

/** A pass either moved the lease on (`progress`: look at it again) or decided when to look next. */
export type AllocatorResult = 'progress' | Outcome;

interface Claim {
  chained: boolean;
}

/**
 * The allocator for one pending lease, in Drydock's order: acquire an existing active
 * resource; else allocate a new one if `canAllocate`, the allocation limit and
 * `maxResources` allow; else reclaim an idle resource; else wait. A pending lease
 * drives at most one allocation at a time (`allocating_resource_id`) and waits for it.
 */
export async function allocate(rt: Runtime, lease: LeaseRow, claim: Claim): Promise<AllocatorResult> {
  const { store } = rt;
  const reasons: string[] = [];
  const ofType = blueprintsForType(rt, lease.type);
  const allowed = lease.blueprints ? ofType.filter((b) => lease.blueprints!.includes(b.name)) : ofType;
  const candidates: Blueprint<any, any, any>[] = [];
  for (const blueprint of allowed) {
    if (!blueprint.enabled) {
      reasons.push(`${blueprint.name} is disabled`);
      continue;
    }
    const ever = await leaseHook<boolean>(rt, blueprint, 'canEverAllocate', lease, true);
    if (!ever.ok) return hookTrouble(rt, lease, ever);
    if (ever.value) candidates.push(blueprint);
    else reasons.push(`${blueprint.name}: canEverAllocate said no`);
  }
  if (candidates.length === 0) {
    const error = new NoBlueprintError(lease.type, allowed.map((b) => b.name), reasons);
    await breakLease(rt, lease, error.message);
    return 'progress';
  }
  const names = candidates.map((b) => b.name);
  const byName = new Map(candidates.map((b) => [b.name, b]));

  // The allocation this lease already drives comes first; while it is pending, wait for it.
  if (lease.allocatingResourceId) {
    const driven = await store.resource(lease.allocatingResourceId);
    if (driven?.status === 'pending') return wait(rt, lease, claim, names, [`waiting for resource ${driven.id} to activate`]);
    const blueprint = driven && byName.get(driven.blueprint);
    if (driven?.status === 'active' && blueprint) {
      const got = await tryAcquire(rt, lease, driven, blueprint, reasons);
      if (got !== 'no') return got;
    }
    await store.unit(async (u) => {
      await store.update(u, 'lease', lease.id, 'pending', { allocating_resource_id: null });
      await u.sql.query(`UPDATE ${store.s}.resources SET reserved_for = NULL WHERE id = $1 AND reserved_for = $2`, [lease.allocatingResourceId, lease.id]);
    });
    lease.allocatingResourceId = null;
    // The reservation was a hand-off this lease could not use: pass it on.
    claim.chained = true;
  }

  // 1. An existing active resource: unleased ones first, then shared ones.
  const rows = await store.db.query(
    `SELECT r.*, (SELECT count(*)::int FROM ${store.s}.leases l WHERE l.resource_id = r.id AND l.status <> 'destroyed') AS lease_count
     FROM ${store.s}.resources r
     WHERE r.blueprint = ANY($1::text[]) AND r.status = 'active' AND (r.reserved_for IS NULL OR r.reserved_for = $2)
     ORDER BY lease_count, r.created_at, r.id`,
    [names, lease.id],
  );
  const active = rows.map((r) => ({ resource: mapResource(r), leaseCount: Number(r.lease_count) }));
  const tryAll = async (list: typeof active) => {
    for (const { resource } of list) {
      const got = await tryAcquire(rt, lease, resource, byName.get(resource.blueprint)!, reasons);
      if (got !== 'no') return got;
    }
    return 'no' as const;
  };
  let got = await tryAll(active.filter((a) => a.leaseCount === 0));
  if (got !== 'no') return got;

  // 2. A new resource; supplemental blueprints grow before they share.
  const full: Blueprint<any, any, any>[] = [];
  const grow = async (list: Blueprint<any, any, any>[]) => {
    for (const blueprint of list) {
      const result = await tryAllocate(rt, lease, blueprint, reasons);
      // 'progress' without 'allocated': canAllocate failed and broke the lease. Going on to
      // the next blueprint would build a resource reserved for a broken lease, forever.
      if (result === 'allocated' || result === 'look-again' || result === 'progress') return 'progress' as const;
      if (typeof result === 'object') return result;
      if (result === 'full') full.push(blueprint);
    }
    return 'no' as const;
  };
  const supplemental = candidates.filter((b) => b.limits.supplemental);
  let grew = await grow(supplemental);
  if (grew !== 'no') return grew;
  got = await tryAll(active.filter((a) => a.leaseCount > 0));
  if (got !== 'no') return got;
  grew = await grow(candidates.filter((b) => !b.limits.supplemental));
  if (grew !== 'no') return grew;

  // 3. Reclaim an idle resource of a blueprint that is at its cap.
  for (const blueprint of full) {
    const reclaimed = await reclaimIdle(rt, lease, blueprint);
    if (reclaimed) {
      reasons.push(`reclaiming idle resource ${reclaimed} of ${blueprint.name}`);
      break;
    }
  }

  // 4. Wait.
  return wait(rt, lease, claim, names, reasons);
}

async function leaseHook<T>(rt: Runtime, blueprint: Blueprint<any, any, any>, hook: string, lease: LeaseRow, fallback: T, resource?: { row: ResourceRow; leaseCount: number }, extra: object = {}) {
  const ctx = {
    ...baseContext(rt, blueprint, { lease: lease.id, resource: resource?.row.id }, false),
    lease: leaseView(lease),
    ...(resource ? { resource: resourceView(resource.row, resource.leaseCount) } : {}),
    ...extra,
  };
  return callHook<T>(rt, blueprint, hook, ctx, fallback);
}

/** A hook of the allocator that did not answer: RetryLater waits, anything else breaks the lease. */
async function hookTrouble(rt: Runtime, lease: LeaseRow, result: Exclude<HookResult<unknown>, { ok: true }>): Promise<AllocatorResult> {
  const { store } = rt;
  if (result.kind === 'retry') {
    await store.unit((u) => store.log(u, { type: 'hook.retry-later', data: { hook: 'allocator', reason: result.reason, retryAt: result.at.toISO()! }, lease: lease.id }));
    return at(result.at);
  }
  if (result.kind === 'child') return at(rt.clock.now().plus(rt.waitRecheck));
  await store.unit(async (u) => {
    await store.log(u, { type: 'hook.failure', data: { hook: result.error.hook, error: result.error.message, code: errorCode(result.error), retry: false }, lease: lease.id, blueprint: result.error.blueprint });
  });
  await breakLease(rt, lease, result.error.message);
  return 'progress';
}

export async function breakLease(rt: Runtime, lease: LeaseRow, reason: string): Promise<void> {
  const { store } = rt;
  await store.unit(async (u) => {
    await store.casLease(u, lease.id, lease.status, 'broken', { broken_reason: reason });
    await store.log(u, { type: 'lease.broken', data: { reason }, lease: lease.id });
  });
}

async function tryAcquire(rt: Runtime, lease: LeaseRow, resource: ResourceRow, blueprint: Blueprint<any, any, any>, reasons: string[]): Promise<'no' | AllocatorResult> {
  const { store } = rt;
  const leaseCount = await store.liveLeaseCount(resource.id);
  const can = await leaseHook<boolean>(rt, blueprint, 'canAcquireLease', lease, true, { row: resource, leaseCount });
  if (!can.ok) return hookTrouble(rt, lease, can);
  if (!can.value) {
    reasons.push(`${resource.id} cannot take this lease`);
    return 'no';
  }
  const slots: string[] = [];
  const acquired = await leaseHook<{ attributes?: object } | undefined>(rt, blueprint, 'acquireLease', lease, undefined, { row: resource, leaseCount }, {
    lockSlots: (keys: string[]) => slots.push(...keys.map(String)),
  });
  if (!acquired.ok) return hookTrouble(rt, lease, acquired);
  try {
    const done = await store.unit(async (u) => {
      // The row lock keeps the resource `active` until this acquisition commits. It is an
      // update lock, not FOR SHARE: this unit updates the row below, and two acquisitions
      // that both held a share lock would deadlock upgrading it (seen on Postgres).
      const current = await u.sql.query(`SELECT status, reserved_for FROM ${store.s}.resources WHERE id = $1 FOR NO KEY UPDATE`, [resource.id]);
      const row = current[0];
      if (!row || row.status !== 'active' || (row.reserved_for && row.reserved_for !== lease.id)) return false;
      await store.lockSlots(u, 'lease', lease.id, slots);
      // A hand-off (Store.handOff) may have reserved another resource for this lease since the
      // pass read it. Read the pointer under the row lock; the CAS below clears it, so its
      // reservation is freed here, or it would keep that resource from everyone for good.
      const [pointer] = await u.sql.query(`SELECT allocating_resource_id FROM ${store.s}.leases WHERE id = $1 FOR UPDATE`, [lease.id]);
      const attributes = acquired.value?.attributes ? { ...lease.attributes, ...acquired.value.attributes } : lease.attributes;
      await store.casLease(u, lease.id, 'pending', 'acquired', { resource_id: resource.id, allocating_resource_id: null, wait_log_id: null, attributes });
      const other = pointer?.allocating_resource_id;
      if (other && other !== resource.id) {
        const freed = await u.sql.query(`UPDATE ${store.s}.resources SET reserved_for = NULL WHERE id = $1 AND reserved_for = $2 RETURNING type, blueprint`, [other, lease.id]);
        if (freed[0]) await store.wakeNextWaiting(u, [freed[0].type], [freed[0].blueprint]);
      }
      // The resource is no longer idle: its idle clock restarts when its last lease is gone.
      await u.sql.query(`UPDATE ${store.s}.resources SET idle_since = NULL, reserved_for = NULLIF(reserved_for, $2) WHERE id = $1`, [resource.id, lease.id]);
      // The resource may take more leases (shared slots): the best waiter gets a look now,
      // and passes the wake on in turn, instead of waiting for its recheck. Any waiter, not
      // only those ranked after this lease: with concurrent workers a later lease can win
      // the allocation while an earlier one parked as "full" (seen on Postgres).
      await store.wakeNextWaiting(u, [resource.type], [blueprint.name]);
      await store.log(u, { type: 'lease.acquired', data: { resource: resource.id, blueprint: blueprint.name }, lease: lease.id, resource: resource.id, blueprint: blueprint.name });
      return true;
    });
    if (!done) {
      reasons.push(`${resource.id} is no longer available`);
      return 'no';
    }
    return 'progress';
  } catch (error) {
    if (!(error instanceof SlotLockConflictError)) throw error;
    const data = { keys: error.keys, resource: resource.id };
    await store.unit(async (u) => {
      // Invariant 5: the same conflict seen again on a recheck bumps its row instead of writing a new one.
      const [last] = await u.sql.query(
        `SELECT id, data FROM ${store.s}.logs WHERE lease_id = $1 AND type = 'lease.slot-lock-failure' AND at >= $2 ORDER BY id DESC LIMIT 1`,
        [lease.id, toDb(lease.statusChangedAt)],
      );
      const same = last !== undefined && last.data?.resource === data.resource && JSON.stringify(last.data?.keys) === JSON.stringify(data.keys);
      if (!(same && (await store.bumpLog(u, Number(last.id), data)))) {
        await store.log(u, { type: 'lease.slot-lock-failure', data, lease: lease.id, resource: resource.id, blueprint: blueprint.name });
      }
    });
    reasons.push(`slot locks ${error.keys.join(', ')} are held`);
    return 'no';
  }
}

type AllocateResult = 'allocated' | 'look-again' | 'no' | 'rate-limited' | 'full' | AllocatorResult;

async function tryAllocate(rt: Runtime, lease: LeaseRow, blueprint: Blueprint<any, any, any>, reasons: string[]): Promise<AllocateResult> {
  const { store } = rt;
  const can = await leaseHook<boolean>(rt, blueprint, 'canAllocate', lease, true);
  if (!can.ok) return hookTrouble(rt, lease, can);
  if (!can.value) {
    reasons.push(`${blueprint.name} has no capacity now`);
    return 'no';
  }
  const resourceId = store.newId('res');
  const result = await store.unit(async (u) => {
    // A hand-off may have reserved an active resource for this lease since the pass read it:
    // then use that one (the caller looks again) instead of overwriting the pointer, which
    // would leave that resource reserved for a lease that never comes for it.
    const [pointer] = await u.sql.query(`SELECT allocating_resource_id FROM ${store.s}.leases WHERE id = $1 AND status = 'pending' FOR UPDATE`, [lease.id]);
    if (!pointer || pointer.allocating_resource_id) return 'look-again' as const;
    // Short and hook-free: allocation decisions of one blueprint are serialized here.
    await u.sql.query(store.sql.allocationLock, [`slipway:alloc:${store.db.schema}:${blueprint.name}`]);
    const [counts] = await u.sql.query<{ allocating: number; active: number }>(store.sql.allocationCounts, [blueprint.name]);
    const limit = blueprint.limits.allocationLimit(Number(counts.active));
    if (Number(counts.allocating) >= limit) return 'rate-limited' as const;
    const max = blueprint.limits.maxResources;
    if (max !== null) {
      const keys = Array.from({ length: max }, (_, i) => `slipway:capacity:${blueprint.name}:${i}`);
      const taken = await u.sql.query(store.sql.takeCapacitySlot, [keys, resourceId, toDb(u.now)]);
      if (taken.length === 0) return 'full' as const;
    }
    await u.sql.query(
      `INSERT INTO ${store.s}.resources (id, type, blueprint, status, attributes, reserved_for, created_at, status_changed_at)
       VALUES ($1, $2, $3, 'pending', '{}'::jsonb, $4, $5, $5)`,
      [resourceId, blueprint.type, blueprint.name, lease.id, toDb(u.now)],
    );
    u.events.push({ kind: 'resource', id: resourceId, from: null, to: 'pending' });
    await store.ensureWork(u, 'resource', resourceId, u.now);
    await store.update(u, 'lease', lease.id, 'pending', { allocating_resource_id: resourceId });
    await store.log(u, { type: 'resource.allocating', data: { lease: lease.id }, lease: lease.id, resource: resourceId, blueprint: blueprint.name });
    return 'allocated' as const;
  });
  if (result === 'allocated') crashPoint('allocate.recorded');
  if (result === 'rate-limited') reasons.push(`${blueprint.name} is at its allocation limit`);
  if (result === 'full') reasons.push(`${blueprint.name} is at maxResources (${blueprint.limits.maxResources})`);
  return result;
}

async function reclaimIdle(rt: Runtime, lease: LeaseRow, blueprint: Blueprint<any, any, any>): Promise<string | null> {
  const { store } = rt;
  return store.unit(async (u) => {
    const idleBefore = u.now.minus(blueprint.limits.reclaimIdleAfter);
    const rows = await u.sql.query(
      `SELECT r.id FROM ${store.s}.resources r
       WHERE r.blueprint = $1 AND r.status = 'active' AND r.reserved_for IS NULL
         AND r.idle_since IS NOT NULL AND r.idle_since <= $2
         AND NOT EXISTS (SELECT 1 FROM ${store.s}.leases l WHERE l.resource_id = r.id AND l.status <> 'destroyed')
         AND NOT EXISTS (SELECT 1 FROM ${store.s}.commands c WHERE c.target_kind = 'resource' AND c.target_id = r.id AND c.consumed_at IS NULL)
         -- Never reclaim a resource built for this very lease: refusing it and then
         -- rebuilding it would churn without end.
         AND NOT EXISTS (SELECT 1 FROM ${store.s}.logs g WHERE g.lease_id = $3 AND g.resource_id = r.id AND g.type = 'resource.allocating')
       ORDER BY r.idle_since, r.id LIMIT 1 FOR UPDATE OF r SKIP LOCKED`,
      [blueprint.name, toDb(idleBefore), lease.id],
    );
    if (!rows[0]) return null;
    const id = rows[0].id as string;
    await store.command(u, 'resource', id, 'reclaim', { lease: lease.id }, `lease:${lease.id}`);
    await store.log(u, { type: 'lease.reclaim', data: { resource: id, blueprint: blueprint.name }, lease: lease.id, resource: id, blueprint: blueprint.name });
    return id;
  });
}

/** One wait is one log row: a repeated wait bumps its count instead of writing a new row. */
async function wait(rt: Runtime, lease: LeaseRow, claim: Claim, names: string[], reasons: string[]): Promise<Outcome> {
  const { store } = rt;
  await store.unit(async (u) => {
    const data = { reasons: reasons.length ? reasons : ['no resource is free'], blueprints: names };
    const bumped = lease.waitLogId !== null && (await store.bumpLog(u, lease.waitLogId, data));
    if (!bumped) {
      const id = await store.log(u, { type: 'lease.waiting-for-resources', data, lease: lease.id });
      await store.update(u, 'lease', lease.id, 'pending', { wait_log_id: id });
    }
    // A wake this lease could not use passes on to the next waiting lease.
    if (claim.chained) await store.wakeNextWaiting(u, [lease.type], names, { priority: lease.priority, seq: lease.seq });
  });
  let next = rt.clock.now().plus(rt.waitRecheck);
  if (lease.deadlineAt && lease.deadlineAt < next) next = lease.deadlineAt;
  if (lease.expiresAt && lease.expiresAt < next) next = lease.expiresAt;
  return at(next);
}
