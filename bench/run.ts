/**
 * `npm run bench`: the slipway benchmark. Runs each workload on a throwaway local
 * Postgres cluster (fsync on) and on embedded PGlite, beside the reference limits of
 * the same run (`pgbench -N`, generic-pool), and writes bench/results/<out>.json, a
 * markdown summary and the cost-per-cycle chart. See bench/README.md.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { arch, cpus, loadavg, release, totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { genericPoolRate } from './references/generic-pool.js';
import { barePgliteRate } from './references/bare-pglite.js';
import { GRAPHILE_CONCURRENCY, graphileWorkerRate } from './references/graphile-worker.js';
import { preparePgbench, type Pgbench } from './references/pgbench.js';
import { markdownSummary } from './report/markdown.js';
import type { Results, TierResults } from './report/results.js';
import { costPerCycleSvg } from './report/svg.js';
import { evaluateTargets } from './report/targets.js';
import { parseArgs, selected, type WorkloadName } from './support/config.js';
import { progress, round } from './support/measure.js';
import { openTier, packageVersion } from './support/tiers.js';
import { burst } from './workloads/burst.js';

import { coldStart } from './workloads/cold-start.js';
import { handoff, handoffAcrossProcesses } from './workloads/handoff.js';
import { profile } from './workloads/profile.js';
import { rss, scale } from './workloads/scale.js';
import { embeddedRatioRound, throughputAt } from './workloads/throughput.js';
import { tracingCost } from './workloads/tracing-cost.js';
import { warmAcquire } from './workloads/warm-acquire.js';

/** The warm pool of the second burst: issue 15 asks for the burst with `minIdle: 8` beside the cold one. */
const WARM_POOL = 8;
/** The acquirers of the ratio targets: graphile-worker's concurrency, and the bare PGlite loop's point. */
const RATIO_CLIENTS = GRAPHILE_CONCURRENCY;

const RESULTS = fileURLToPath(new URL('./results/', import.meta.url));

const config = parseArgs(process.argv.slice(2));

/** The commit measured, and whether the working tree differed from it (lib/ changes under the bench). */
function gitState(): { commit: string; dirty: boolean } | null {
  try {
    const commit = execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'lib', 'blueprints'], { encoding: 'utf8' }).trim() !== '';
    return { commit, dirty };
  } catch {
    return null;
  }
}
const started = new Date();
const results: Results = {
  version: 1,
  mode: config.mode,
  out: config.out,
  startedAt: started.toISOString(),
  finishedAt: '',
  durationSeconds: 0,
  machine: {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model?.trim() ?? 'unknown',
    memoryGB: round(totalmem() / 1024 ** 3, 1),
    node: process.version,
    os: `${process.platform} ${release()} ${arch()}`,
    loadavgAtStart: loadavg().map((l) => round(l, 2)),
    git: gitState(),
    versions: { pg: packageVersion('pg'), typeorm: packageVersion('typeorm'), pglite: packageVersion('@electric-sql/pglite'), 'generic-pool': packageVersion('generic-pool'), 'graphile-worker': packageVersion('graphile-worker') },
  },
  config,
  references: {},
  tiers: {},
  targets: [],
};
let failures = 0;

async function step<T>(t: TierResults, workload: string, work: () => Promise<T>): Promise<T | undefined> {
  const at = performance.now();
  progress(`${workload} …`);
  try {
    const value = await work();
    progress(`${workload}: done in ${((performance.now() - at) / 1000).toFixed(1)} s`);
    return value;
  } catch (error) {
    failures++;
    const message = String((error as Error)?.stack ?? error);
    progress(`${workload}: FAILED: ${message}`);
    t.errors.push({ workload, error: message });
    return undefined;
  }
}

const want = (w: WorkloadName) => selected(config, w);

if (want('coldstart')) {
  progress('createBroker cold and warm (embedded) …');
  results.references.coldStart = await coldStart(config.mode === 'quick' ? 1 : 3).catch((error) => {
    failures++;
    progress(`coldstart: FAILED: ${error}`);
    return undefined;
  });
}

if (want('pool')) {
  const t: TierResults = { info: {}, errors: [] };
  const points = [];
  for (const clients of config.clients) {
    const p = await step(t, `generic-pool, ${clients} clients`, () => genericPoolRate(clients, config.pool.seconds));
    if (p) points.push(p);
  }
  results.references.genericPool = points;
}

