/**
 * The model-based test on the real clock (issue 9): the scenarios of test/model.test.ts,
 * its invariants after every step and its reference model at the end, run against
 * `createBroker` on the system clock with its workers on their own, as users run it. No
 * ManualClock, no `runUntilIdle()`: model.test.ts missed bugs that only show when time
 * passes by itself and the workers decide when to run.
 *
 * What changes against model.test.ts (test/helpers/model.ts holds what does not):
 *
 * - Time passes for real, so every duration is short: lease ttls of TTL_MS, hook timeouts
 *   of HOOK_TIMEOUT_MS, slow hooks of SLOW_MS, the broker's backoff 50 ms to 500 ms, its
 *   sweep every 50 ms, waiting leases looking again every 100 ms. An `advance` step
 *   sleeps; expiry, backoff and hook timeouts happen on their own meanwhile.
 * - "Settle" after a step reads the database, not the engine: it waits (bounded) until no
 *   work item is due and unclaimed, and every claimed one is a pass blocked on purpose
 *   (a hang or a slow hook), or those fill every worker. Work scheduled later (a backoff,
 *   a waiting lease's next look) may run during the check: each check reads one
 *   REPEATABLE READ snapshot, and its invariants hold at any instant, not only at rest.
 * - What only holds once a pass has finished is checked only then: a fault that failed
 *   (a throw, a hang that reached its timeout) must show as a broken lease or resource
 *   only in a snapshot taken after it failed, with its pass no longer claimed. The
 *   log replay starts from the first row at every check (on Postgres a row can commit
 *   after one with a higher id was read).
 * - A hang ends by its real timeout (its `ctx.signal` aborts with HOOK_TIMEOUT, and the
 *   model marks it failed at that instant, before the broker records anything), or by a
 *   close (the signal aborts with the close: interrupted). Before a close the harness
 *   lets every hang about to time out fail and settle, and no fault is armed on a hook
 *   called while the broker closes: a fault met in the close's grace period could be cut
 *   off before its consequence is recorded, or not, which the model cannot tell.
 * - A lease's expiry is the `expiresAt` the broker recorded (checked to be its ttl after
 *   the request); each snapshot's time is taken after its reads, so every expiry that
 *   snapshot can show is in the past of it, and at the end a lease whose expiry has
 *   passed is due until it is destroyed (the end state waits for it).
 * - One more fault kind, `outage`: from the first call that meets it, the hook throws on
 *   every call for OUTAGE_MS (a blueprint failing for a while, the case issue 9 found
 *   looping). Each call is a throw to the model, and the calls are counted against
 *   invariant 8's backoff: at most BUILD_CALLS_PER_OUTAGE builds per blueprint, and
 *   OBJECT_CALLS_PER_OUTAGE calls per lease or resource of any other hook.
 * - `maxAllocationFailures` is 1000: the model does not predict a lease breaking after a
 *   streak of failed builds (a test's break of the resource being built for it counts as
 *   one too). Per lease and per blueprint backoff still apply.
 * - The end: faults disarmed, then real waiting (at most QUIET_LIMIT_MS) until the
 *   system is quiet, then the model's prediction of every lease and resource.
 * - Throughout each run a 50 ms interval timer in this process must never fire more than
 *   MAX_LAG_MS late (invariant 8: the broker never starves its host). Opening a broker
 *   is not measured: PGlite's WASM start blocks for half a second or more on its own.
 *
 * A run is not repeatable (timing decides which pass goes first), so a failure does not
 * shrink by default (SLIPWAY_MODEL_REAL_SHRINK=1 shrinks, slowly and perhaps to a
 * scenario that passes); it prints fast-check's seed and path, the scenario, and a
 * command that runs the scenario again.
 *
 * Environment: SLIPWAY_MODEL_REAL_RUNS (default 8; 20 with SLIPWAY_TEST_LONG=1, as CI runs it), SLIPWAY_MODEL_REAL_STEPS (default 15),
 * SLIPWAY_MODEL_REAL_SEED and SLIPWAY_MODEL_REAL_PATH (replay fast-check's case),
 * SLIPWAY_MODEL_REAL_SCENARIO (one scenario as JSON, as printed), SLIPWAY_MODEL_REAL_VERBOSE=1
 * (the steps and timings on stderr), SLIPWAY_MODEL_REAL_SHRINK=1.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { DateTime } from 'luxon';
import { internals, type BrokerOptions } from '../lib/broker/index.js';
import { toDb } from '../lib/time.js';
import { guardBrokers, realBroker } from './helpers/broker.js';
import { CONCURRENCY, envInt, envSeed, ModelHarness, removeDataDirs, RESOURCE_HOOKS, scenarioOf, type Config, type FaultKind, type FaultRecord, type Hook, type Scenario, type Snapshot } from './helpers/model.js';
import { longRuns, tier } from './helpers/tier.js';

guardBrokers();
afterAll(removeDataDirs);

const RUNS = envInt('SLIPWAY_MODEL_REAL_RUNS', longRuns ? 20 : 8);
const STEPS = envInt('SLIPWAY_MODEL_REAL_STEPS', 15);
const SEED = envSeed('SLIPWAY_MODEL_REAL_SEED');
const PATH = process.env.SLIPWAY_MODEL_REAL_PATH || undefined;
const SCENARIO = process.env.SLIPWAY_MODEL_REAL_SCENARIO ? (JSON.parse(process.env.SLIPWAY_MODEL_REAL_SCENARIO) as Scenario) : undefined;
const VERBOSE = Boolean(process.env.SLIPWAY_MODEL_REAL_VERBOSE);
const SHRINK = Boolean(process.env.SLIPWAY_MODEL_REAL_SHRINK);

/** Every hook of the model's blueprint times out after this long. */
const HOOK_TIMEOUT_MS = 1_500;
/** A "slow" hook settles by itself after this long (well before its timeout). */
const SLOW_MS = 200;
/** Lease ttls: one that expires within a step or two, one that lasts a few steps. */
const TTL_MS = [300, 2_500];
/** `advance` sleeps: within a slow hook, past one, past the short ttl, past a hook timeout. */
const ADVANCE_MS = [50, 250, 700, 1_600];
/** The delay of a RetryLater that names one. */
const RETRY_AFTER_MS = 300;
/** An `outage` fault: from the first call it meets, the hook throws on every call for this long (a blueprint failing for a while). */
const OUTAGE_MS = 1_500;
/**
 * Invariant 8's bound on one outage. A failed build (allocateResource, activateResource)
 * backs the blueprint off, 50 ms doubling to 500 ms: 1.5 s of failures costs about 6
 * builds, a few more for builds already under way. Any other hook backs off or ends its
 * object on its own: a failing destroy hook is retried with backoff, the others break
 * their lease or are not called again.
 */
