/**
 * The scale and RSS workloads run in a child process of their own, so that the
 * worker's memory is this workload's alone. Started by `runScaleChild` (scale.ts) with
 * `node --import tsx --expose-gc`, it receives its job over IPC and answers the same way.
 */
import { fakeBlueprint } from '../../lib/testing/index.js';
import { serveJob } from '../support/child.js';
import type { TierName } from '../support/config.js';
import { profileCpu, type CpuSummary } from '../support/cpu-profile.js';
import { percentile, round, until } from '../support/measure.js';
import { analyze, cloneHistory, cloneIdleResources, rowCounts } from '../support/seed.js';
import { StatementCounter, type CounterSnapshot } from '../support/statement-counter.js';
import { attachTier } from '../support/tiers.js';
import { fullCycle, openBroker, prewarm } from './common.js';

export interface ScaleJob {
  tier: TierName;
  url?: string;
  label: string;
  sizes: number[];
  historyLeases: number;
  historyResources: number;
  seconds: number;
  minCycles: number;
  /** Statement counts and EXPLAIN ANALYZE of the heaviest statements at each size. */
  analyzeStatements: boolean;
  cpuProfileSeconds: number;
}

export interface PlanSummary {
  statement: string;
  executionMs: number;
  planningMs: number;
  topNode: string;
  actualRows: number;
  /** The plan's nodes, one line each, as EXPLAIN prints them (abridged). */
  nodes: string[];
}

export interface ScalePoint {
  resources: number;
  cycles: number;
  msPerCycleP50: number;
  msPerCycleMean: number;
  msPerCycleP99: number;
  statements?: CounterSnapshot;
  plans?: PlanSummary[];
  memory: { rssMB: number; heapUsedMB: number; externalMB: number; arrayBuffersMB: number };
  cpu?: CpuSummary;
}

export interface ScaleResult {
  historyLeases: number;
  historyResources: number;
  seedSeconds: number;
  rows: Record<string, number>;
  points: ScalePoint[];
}

const MB = (b: number) => round(b / 1024 / 1024, 1);

function planNodes(node: any, depth = 0, out: string[] = []): string[] {
  if (!node || out.length >= 12) return out;
  const rel = node['Relation Name'] ? ` on ${node['Relation Name']}` : '';
  const idx = node['Index Name'] ? ` using ${node['Index Name']}` : '';
  out.push(`${'  '.repeat(depth)}${node['Node Type']}${rel}${idx} (rows=${node['Actual Rows']} loops=${node['Actual Loops']} time=${node['Actual Total Time']} ms)`);
  for (const child of node.Plans ?? []) planNodes(child, depth + 1, out);
  return out;
}

async function run(job: ScaleJob): Promise<ScaleResult> {
  const tier = await attachTier(job.tier, job.url);
  const blueprint = fakeBlueprint({ name: 'scale', exclusive: true });
  const { broker, database } = await openBroker(tier, job.label, blueprint);
  const sql = tier.raw(broker, database);
  const s = `"${tier.schemaOf(database)}"`;
  try {
    // Real rows first, through the broker: 11 resources, one of them destroyed, a few full cycles.
    const first = Math.min(11, job.sizes[0] + 1);
    await prewarm(broker, first);
    const [victim] = await sql.query<{ id: string }>(`SELECT id FROM ${s}.resources WHERE status = 'active' ORDER BY created_at DESC LIMIT 1`);
    await broker.releaseResource(victim.id);
    await until(async () => (await broker.resources.get(victim.id))?.status === 'destroyed', 'the template resource to be destroyed');
    for (let i = 0; i < 5; i++) await fullCycle(broker);
    const [idle] = await sql.query<{ id: string }>(`SELECT id FROM ${s}.resources WHERE status = 'active' ORDER BY created_at LIMIT 1`);
    const [done] = await sql.query<{ id: string }>(`SELECT id FROM ${s}.leases WHERE status = 'destroyed' ORDER BY seq DESC LIMIT 1`);
    const seedStarted = performance.now();
    if (job.historyLeases > 0) {
      await cloneHistory(sql, s, { lease: done.id, resource: victim.id, leases: job.historyLeases, resources: job.historyResources });
    }
    const real = first - 1;
    let seeded = real;
    let seedMs = performance.now() - seedStarted;
    const points: ScalePoint[] = [];
    for (const size of job.sizes) {
      const t = performance.now();
      // Clone ids are numbered from 1 across the sizes: each batch continues the range.
      if (size > seeded) await cloneIdleResources(sql, s, idle.id, seeded - real + 1, size - real);
      seeded = Math.max(seeded, size);
      await analyze(sql, s);
      seedMs += performance.now() - t;
      const [{ n }] = await sql.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${s}.resources WHERE status = 'active'`);
      if (Number(n) !== size) throw new Error(`scale: expected ${size} active resources, found ${n}`);
      for (let i = 0; i < 3; i++) await fullCycle(broker);
      const durations: number[] = [];
      const started = performance.now();
      while ((performance.now() - started < job.seconds * 1000 || durations.length < job.minCycles) && performance.now() - started < job.seconds * 4000) {
        const t0 = performance.now();
        await fullCycle(broker);
        durations.push(performance.now() - t0);
      }
      const point: ScalePoint = {
        resources: size,
        cycles: durations.length,
        msPerCycleP50: round(percentile(durations, 50)),
        msPerCycleMean: round(durations.reduce((a, b) => a + b, 0) / durations.length),
        msPerCycleP99: round(percentile(durations, 99)),
        memory: { rssMB: 0, heapUsedMB: 0, externalMB: 0, arrayBuffersMB: 0 },
      };
      if (job.analyzeStatements) {
        const counter = new StatementCounter().start();
        const n = 10;
        for (let i = 0; i < n; i++) await fullCycle(broker);
        counter.stop();
        point.statements = counter.snapshot(n, 8);
        point.plans = [];
        for (const st of counter.heaviest(3)) {
          try {
            const plan = (await sql.explain(st.sample.text, st.sample.params))[0];
            point.plans.push({
              statement: st.key,
              executionMs: plan['Execution Time'],
              planningMs: plan['Planning Time'],
              topNode: plan.Plan['Node Type'],
              actualRows: plan.Plan['Actual Rows'],
              nodes: planNodes(plan.Plan),
            });
          } catch (error) {
            point.plans.push({ statement: st.key, executionMs: NaN, planningMs: NaN, topNode: `EXPLAIN failed: ${(error as Error).message}`, actualRows: 0, nodes: [] });
          }
        }
      }
      if (job.cpuProfileSeconds > 0 && size === job.sizes[job.sizes.length - 1]) {
        point.cpu = await profileCpu(job.cpuProfileSeconds, async (stopAt) => {
          while (performance.now() < stopAt) await fullCycle(broker);
        });
      }
      (globalThis as { gc?: () => void }).gc?.();
      const m = process.memoryUsage();
      point.memory = { rssMB: MB(m.rss), heapUsedMB: MB(m.heapUsed), externalMB: MB(m.external), arrayBuffersMB: MB(m.arrayBuffers) };
      points.push(point);
      process.send?.({ progress: `${job.label}: ${size} resources: ${point.msPerCycleP50} ms/cycle (p50), rss ${point.memory.rssMB} MB` });
    }
    return { historyLeases: job.historyLeases, historyResources: job.historyResources, seedSeconds: round(seedMs / 1000, 1), rows: await rowCounts(sql, s), points };
  } finally {
    await sql.close();
    await broker.close();
  }
}

serveJob(run);