for (const name of config.tiers) {
  progress(`== tier ${name}`);
  const t: TierResults = { info: {}, errors: [] };
  results.tiers[name] = t;
  const tier = await step(t, `${name}: start`, () => openTier(name));
  if (!tier) continue;
  t.info = tier.info;
  try {
    if (want('warm')) t.warm = (await step(t, `${name}: warm acquire`, () => warmAcquire(tier, config))) as TierResults['warm'];
    if (want('handoff')) t.handoff = (await step(t, `${name}: release → next active`, () => handoff(tier, config))) as TierResults['handoff'];
    if (want('handoff') && name === 'postgres') t.handoffAcross = await step(t, `${name}: release → next active in another process`, () => handoffAcrossProcesses(tier, config));

    // pgbench at each client count, and graphile-worker at its one concurrency, right before slipway at the same count,
    // so that drift on a noisy machine hits them alike.
    let pgbench: Pgbench | undefined;
    if (name === 'postgres' && want('pgbench')) {
      pgbench = await step(t, 'pgbench -i', () => preparePgbench(tier.url!, config.pgbench.scale));
      if (pgbench) results.references.pgbench = { scale: pgbench.scale, initSeconds: pgbench.initSeconds, points: [] };
    }
    // Both sizes of a run include 8 clients, the one concurrency graphile-worker runs at, and the acquirers of the bare PGlite target.
    const graphileAt = name === 'postgres' && want('graphile') ? GRAPHILE_CONCURRENCY : null;
    const bareAt = name === 'embedded' && want('pglite') ? RATIO_CLIENTS : null;
    if (want('throughput') || pgbench || graphileAt || bareAt) {
      const points: NonNullable<TierResults['throughput']> = [];
      for (const clients of config.clients) {
        // At 8, the ratio targets' point, references and slipway alternate for `ratioRounds` rounds.
        const rounds = clients === RATIO_CLIENTS && want('throughput') && (pgbench || graphileAt === clients || bareAt === clients) ? config.ratioRounds : 1;
        for (let r = 1; r <= rounds; r++) {
          const of = rounds > 1 ? ` (round ${r} of ${rounds})` : '';
          const first = r === 1;
          let tps: number | null = null;
          let jobs: number | null = null;
          let bare: number | null = null;
          // The embedded ratio's pair runs in a fresh process of its own (ratio-child.ts).
          const apart = clients === bareAt && want('throughput');
          const what = `a bare PGlite loop, then ${name}: throughput, ${clients} acquirers, in a fresh process${of}`;
          const pair = apart ? await step(t, what, () => embeddedRatioRound(clients, config, what)) : undefined;
          if (pgbench) {
            const p = await step(t, `pgbench -N, ${clients} clients${of}`, () => pgbench!.run(clients, config.pgbench.seconds));
            if (p && first) results.references.pgbench!.points.push(p);
            tps = p?.tps ?? null;
          }
          if (clients === graphileAt) {
            const g = await step(t, `graphile-worker, concurrency ${clients}${of}`, () => graphileWorkerRate(tier.url!, config.graphile));
            if (first) results.references.graphileWorker = g;
            jobs = g?.jobsPerSec ?? null;
          }
          if (clients === bareAt) {
            const b = apart ? pair?.bare : await step(t, `a bare PGlite loop of one cycle's statements${of}`, () => barePgliteRate(tier, config));
            if (first) results.references.barePglite = b;
            bare = b?.cyclesPerSec ?? null;
          }
          if (want('throughput')) {
            const p = apart ? pair?.slipway : await step(t, `${name}: throughput, ${clients} acquirers${of}`, () => throughputAt(tier, clients, config));
            if (p && first) points.push({ ...p, pgbenchTps: null, ratioToPgbench: null, genericPoolOpsPerSec: null, ratioToGenericPool: null, graphileJobsPerSec: null, ratioToGraphile: null });
            if (p) progress(`${name}: ${clients} acquirers${of}: ${p.cyclesPerSec} cycles/s`);
            if (p && rounds > 1) (t.ratioRounds ??= []).push({ cyclesPerSec: p.cyclesPerSec, pgbenchTps: tps, graphileJobsPerSec: jobs, barePgliteCyclesPerSec: bare });
          }
        }
      }
      if (want('throughput')) t.throughput = points;
    }
    if (want('burst')) {
      t.burst = await step(t, `${name}: burst`, () => burst(tier, config));
      t.burstWarm = await step(t, `${name}: burst on a warm pool (minIdle ${WARM_POOL})`, () => burst(tier, config, WARM_POOL));
    }
    if (want('scale')) {
      const s = await step(t, `${name}: scale`, () => scale(tier, config));
      if (s) t.scale = { ...s, ratioLargestToSmallest: round(s.points[s.points.length - 1].msPerCycleP50 / s.points[0].msPerCycleP50, 3) };
    }
    if (want('rss')) {
      const s = await step(t, `${name}: worker RSS`, () => rss(tier, config));
      if (s) t.rss = { ...s, ratioLargestToSmallest: round(s.points[s.points.length - 1].memory.rssMB / s.points[0].memory.rssMB, 3) };
    }
    if (want('profile')) t.profile = await step(t, `${name}: profile`, () => profile(tier, config));
    if (want('tracing')) {
      t.tracing = await step(t, `${name}: tracing cost`, () => tracingCost(tier, config));
      if (t.tracing) progress(`${name}: tracing cost per cycle against off: no SDK ×${t.tracing.ratioToOff.noSdk}, SDK ×${t.tracing.ratioToOff.sdk}`);
    }
  } finally {
    await tier.stop().catch((error) => progress(`${name}: stopping the tier failed: ${error}`));
  }
}

