import { defaultAllocationLimit } from '../../lib/index.js';
import { fakeBlueprint } from '../../lib/testing/index.js';
import type { BenchConfig } from '../support/config.js';
import { percentile, round, sleep, summarize, type LatencySummary } from '../support/measure.js';
import { StatementCounter, type CounterSnapshot } from '../support/statement-counter.js';
import type { Tier } from '../support/tiers.js';
import { idealBurst } from './burst-ideal.js';
import { bounded, openBroker } from './common.js';

export interface BurstResult {
  leases: number;
  /** The warm pool built before the burst (`limits.minIdle`); 0: a cold burst. */
  minIdle: number;
  maxResources: number;
  activationMs: number;
  holdMs: number;
  resourcesCreated: number;
  peakAllocating: number;
  /** The most allocating resources ever seen above the default allocation limit of the moment (0: the limit held). */
  worstOverAllocationLimit: number;
  /** False when the burst had not drained by the deadline; the figures are then those of the leases done by then. */
  drained: boolean;
  deadlineSeconds: number;
  leasesDone: number;
  drainMs: number;
  idealMs: number;
  idealRampMs: number;
  ratioToIdeal: number;
  /** (drain − ideal) spread over the hand-offs each resource does: the broker's cost per hand-off. */
  overheadPerHandoffMs: number;
  waitToActive: LatencySummary;
  /** Wait to active of the first `maxResources` leases served: the ones a warm pool serves at once. */
  firstWaveWaitP50Ms: number;
  errors: number;
  firstError: string | null;
  diagnostics: BurstDiagnostics | null;
}

/** Where the burst's time went, read back from the broker's own log rows. */
export interface BurstDiagnostics {
  /** Allocator passes that ended in waiting (the count of the `lease.waiting-for-resources` rows, whose count is bumped per pass). */
  waitPassesPerLease: number;
  slotLockFailures: number;
  /** Per resource: from one lease destroyed to the next lease acquired on it. */
  resourceIdleBetweenLeasesMs: { p50: number; p90: number; max: number };
  acquiredToActiveMs: { p50: number; p90: number; max: number };
  /** Should be the hold time; more is time the bench's own timer waited for the event loop. */
  activeToReleasedMs: { p50: number; p90: number; max: number };
  releasedToDestroyedMs: { p50: number; p90: number; max: number };
  /** When each resource became active, ms after the first log row. */
  resourceActivationsMs: number[];
  /** Log rows by type: reclaims, slot-lock failures, waits and the like, next to the lifecycle rows. */
  logTypes: Record<string, number>;
  statements: CounterSnapshot;
}

const spread = (v: number[]) => ({ p50: round(percentile(v, 50), 0), p90: round(percentile(v, 90), 0), max: round(Math.max(...v), 0) });