const BUILD_CALLS_PER_OUTAGE = 12;
const OBJECT_CALLS_PER_OUTAGE = 8;
const BUILD_HOOKS: ReadonlySet<Hook> = new Set(['allocateResource', 'activateResource']);
/** How long one settle may take before the run fails as stuck. */
const SETTLE_LIMIT_MS = 10_000;
/** How long the end may wait for the system to be quiet. */
const QUIET_LIMIT_MS = 20_000;
/** A hang whose timeout is nearer than this is let fail before a close. */
const CLOSE_MARGIN_MS = 1_000;
/** The host's timer: how often it should fire, and how late it may be. */
const TICK_MS = 50;
const MAX_LAG_MS = 1_000;

/** The broker as a user would tune it for short hooks: every retry, sweep and look again in well under a second. */
const TUNING = {
  backoff: { initial: { milliseconds: 50 }, max: { milliseconds: 500 } },
  sweepInterval: { milliseconds: 50 },
  waitRecheck: { milliseconds: 100 },
  claimTtl: { seconds: 2 },
  maxAllocationFailures: 1000,
  gcInterval: false,
} satisfies BrokerOptions;

// Outages twice as often as each one-shot kind: most runs then meet one, and one of a build hook is what issue 9's tight loop needed.
const scenarioArb = scenarioOf(STEPS, { ttl: TTL_MS, advance: ADVANCE_MS, retryAfter: RETRY_AFTER_MS, faultKinds: ['throw', 'retry', 'hang', 'slow', 'outage', 'outage'], maxAge: [1_000, 3_000] });

/** A timer of the host app: how late its ticks fire, while not paused (it starts paused: the first open resumes it). */
class LagMonitor {
  worst = 0;
  private last = Date.now();
  private paused = true;
  private readonly timer: NodeJS.Timeout;

