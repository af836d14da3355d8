import type { DateTime } from 'luxon';
import type { Blueprint } from '../blueprint/contract.js';
import type { Logger } from '../engine/runtime.js';
import { LEASE_STATE_FLAGS, LEASE_STATUSES, RESOURCE_STATE_FLAGS, RESOURCE_STATUSES, type LeaseStatus, type ResourceStatus } from '../model/states.js';
import { collectGarbage } from '../store/gc.js';
import type { StoreBackend } from '../store/backend.js';
import type { BrokerContext } from './context.js';
import type { BlueprintStats, BrokerStats, TypeStats } from './types.js';

/**
 * Collects history older than `retention` every `gcInterval` while the broker's workers
 * run; one collection at a time. Returns the stop, which waits for one in flight.
 */
export function startGcTimer(ctx: BrokerContext, logger: Logger): () => Promise<void> {
  const { gcInterval, retention, clock } = ctx.settings;
  if (!gcInterval) return async () => undefined;
  let running: Promise<void> | undefined;
  const timer = setInterval(() => {
    if (running) return;
    running = collectGarbage(ctx.store, clock.now().minus(retention))
      .then((r) => {
        if (r.leases + r.resources + r.logs + r.commands > 0) logger.debug({ ...r }, 'slipway: collected history');
      })
      .catch((error) => logger.warn({ err: error }, 'slipway: collecting history failed; the next interval retries'))
      .finally(() => (running = undefined));
  }, gcInterval.toMillis());
  timer.unref();
  return async () => {
    clearInterval(timer);
    await running;
  };
}

/** `broker.stats()`: counts and ages per blueprint and per type, live apart from the deletion lane. */
export async function computeStats(store: StoreBackend, now: DateTime, blueprints: Map<string, Blueprint<any, any, any>>): Promise<BrokerStats> {
  const zero = <S extends string>(list: readonly S[]) => Object.fromEntries(list.map((s) => [s, 0])) as Record<S, number>;
  const blueprintStats = (type: string, requireAuthorization: boolean): BlueprintStats => ({
    type, resources: zero(RESOURCE_STATUSES), allocating: 0, live: 0, deletionLane: 0, destroying: 0, oldestAgeMs: {}, failures: null, requireAuthorization, requestedAuthorizations: 0, draining: false, idle: 0, warmTarget: 0,
  });
  const typeStats = (): TypeStats => ({ leases: zero(LEASE_STATUSES), waiting: 0, waitingForAuthorization: 0, live: 0, deletionLane: 0, oldestAgeMs: {} });
  const result: BrokerStats = { blueprints: {}, types: {} };
  for (const b of blueprints.values()) {
    result.blueprints[b.name] = { ...blueprintStats(b.type, b.requireAuthorization), warmTarget: b.limits.minIdle };
    result.types[b.type] ??= typeStats();
  }
  const age = (at: DateTime | null) => (at ? Math.max(0, now.toMillis() - at.toMillis()) : undefined);
  for (const r of await store.resourceCounts()) {
    const s = (result.blueprints[r.blueprint] ??= blueprintStats(r.type, false));
    const status = r.status as ResourceStatus;
    s.resources[status] += Number(r.n);
    s.idle += r.idle;
    if (status === 'pending') s.allocating += Number(r.n);
    if (RESOURCE_STATE_FLAGS[status].live) s.live += Number(r.n);
    if (RESOURCE_STATE_FLAGS[status].deletionLane) s.deletionLane += Number(r.n);
    const keys: Array<keyof BlueprintStats['oldestAgeMs']> = [];
    if (status !== 'active' && status !== 'destroyed') keys.push(status);
    if (r.destroying && RESOURCE_STATE_FLAGS[status].deletionLane) {
      s.destroying += Number(r.n);
      keys.push('destroying');
    }
    for (const key of keys) {
      const a = age(r.oldest);
      if (a !== undefined) s.oldestAgeMs[key] = Math.max(s.oldestAgeMs[key] ?? 0, a);
    }
  }
  for (const f of await store.blueprintFailures()) {
    const s = result.blueprints[f.blueprint];
    if (s) s.failures = { streak: f.streak, lastError: f.lastError, lastFailureAt: f.lastFailureAt.toISO()!, retryAt: f.retryAt.toISO()! };
  }
  for (const name of await store.drainingBlueprints()) {
    const s = result.blueprints[name];
    if (s) s.draining = true;
  }
  for (const l of await store.leaseCounts()) {
    const s = (result.types[l.type] ??= typeStats());
    const status = l.status as LeaseStatus;
    s.leases[status] += Number(l.n);
    if (status === 'pending') s.waiting += Number(l.n);
    if (LEASE_STATE_FLAGS[status].live) s.live += Number(l.n);
    if (LEASE_STATE_FLAGS[status].deletionLane) s.deletionLane += Number(l.n);
    if (status === 'pending' || status === 'acquired' || status === 'released' || status === 'broken') {
      const a = age(l.oldest);
      if (a !== undefined) s.oldestAgeMs[status] = a;
    }
  }
  // Requests of blueprints this broker does not register are not shown: it knows nothing else of them.
  for (const r of await store.requestedAuthorizations()) {
    const s = result.blueprints[r.blueprint];
    if (s) s.requestedAuthorizations = r.n;
  }
  for (const w of await store.waitingForAuthorization()) (result.types[w.type] ??= typeStats()).waitingForAuthorization = w.n;
  return result;
}

/**
 * A PGlite database has one owner at a time: claims left by an earlier broker on this
 * dataDir are dead, and so are the holders of its active leases. Says what they left,
 * since a lease without a ttl stays active (its slots held) until someone releases it.
 */
export async function adoptEmbeddedDatabase(store: StoreBackend, logger: Logger): Promise<void> {
  await store.releaseClaims();
  const left = await store.activeLeases();
  if (left.active > 0) {
    logger.warn(
      { ...left, oldestSince: left.oldestSince?.toISO() ?? null },
      `slipway: this database holds ${left.active} active lease(s) of an earlier process, ${left.withoutTtl} of them without a ttl; they stay active until released (broker.leases.list({ status: 'active' }), broker.release(id))`,
    );
  }
}