async function diagnose(tier: Tier, broker: Awaited<ReturnType<typeof openBroker>>, leases: number, statements: CounterSnapshot): Promise<BurstDiagnostics> {
  const sql = tier.raw(broker.broker, broker.database);
  const s = `"${tier.schemaOf(broker.database)}"`;
  try {
    const [w] = await sql.query<{ passes: number }>(`SELECT coalesce(sum(count), 0)::int AS passes FROM ${s}.logs WHERE type = 'lease.waiting-for-resources'`);
    const [f] = await sql.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.logs WHERE type = 'lease.slot-lock-failure'`);
    const rows = await sql.query<{ type: string; resource_id: string | null; lease_id: string | null; at: number }>(
      `SELECT type, resource_id, lease_id, extract(epoch FROM at) * 1000 AS at FROM ${s}.logs
       WHERE type IN ('lease.acquired', 'lease.activated', 'lease.released', 'lease.destroyed', 'resource.activated') ORDER BY at, id`,
    );
    const types = await sql.query<{ type: string; n: number }>(`SELECT type, count(*)::int AS n FROM ${s}.logs GROUP BY type ORDER BY 2 DESC`);
    const first = rows.length ? Number(rows[0].at) : 0;
    const byLease = new Map<string, Record<string, number | string>>();
    for (const r of rows) {
      if (!r.lease_id) continue;
      const o = byLease.get(r.lease_id) ?? {};
      o[r.type] = Number(r.at);
      if (r.type === 'lease.acquired' && r.resource_id) o.resource = r.resource_id;
      byLease.set(r.lease_id, o);
    }
    const span = (o: Record<string, number | string>, a: string, b: string) => (typeof o[a] === 'number' && typeof o[b] === 'number' ? (o[b] as number) - (o[a] as number) : NaN);
    const list = [...byLease.values()];
    const finite = (v: number[]) => v.filter(Number.isFinite);
    const perResource = new Map<string, Array<Record<string, number | string>>>();
    for (const o of list) if (o.resource) perResource.set(o.resource as string, [...(perResource.get(o.resource as string) ?? []), o]);
    const idle: number[] = [];
    for (const seq of perResource.values()) {
      seq.sort((a, b) => (a['lease.acquired'] as number) - (b['lease.acquired'] as number));
      for (let i = 1; i < seq.length; i++) idle.push((seq[i]['lease.acquired'] as number) - (seq[i - 1]['lease.destroyed'] as number));
    }
    return {
      waitPassesPerLease: round(Number(w.passes) / leases, 2),
      slotLockFailures: Number(f.n),
      resourceIdleBetweenLeasesMs: spread(finite(idle)),
      acquiredToActiveMs: spread(finite(list.map((o) => span(o, 'lease.acquired', 'lease.activated')))),
      activeToReleasedMs: spread(finite(list.map((o) => span(o, 'lease.activated', 'lease.released')))),
      releasedToDestroyedMs: spread(finite(list.map((o) => span(o, 'lease.released', 'lease.destroyed')))),
      resourceActivationsMs: rows.filter((r) => r.type === 'resource.activated').map((r) => round(Number(r.at) - first, 0)),
      logTypes: Object.fromEntries(types.map((t) => [t.type, Number(t.n)])),
      statements,
    };
  } finally {
    await sql.close();
  }
}

/**
 * The Drydock burst: `leases` requests at once on an exclusive blueprint with
 * `maxResources` and a slow `activateResource`. Each lease, once active, is held for
 * `holdMs` and released; the burst has drained when every lease is destroyed. With
 * `minIdle`, the blueprint keeps a warm pool, built (and waited for) before the burst.
 */
export async function burst(tier: Tier, config: BenchConfig, minIdle = 0): Promise<BurstResult> {
  const { leases, maxResources, activationMs, holdMs } = config.burst;
  const limits = minIdle > 0 ? { maxResources, minIdle } : { maxResources };
  const blueprint = fakeBlueprint({ name: 'burst', exclusive: true, limits, delays: { activateResource: activationMs } });
  const opened = await openBroker(tier, minIdle > 0 ? 'burst_warm' : 'burst', blueprint);
  const { broker } = opened;
  if (minIdle > 0) {
    const until = performance.now() + 60_000;
    while ((await broker.stats()).blueprints.burst!.idle < minIdle) {
      if (performance.now() > until) throw new Error(`the warm pool of ${minIdle} was not built within 60 s`);
      await sleep(20);
    }
  }
  const counter = new StatementCounter();
  let allocating = 0;
  let active = 0;
  let peakAllocating = 0;
  let worstOver = 0;
  const off = broker.on('resource', (e) => {
    if (e.to === 'pending') allocating++;
    if (e.from === 'pending') allocating--;
    if (e.to === 'active') active++;
    if (e.from === 'active') active--;
    peakAllocating = Math.max(peakAllocating, allocating);
    worstOver = Math.max(worstOver, allocating - defaultAllocationLimit(Math.max(0, active)));
  });
  try {
    const waits: number[] = [];
    let errors = 0;
    let firstError: string | null = null;
    let leasesDone = 0;
    counter.start();
    const t0 = performance.now();
    const flows = Promise.all(
      Array.from({ length: leases }, async (_, i) => {
        try {
          const handle = await broker.requestLease({ type: 'fake', attributes: { i } });
          const lease = await bounded(broker, handle.id, 'active', handle.whenActive(), 5 * 60_000);
          waits.push(performance.now() - t0);
          await sleep(holdMs);
          await bounded(broker, handle.id, 'destroyed', lease.release());
          leasesDone++;
        } catch (error) {
          errors++;
          firstError ??= String((error as Error)?.message ?? error);
        }
      }),
    );
    // The deadline is checked on every lease event as well as by a timer: on the embedded
    // tier a busy broker keeps timers from firing (see yieldToEventLoop in common.ts).
    const deadlineAt = t0 + config.burst.deadlineSeconds * 1000;
    let deadline: NodeJS.Timeout | undefined;
    let giveUp: (drained: boolean) => void = () => undefined;
    const offDeadline = broker.on('lease', () => performance.now() > deadlineAt && giveUp(false));
    const drained = await Promise.race([
      flows.then(() => true),
      new Promise<boolean>((resolve) => {
        giveUp = resolve;
        deadline = setTimeout(() => resolve(false), config.burst.deadlineSeconds * 1000);
      }),
    ]);
    offDeadline();
    clearTimeout(deadline);
    const drainMs = performance.now() - t0;
    counter.stop();
    const diagnostics = await diagnose(tier, opened, leases, counter.snapshot(leases, 10)).catch(() => null);
    const resourcesCreated = (await broker.resources.list()).length;
    const ideal = idealBurst({ leases, maxResources, activationMs, holdMs, allocationLimit: defaultAllocationLimit });
    return {
      leases,
      minIdle,
      maxResources,
      activationMs,
      holdMs,
      drained,
      deadlineSeconds: config.burst.deadlineSeconds,
      leasesDone,
      resourcesCreated,
      peakAllocating,
      worstOverAllocationLimit: worstOver,
      drainMs: round(drainMs, 0),
      idealMs: ideal.drainMs,
      idealRampMs: ideal.rampMs,
      // Not drained: the real ratio is at least this (the drain time is a lower bound).
      ratioToIdeal: round(drainMs / ideal.drainMs, 3),
      overheadPerHandoffMs: round((drainMs - ideal.drainMs) / Math.ceil(leases / maxResources), 1),
      waitToActive: summarize(waits),
      firstWaveWaitP50Ms: round(percentile([...waits].sort((a, b) => a - b).slice(0, maxResources), 50), 1),
      errors,
      firstError,
      diagnostics,
    };
  } finally {
    counter.stop();
    off();
    await broker.close({ grace: { seconds: 2 } });
  }
}