  constructor() {
    this.timer = setInterval(() => {
      const now = Date.now();
      if (!this.paused) this.worst = Math.max(this.worst, now - this.last - TICK_MS);
      this.last = now;
    }, TICK_MS);
  }

  pause() {
    this.paused = true;
  }

  resume() {
    this.paused = false;
    this.last = Date.now();
  }

  stop() {
    clearInterval(this.timer);
  }
}

const isHookTimeout = (reason: unknown) => (reason as { code?: unknown } | undefined)?.code === 'HOOK_TIMEOUT';

interface Outage {
  hook: Hook;
  until: number;
  /** Calls that failed in it: per blueprint for builds, else per object (its pass key). */
  calls: Map<string, number>;
}

class RealModelRun extends ModelHarness {
  readonly lag = new LagMonitor();
  private readonly startedAt = Date.now();
  readonly outages: Outage[] = [];

  constructor(config: Config) {
    super(config, { concurrency: config.concurrency ?? CONCURRENCY, hookTimeoutMs: HOOK_TIMEOUT_MS, verbose: VERBOSE, replayEveryCheck: true });
  }

  /** During an outage of `hook` every call fails; an armed `outage` starts one. */
  protected override nextFault(hook: Hook, ctx: any): { kind: FaultKind; after: number | null } | undefined {
    const now = Date.now();
    let outage = this.outages.find((o) => o.hook === hook && now < o.until);
    if (!outage) {
      const fault = super.nextFault(hook, ctx);
      if (fault?.kind !== 'outage') return fault;
      outage = { hook, until: now + OUTAGE_MS, calls: new Map() };
      this.outages.push(outage);
      this.trace.push(`      outage of ${hook} for ${OUTAGE_MS} ms begins @${this.elapsed()}`);
    }
    const key = BUILD_HOOKS.has(hook) ? `blueprint ${this.blueprint.name}` : RESOURCE_HOOKS.has(hook) ? `resource:${ctx.resource.id}` : `lease:${ctx.lease.id}`;
    outage.calls.set(key, (outage.calls.get(key) ?? 0) + 1);
    return { kind: 'outage', after: null };
  }

  /** Outages that cost more calls than backoff allows: the broker retried a failing hook without backing off. */
  overBudget(): string[] {
    const problems: string[] = [];
    for (const o of this.outages) {
      for (const [key, calls] of o.calls) {
        const budget = BUILD_HOOKS.has(o.hook) ? BUILD_CALLS_PER_OUTAGE : OBJECT_CALLS_PER_OUTAGE;
        if (calls > budget) problems.push(`${o.hook} failed ${calls} times for ${key} in one ${OUTAGE_MS} ms outage (backoff allows about ${budget}): a failing hook is retried without backing off`);
      }
    }
    return problems;
  }

  protected hang(record: FaultRecord, ctx: { signal: AbortSignal }): () => Promise<void> {
    const blocked = { record, until: Date.now() + HOOK_TIMEOUT_MS };
    this.blocked.add(blocked);
    // Runs synchronously inside the broker's abort, before it records the failure.
    ctx.signal.addEventListener(
      'abort',
      () => {
        if (!this.blocked.delete(blocked)) return;
        if (isHookTimeout(ctx.signal.reason)) {
          record.outcome = 'failed';
          record.failedSeq = ++this.seq;
          this.trace.push(`      hang of ${record.hook} in ${record.passKey} timed out @${this.elapsed()}`);
        } else record.outcome = 'interrupted';
      },
      { once: true },
    );
    return () => new Promise<void>(() => undefined);
  }

  protected slow(record: FaultRecord): () => Promise<void> {
    const blocked = { record, until: Date.now() + SLOW_MS };
    this.blocked.add(blocked);
    return () =>
      new Promise<void>((resolve) =>
        setTimeout(() => {
          if (this.blocked.delete(blocked)) record.outcome = 'ok';
          resolve();
        }, SLOW_MS),
      );
  }

  protected now(): number {
    return Date.now();
  }

  protected elapsed(): number {
    return Date.now() - this.startedAt;
  }

