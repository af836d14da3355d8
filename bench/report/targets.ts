import { round } from '../support/measure.js';
import type { RatioRound, Results, Target } from './results.js';

const at = (value: number, op: '≤' | '≥', limit: number) => (op === '≤' ? value <= limit : value >= limit);

function target(name: string, value: number, unit: string, op: '≤' | '≥', limit: number): Target {
  return { name, value: round(value, 3), unit, target: `${op} ${limit}`, pass: Number.isFinite(value) && at(value, op, limit) };
}

/** The blueprints of the statement targets, and their limits per full cycle (see workloads/blueprint-shapes.ts). */
const SHAPE_LIMITS = [
  { shape: 'plain', label: 'plain cycle', statements: 8, commits: 3 },
  { shape: 'everyHook', label: 'cycle with every per-lease hook', statements: 12, commits: 5 },
] as const;

/**
 * A ratio target at 8 acquirers: from the interleaved rounds when the run has more than
 * one (the median of the rounds' ratios, each named), else from the one measurement.
 */
function ratioTarget(what: string, ours: number, theirs: number, rounds: RatioRound[] | undefined, reference: (r: RatioRound) => number | null, limit: number): Target {
  const paired = (rounds ?? []).flatMap((r) => {
    const ref = reference(r);
    return ref ? [{ ours: r.cyclesPerSec, ref }] : [];
  });
  if (paired.length < 2) return target(`${what} (${ours} ÷ ${theirs})`, ours / theirs, 'ratio', '≥', limit);
  const ratios = paired.map((p) => p.ours / p.ref);
  const median = [...ratios].sort((a, b) => a - b)[Math.floor(ratios.length / 2)];
  const each = paired.map((p, i) => `${p.ours}/${p.ref} = ${round(ratios[i], 3)}`).join(', ');
  return target(`${what}, median of ${paired.length} interleaved rounds (${each})`, median, 'ratio', '≥', limit);
}

/**
 * The speed issue's targets, from the figures of this run: most are ratios to the
 * references measured in the same run. A target whose figures were not measured is left out.
 */
export function evaluateTargets(r: Results): Target[] {
  const out: Target[] = [];
  const pg = r.tiers.postgres;
  const emb = r.tiers.embedded;
  const pg8 = pg?.throughput?.find((p) => p.clients === 8);
  if (pg8?.graphileJobsPerSec) {
    out.push(ratioTarget('postgres: cycles/s with 8 acquirers ÷ graphile-worker jobs/s at concurrency 8', pg8.cyclesPerSec, pg8.graphileJobsPerSec, pg?.ratioRounds, (r) => r.graphileJobsPerSec, 1));
  }
  if (pg8?.pgbenchTps) {
    out.push(ratioTarget('postgres: cycles/s with 8 acquirers ÷ pgbench -N TPS at 8 clients', pg8.cyclesPerSec, pg8.pgbenchTps, pg?.ratioRounds, (r) => r.pgbenchTps, 0.15));
  }
  for (const [tier, t] of [['postgres', pg], ['embedded', emb]] as const) {
    const shapes = t?.profile?.shapes;
    if (!shapes) continue;
    for (const limit of SHAPE_LIMITS) {
      const c = shapes[limit.shape];
      out.push(target(`${tier}: statements per ${limit.label} (acquire ${c.acquire.statements} + release ${c.release.statements})`, c.total.statements, 'statements', '≤', limit.statements));
      out.push(target(`${tier}: commits per ${limit.label} (acquire ${c.acquire.commits} + release ${c.release.commits})`, c.total.commits, 'commits', '≤', limit.commits));
    }
  }
  if (pg?.warm) {
    out.push(target('postgres: warm acquire p50', pg.warm.p50Ms, 'ms', '≤', 3));
    out.push(target('postgres: warm acquire p99', pg.warm.p99Ms, 'ms', '≤', 10));
    const latency1 = r.references.pgbench?.points.find((p) => p.clients === 1)?.latencyMs;
    if (latency1) out.push(target(`postgres: warm acquire p50 (${pg.warm.p50Ms} ms) ÷ pgbench -N latency at 1 client (${latency1} ms)`, pg.warm.p50Ms / latency1, 'ratio', '≤', 4));
  }
  if (pg?.handoff) out.push(target('postgres: release → next waiting lease active p50', pg.handoff.p50Ms, 'ms', '≤', 5));
  if (pg?.handoffAcross) out.push(target('postgres: release → next waiting lease active in another process p50', pg.handoffAcross.p50Ms, 'ms', '≤', 5));
  for (const [tier, t] of [['postgres', pg], ['embedded', emb]] as const) {
    if (t?.burst) {
      const created = target(`${tier}: burst of ${t.burst.leases}: resources ever created`, t.burst.resourcesCreated, 'resources', '≤', t.burst.maxResources);
      if (!t.burst.drained) {
        // A burst that never drained has not shown how many resources it needs.
        created.name += ` (not established: the burst did not drain, ${t.burst.leasesDone} of ${t.burst.leases} done)`;
        created.pass = false;
      }
      out.push(created);
      const b = t.burst;
      const drain = b.drained ? `drain ${b.drainMs} ms` : `not drained after ${b.drainMs} ms (${b.leasesDone} of ${b.leases} done; ratio is a lower bound)`;
      out.push(target(`${tier}: burst of ${b.leases}: ${drain} ÷ ideal ${b.idealMs} ms`, b.ratioToIdeal, 'ratio', '≤', 1.2));
      if (!b.drained) out[out.length - 1].pass = false;
    }
    const points = t?.scale?.points;
    if (points && points.length >= 2) {
      const small = points[0];
      const large = points[points.length - 1];
      out.push(
        target(
          `${tier}: cost per cycle at ${large.resources.toLocaleString('en')} resources (${large.msPerCycleP50} ms) ÷ at ${small.resources} (${small.msPerCycleP50} ms)`,
          large.msPerCycleP50 / small.msPerCycleP50,
          'ratio',
          '≤',
          1.3,
        ),
      );
    }
  }
  const emb8 = emb?.throughput?.find((p) => p.clients === 8);
  const bare = r.references.barePglite;
  if (emb8 && bare) {
    out.push(ratioTarget("embedded: cycles/s with 8 acquirers ÷ a bare PGlite loop of a cycle's statements", emb8.cyclesPerSec, bare.cyclesPerSec, emb?.ratioRounds, (r) => r.barePgliteCyclesPerSec, 0.6));
  }
  return out;
}