// Every figure beside the reference limits of this run.
const pgPoints = results.references.pgbench?.points ?? [];
const pgLatency1 = pgPoints.find((p) => p.clients === 1)?.latencyMs ?? null;
for (const t of Object.values(results.tiers)) {
  if (!t) continue;
  for (const p of t.throughput ?? []) {
    p.pgbenchTps = pgPoints.find((q) => q.clients === p.clients)?.tps ?? null;
    p.ratioToPgbench = p.pgbenchTps ? round(p.cyclesPerSec / p.pgbenchTps, 4) : null;
    p.genericPoolOpsPerSec = results.references.genericPool?.find((q) => q.clients === p.clients)?.opsPerSec ?? null;
    p.ratioToGenericPool = p.genericPoolOpsPerSec ? round(p.cyclesPerSec / p.genericPoolOpsPerSec, 6) : null;
    const graphile = results.references.graphileWorker;
    p.graphileJobsPerSec = graphile && graphile.concurrency === p.clients ? graphile.jobsPerSec : null;
    p.ratioToGraphile = p.graphileJobsPerSec ? round(p.cyclesPerSec / p.graphileJobsPerSec, 4) : null;
  }
  if (t.warm) t.warm.p50InPgbenchCommits = pgLatency1 ? round(t.warm.p50Ms / pgLatency1, 1) : null;
  if (t.handoff) t.handoff.p50InPgbenchCommits = pgLatency1 ? round(t.handoff.p50Ms / pgLatency1, 1) : null;
}

const finished = new Date();
results.finishedAt = finished.toISOString();
results.durationSeconds = round((finished.getTime() - started.getTime()) / 1000, 1);
results.machine.loadavgAtEnd = loadavg().map((l) => round(l, 2));
results.targets = evaluateTargets(results);

mkdirSync(RESULTS, { recursive: true });
const write = (file: string, text: string) => {
  writeFileSync(RESULTS + file + '.tmp', text);
  renameSync(RESULTS + file + '.tmp', RESULTS + file);
};
const svg = costPerCycleSvg(results);
const svgName = svg ? (config.out === 'latest' ? 'cost-per-cycle.svg' : `${config.out}-cost-per-cycle.svg`) : null;
if (svg && svgName) write(svgName, svg);
write(`${config.out}.json`, JSON.stringify(results, null, 2) + '\n');
write(`${config.out}.md`, markdownSummary(results, svgName));

console.log(`\nslipway bench (${config.mode}), ${results.durationSeconds} s → bench/results/${config.out}.{json,md}${svgName ? `, ${svgName}` : ''}`);
for (const t of results.targets) console.log(`  ${t.pass ? 'pass' : 'FAIL'}  ${t.name}: ${t.value} ${t.unit} (target ${t.target})`);
if (failures) console.log(`  ${failures} workload(s) failed; see the errors in the summary`);
process.exit(failures ? 1 : 0);