  protected async expiryOf(id: string, requestedAt: number, ttl: number): Promise<number> {
    const at = (await this.broker.leases.get(id))?.expiresAt?.toMillis() ?? null;
    const answered = Date.now();
    if (at === null || at < requestedAt + ttl || at > answered + ttl) {
      this.fail(`requesting ${id}`, [`lease ${id} was requested with a ttl of ${ttl} ms between ${requestedAt} and ${answered}, and expires at ${at}`]);
    }
    return at;
  }

  protected inflightNow(): null {
    return null;
  }

  protected snapshotNow(): number {
    return Date.now();
  }

  protected override faultSettled(fault: FaultRecord, snap: Snapshot): boolean {
    return (fault.failedSeq ?? fault.seq) < snap.seq && !snap.inflight.has(fault.passKey);
  }

  async open() {
    this.lag.pause();
    try {
      this.broker = await realBroker({ database: this.database, blueprints: [this.blueprint], workers: { concurrency: this.concurrency }, ...TUNING, ...this.brokerOptions() });
    } finally {
      this.lag.resume();
    }
  }

  override async dispose() {
    this.lag.stop();
    await super.dispose();
  }

  override async check(phase: string): Promise<Snapshot> {
    const snap = await super.check(phase);
    const problems = this.overBudget();
    if (this.lag.worst > MAX_LAG_MS) problems.push(`the host's ${TICK_MS} ms timer fired ${this.lag.worst} ms late (at most ${MAX_LAG_MS}): the event loop was starved`);
    if (problems.length > 0) this.fail(phase, problems, snap);
    return snap;
  }

  /**
   * Waits (real time, bounded) until no work item is due and unclaimed and every claimed
   * one is a pass blocked on purpose, or blocked passes hold every worker. Read from the
   * work_items rows, as any observer of the database could.
   */
  async settle(): Promise<void> {
    const { db, store } = internals.get(this.broker)!;
    const deadline = Date.now() + SETTLE_LIMIT_MS;
    for (;;) {
      const rows = await db.query<{ key: string; claimed: boolean }>(
        `SELECT object_kind || ':' || object_id AS key, claimed_by IS NOT NULL AS claimed FROM ${store.s}.work_items
         WHERE claimed_by IS NOT NULL OR (run_at IS NOT NULL AND run_at <= $1)`,
        [toDb(DateTime.utc())],
      );
      const blocked = this.blockedKeys();
      const running = rows.filter((r) => r.claimed && !blocked.has(r.key));
      const held = rows.filter((r) => r.claimed && blocked.has(r.key)).length;
      const due = rows.filter((r) => !r.claimed);
      if (running.length === 0 && (due.length === 0 || held >= this.concurrency)) return;
      // A failing hook called in a loop never settles: say so now, not after the limit.
      const overBudget = this.overBudget();
      if (overBudget.length > 0) this.fail('while settling', overBudget);
      if (Date.now() > deadline) {
        throw new Error(`settle: after ${SETTLE_LIMIT_MS} ms, passes still running: ${running.map((r) => r.key).join(', ') || 'none'}; due: ${due.map((r) => r.key).join(', ') || 'none'}`);
      }
      await sleep(10);
    }
  }

  async advance(by: number) {
    await sleep(by);
    await this.settle();
  }

  async reopen() {
    await this.letImminentHangsFail();
    this.faultsPaused = true;
    try {
      await this.close();
    } finally {
      this.faultsPaused = false;
    }
    for (const b of this.blocked) b.record.outcome = 'interrupted';
    this.blocked.clear();
    this.generation++;
    await this.open();
    await this.settle();
  }

  /** A hang that would time out during the close fails now, and its pass records it: a close then cuts off only hangs that have time left. */
  private async letImminentHangsFail() {
    const deadline = Date.now() + HOOK_TIMEOUT_MS + SETTLE_LIMIT_MS;
    const imminent = () => [...this.blocked].some((b) => b.record.kind === 'hang' && b.until < Date.now() + CLOSE_MARGIN_MS);
    while (imminent()) {
      if (Date.now() > deadline) throw new Error('reopen: a hang did not reach its timeout');
      await sleep(10);
      if (!imminent()) await this.settle();
    }
  }

  async quiesce() {
    this.armed.clear();
    for (const o of this.outages) o.until = Math.min(o.until, Date.now());
    this.trace.push(`  end: faults disarmed, outages over; waiting until quiet @${this.elapsed()}`);
    const deadline = Date.now() + QUIET_LIMIT_MS;
    for (let round = 0; ; round++) {
      await this.settle();
      const snap = await this.check(`at the end (round ${round})`);
      if (this.quiet(snap)) return this.checkEnd(snap);
      if (Date.now() > deadline) this.fail(`after ${QUIET_LIMIT_MS} ms of waiting at the end`, ['the system never became quiet (work still due, objects in transit, leases waiting with capacity free, or a warm pool short)', ...[this.warmShortfall(snap) ?? []].flat()], snap);
      await sleep(50);
    }
  }
}

let runCount = 0;
let worstLag = 0;
/** What the runs met, for the summary line: fault hits by kind and outcome, leases and resources made. */
const met = { faults: new Map<string, number>(), leases: 0, resources: 0, outages: 0, mostBuildCalls: 0, mostObjectCalls: 0 };
async function runScenario(scenario: Scenario): Promise<RealModelRun> {
  const run = new RealModelRun(scenario.config);
  const started = Date.now();
  if (VERBOSE) process.stderr.write(`run ${++runCount}: ${JSON.stringify(scenario.config)}\n`);
  try {
    await run.start(scenario.steps.some((s) => s?.do === 'reopen'));
    await run.settle();
    await run.check('at start');
    for (const [i, step] of scenario.steps.entries()) {
      const t = Date.now();
      if (step) await run.step(step, i);
      if (VERBOSE) process.stderr.write(`     (${Date.now() - t} ms)\n`);
    }
    await run.quiesce();
    return run;
  } catch (error) {
    if (error instanceof Error) {
      error.message += `\n  run this scenario again: SLIPWAY_TEST_TIERS=${tier} SLIPWAY_MODEL_REAL_SCENARIO='${JSON.stringify(scenario)}' npx tsx test/run-tiers.ts test/model-real-clock.test.ts`;
      error.message += '\n  (real clock: timing decides the interleaving, so another run of it may take another path; try it a few times)';
    }
    throw error;
  } finally {
    worstLag = Math.max(worstLag, run.lag.worst);
    for (const f of run.faults) met.faults.set(`${f.kind} ${f.outcome}`, (met.faults.get(`${f.kind} ${f.outcome}`) ?? 0) + 1);
    met.leases += run.leases.size;
    met.resources += run.resources.size;
    met.outages += run.outages.length;
    for (const o of run.outages) {
      const most = Math.max(0, ...o.calls.values());
      if (BUILD_HOOKS.has(o.hook)) met.mostBuildCalls = Math.max(met.mostBuildCalls, most);
      else met.mostObjectCalls = Math.max(met.mostObjectCalls, most);
    }
    await run.dispose();
    if (VERBOSE) process.stderr.write(`run ${runCount} done in ${Date.now() - started} ms, worst timer lag ${run.lag.worst} ms\n`);
  }
}

describe('model-based on the real clock: createBroker, workers on their own', () => {
  test(
    `${SCENARIO ? 'one given scenario' : PATH ? 'replay of a seed and path' : `${RUNS} runs of ${STEPS} steps`} on the ${tier} tier: invariants after every step, the model's end state once quiet, the host's timer on time`,
    async () => {
      const started = Date.now();
      if (SCENARIO) return void (await runScenario(SCENARIO));
      await fc.assert(
        fc.asyncProperty(scenarioArb, async (scenario) => void (await runScenario(scenario))),
        { numRuns: PATH ? 1 : RUNS, seed: SEED, path: PATH, endOnFailure: !SHRINK || Boolean(PATH), verbose: 1 },
      );
      const faults = [...met.faults].sort().map(([k, n]) => `${n} ${k}`).join(', ');
      console.log(
        `real-clock model test: ${PATH ? 1 : RUNS} run(s) x ${STEPS} steps on ${tier} in ${((Date.now() - started) / 1000).toFixed(1)} s; ` +
          `${met.leases} leases, ${met.resources} resources; faults met: ${faults || 'none'}; ${met.outages} outages, ` +
          `at most ${met.mostBuildCalls} failed builds in one, ${met.mostObjectCalls} calls of one object; worst timer lag ${worstLag} ms`,
      );
    },
    60 * 60 * 1000,
  );
});
