/**
 * Model-based property test (issue 4): random sequences of what a host application and
 * its blueprints can do to a broker, checked after every step against the database and,
 * at quiescence, against a small reference model.
 *
 * How it is built, and why:
 *
 * - fast-check generates a plain record per run, `{ config, steps }`: a blueprint
 *   configuration and exactly SLIPWAY_MODEL_STEPS step records (each wrapped in
 *   `fc.option`, so shrinking turns steps into `null`, "skipped", instead of shortening
 *   the run). A small interpreter below runs the steps. This is used rather than
 *   `fc.commands`: the interesting outcome of a step is decided by the engine
 *   asynchronously (which lease got which resource, which call met an injected fault),
 *   so the model has to learn from what happened instead of predicting each step
 *   before it runs, and the checks are invariants of the whole database after each step
 *   rather than per-command postconditions. Steps refer to objects by index modulo the
 *   live ones, so every shrunk sequence is still valid.
 * - The config: exclusive or shared, maxResources, worker concurrency, and the pool
 *   policies of issue 15, each off in most runs so the rest keeps its coverage: minIdle
 *   (1-2, at most maxResources), maxLeasesPerResourceLifetime (1-3), maxResourceAge (30 s
 *   or 200 s of clock) and a broker quota of 1-3 leases on owners `t1/*`.
 * - Steps: acquire (`requestLease`, with or without a ttl, owner `t1/a`, `t1/b` or `t2/a`:
 *   two tenants, one under the quota); release a lease; release, reclaim or break a
 *   resource; drain or resume the blueprint; move the clock (expiry, retries, backoff, hook
 *   timeouts); arm a fault for the next call of one hook: a throw, `RetryLater`, a hang
 *   (never settles; the blueprint's `timeouts` of HOOK_TIMEOUT_MS on the broker clock
 *   turn it into a HOOK_TIMEOUT failure once the clock passes it) or "slow" (settles by
 *   itself SLOW_MS of clock time later, before its timeout); close the broker (50 ms
 *   grace, hooks still in flight are cut off) and open a new one on the same data.
 * - Faults go through `fakeBlueprint`'s `gates` option. Its hooks are wrapped only to see
 *   the hook's context, so each fault is attributed to the exact lease or resource whose
 *   call it hit (the gate runs synchronously inside that call).
 * - After every step the harness lets the workers run until nothing is due and every
 *   pass still running is one blocked on purpose (`settle`: `runUntilIdle()` would wait
 *   for those forever), then reads all rows of leases, resources, work_items, slot_locks,
 *   commands and the new log rows in one snapshot and checks the invariants (see
 *   `checkSnapshot`). Arming a fault touches nothing in the database: no check after it.
 *   Settling also tops up warm pools, as the broker's sweep would (its timer runs on real
 *   time, not on this clock).
 * - The pool policies' invariants: at every check, the quota's leases holding a resource
 *   (acquired, active, released, broken) never exceed it; no resource's leases_served
 *   passes maxLeasesPerResourceLifetime, and it equals the `lease.acquired` rows naming the
 *   resource; replayed from the log, no `lease.acquired` after the resource's activation +
 *   maxResourceAge, or between a `blueprint.draining` row and the next `blueprint.resumed`;
 *   a resource that released itself for recycling or a drain had the reason it gives. At
 *   quiescence, unless the blueprint drains or backs off after failed builds (its
 *   blueprint_failures.retry_at ahead of the clock; injected faults cause it), the idle
 *   resources (active, no lease, not retired) are at least min(minIdle, maxResources -
 *   resources holding a lease).
 * - At the end the faults are disarmed, the clock is moved past every hook timeout and
 *   then a minute at a time until the system is quiet, and the model's prediction of
 *   every lease and resource is checked.
 * - The reference model (`leaseDoom`, `resourceDoom`, `checkEnd`) predicts fates, and keeps
 *   small by these simplifications:
 *   - It does not simulate allocation: it never says which resource a lease gets or in
 *     which order waiters are served. A lease ends destroyed if the test released it, its
 *     ttl passed, or a fault that breaks it hit its call; otherwise active. The
 *     exceptions, where a pending lease may stay pending (`mayWait`): the blueprint drains;
 *     the lease is a `t1/` one and the quota is full; or the pool is full: maxResources
 *     resources, each held by a lease on an exclusive blueprint or retired (recycling
 *     keeps a resource until its leases end).
 *   - A resource may also end destroyed because it released itself for recycling or a
 *     drain (its `resource.released` reason, checked against the config and the log).
 *   - Which leases a resource's release or break takes down is read from the commands
 *     that resource wrote (author `resource:<id>`), not derived: the model checks that the
 *     resource really went released/broken and that the lease was on it.
 *   - Whether a reclaim found its resource idle is read from the command's outcome.
 *   - A fault's consequence is the documented one for its hook (LEASE_FATAL,
 *     RESOURCE_FATAL; RetryLater and slow hooks change no fate; destroy hooks are
 *     retried; releaseLease failures are ignored); a hang cut off by a close has none.
 *   - One blueprint of one type, no idle expiry, no child leases, no acquire timeouts, no
 *     destroyOnRelease (maxLeasesPerResourceLifetime 1 is its guard), no priorityAging.
 *   - The allocation limit (`max(1, ceil(25% x active))`) is checked at each allocation
 *     decision, replayed from the log, not as a count at every instant: resources leaving
 *     `active` can legitimately lower the limit below what is already allocating.
 * - Each run has a fresh database: an in-memory PGlite from the migrated template, or,
 *   only for runs with a reopen step, a copy of a migrated PGlite dataDir made once per
 *   file; on the postgres tier a fresh schema, reopened on the same schema.
 * - The parts that do not depend on the clock (scenario records and arbitraries, the
 *   fault-injecting blueprint, the snapshot and its checks, the reference model, the step
 *   interpreter) are in test/helpers/model.ts, shared with test/model-real-clock.test.ts;
 *   this file supplies the manual clock's side (`ModelRun`: settle, advance, reopen, quiesce).
 *
 * - What makes a run repeatable: the scenario carries its worker concurrency (4, or 1 in
 *   about a quarter of the runs, and shrinking tries 1 first) and an idSeed from which the
 *   run's lease and resource ids are derived (the library breaks ties between resources
 *   built at one clock instant by id); steps pick a resource by allocation order, not by
 *   id. With one worker a run is then a function of its scenario: the "replaying a
 *   scenario" test runs a recorded scenario twice, on each tier, and compares every status
 *   transition, fault hit and trace line. With 4 workers, hooks and units of work
 *   interleave by timing (on Postgres also across pooled connections), so a replay is
 *   likely but not certain to take the same path.
 *
 * Environment: SLIPWAY_MODEL_RUNS (default 50 embedded, 25 postgres; with SLIPWAY_TEST_LONG=1,
 * as CI runs it, 200 and 100), SLIPWAY_MODEL_STEPS
 * (default 40), SLIPWAY_MODEL_SEED and SLIPWAY_MODEL_PATH to replay the failure that
 * fast-check reports ("seed: ..., path: ..."); with a path, only that case runs.
 * SLIPWAY_MODEL_SCENARIO runs one scenario given as JSON (a counterexample as printed);
 * SLIPWAY_MODEL_CONCURRENCY overrides the scenario's worker count; SLIPWAY_MODEL_VERBOSE=1
 * prints each run's steps and timings to stderr.
 *
 * Replaying a failure:
 *
 * 1. The failing run's error ends with a ready command, on the tier it failed on:
 *      SLIPWAY_TEST_TIERS=embedded SLIPWAY_MODEL_SCENARIO='{"config":...,"steps":[...]}' \
 *        npm test -- test/model.test.ts -t model-based
 *    fast-check's report has the same scenario as its counterexample, and
 *    "seed: S, path: P": SLIPWAY_MODEL_SEED=S SLIPWAY_MODEL_PATH=P runs that exact case
 *    (SLIPWAY_MODEL_STEPS must match the failing run's).
 * 2. If the shrunk scenario has "concurrency": 1, the replay takes the same path every
 *    time. If it has 4 and the replay passes, run it a few times, or try it with
 *    SLIPWAY_MODEL_CONCURRENCY=1: a failure that needs two workers at once is a race.
 * 3. SLIPWAY_MODEL_VERBOSE=1 prints the steps as they run; the failure message lists the
 *    trace (each step, each fault hit) and the rows at the failing check.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { DateTime } from 'luxon';
import { internals } from '../lib/broker/index.js';
import { ID_SOURCE } from '../lib/store/store.js';
import { ManualClock, type TestBroker } from '../lib/testing/index.js';
import { toDb } from '../lib/time.js';
import { guardBrokers, testBroker } from './helpers/broker.js';
import { CONCURRENCY, envInt, ModelHarness, removeDataDirs, scenarioOf, type Config, type FaultRecord, type Scenario } from './helpers/model.js';
import { longRuns, tier } from './helpers/tier.js';

guardBrokers();

const RUNS = envInt('SLIPWAY_MODEL_RUNS', longRuns ? (tier === 'postgres' ? 100 : 200) : tier === 'postgres' ? 25 : 50);
const STEPS = envInt('SLIPWAY_MODEL_STEPS', 40);
const SEED = (() => {
  const raw = process.env.SLIPWAY_MODEL_SEED;
  if (!raw) return undefined;
  // fast-check seeds are 32-bit integers and may be negative
  if (!/^-?\d+$/.test(raw.trim())) throw new Error(`SLIPWAY_MODEL_SEED must be an integer (got ${raw})`);
  return Number(raw);
})();
const PATH = process.env.SLIPWAY_MODEL_PATH || undefined;
/** SLIPWAY_MODEL_SCENARIO='{"config":...,"steps":[...]}' runs that one scenario (as printed in a counterexample). */
const SCENARIO = process.env.SLIPWAY_MODEL_SCENARIO ? (JSON.parse(process.env.SLIPWAY_MODEL_SCENARIO) as Scenario) : undefined;
/** SLIPWAY_MODEL_VERBOSE=1 prints each run's trace and timings to stderr while it runs. */
const VERBOSE = Boolean(process.env.SLIPWAY_MODEL_VERBOSE);
/** SLIPWAY_MODEL_CONCURRENCY=1 overrides every scenario's worker concurrency (to see whether a failure also happens serially). */
const CONCURRENCY_OVERRIDE = process.env.SLIPWAY_MODEL_CONCURRENCY ? envInt('SLIPWAY_MODEL_CONCURRENCY', 4) : undefined;

/** Every hook of the model's blueprint times out after this much broker-clock time. */
const HOOK_TIMEOUT_MS = 20_000;
/** A "slow" hook settles by itself after this much clock time (before its timeout). */
const SLOW_MS = 5_000;
/** Real time one settle may take before the run fails as stuck. */
const SETTLE_LIMIT_MS = 60_000;
/** Quiescence: the clock moves a minute at a time, at most this many times. */
const QUIET_ROUNDS = 90;

const scenarioArb = scenarioOf(STEPS, { ttl: [90_000, 3_600_000], advance: [1_000, 6_000, 25_000, 120_000, 3_600_000], retryAfter: 10_000, maxAge: [30_000, 200_000] });

afterAll(removeDataDirs);

// --- deterministic ids -------------------------------------------------------------------
//
// The library names leases and resources with random ids, and breaks ties by id where the
// clock cannot (resources created in one step share created_at on the manual clock: which
// one a lease takes, which idle one a reclaim picks). While a scenario runs, ids come from
// its idSeed instead, so a replay makes the same choices. They still look random, so the
// id order is not the creation order.

function seededIds(seed: number): (prefix: string) => string {
  let n = 0;
  return (prefix) => `${prefix}_${createHash('sha256').update(`${seed}:${n++}`).digest('hex').slice(0, 20)}`;
}

// --- the harness -------------------------------------------------------------------------

class ModelRun extends ModelHarness {
  declare broker: TestBroker;
  clock = new ManualClock();
  readonly newId: (prefix: string) => string;

  constructor(config: Config) {
    super(config, { concurrency: CONCURRENCY_OVERRIDE ?? config.concurrency ?? CONCURRENCY, hookTimeoutMs: HOOK_TIMEOUT_MS, verbose: VERBOSE });
    this.newId = seededIds(config.idSeed ?? 0);
  }

  protected hang(record: FaultRecord): () => Promise<void> {
    this.blocked.add({ record, until: this.clock.now().toMillis() + HOOK_TIMEOUT_MS });
    return () => new Promise<void>(() => undefined);
  }

  protected slow(record: FaultRecord): () => Promise<void> {
    const blocked = { record, until: this.clock.now().toMillis() + SLOW_MS };
    this.blocked.add(blocked);
    const clock = this.clock;
    return () =>
      new Promise<void>((resolve) =>
        clock.schedule(DateTime.fromMillis(blocked.until, { zone: 'utc' }), () => {
          if (this.blocked.delete(blocked)) record.outcome = 'ok';
          resolve();
        }),
      );
  }

  protected now(): number {
    return this.clock.now().toMillis();
  }

  protected elapsed(): number {
    return this.clock.now().toMillis() - BASE;
  }

  protected async expiryOf(_id: string, _requestedAt: number, ttl: number): Promise<number> {
    return this.clock.now().toMillis() + ttl;
  }

  protected inflightNow(): Set<string> {
    return new Set(this.engine.inflightKeys());
  }

  protected snapshotNow(before: number): number {
    return before;
  }

  async open() {
    // The id seam of the store: every broker of the run (reopens too) names objects from one seeded source.
    this.broker = await testBroker({ database: this.database, blueprints: [this.blueprint], clock: this.clock, gcInterval: false, workers: { concurrency: this.concurrency }, ...this.brokerOptions(), [ID_SOURCE]: this.newId } as Parameters<typeof testBroker>[0]);
  }

  /**
   * Lets the workers run until no work is due and every pass still running is blocked on
   * purpose (a hang or a slow hook). Like `runUntilIdle()`, which would wait for those.
   */
  async settle(): Promise<void> {
    const { engine } = this;
    const { db, store } = internals.get(this.broker)!;
    const deadline = Date.now() + SETTLE_LIMIT_MS;
    const quiet = () => {
      const { polling, warming } = engine as unknown as { polling: boolean; warming: boolean };
      return !polling && !warming && engine.inflightKeys().every((k) => this.blockedKeys().has(k));
    };
    for (;;) {
      await store.settled();
      // What the sweep does (its timer runs on real time, not on this clock): look for due work, and top up warm pools.
      engine.poke();
      engine.topUpWarmPools();
      while (!quiet()) {
        if (Date.now() > deadline) throw new Error(`settle: workers still busy after ${SETTLE_LIMIT_MS} ms; in flight: ${engine.inflightKeys().join(', ')}`);
        await sleep(1);
      }
      const inflight = engine.inflightKeys();
      // Every worker is held by a blocked hook: nothing else can run until the clock moves.
      if (inflight.length >= this.concurrency) return;
      const due = await db.query<{ key: string }>(
        `SELECT object_kind || ':' || object_id AS key FROM ${store.s}.work_items
         WHERE run_at IS NOT NULL AND run_at <= $1 AND (claimed_by IS NULL OR claim_expires_at < $1)`,
        [toDb(this.clock.now())],
      );
      if (due.every((d) => inflight.includes(d.key)) && quiet()) return;
      if (Date.now() > deadline) throw new Error(`settle: work stays due after ${SETTLE_LIMIT_MS} ms: ${due.map((d) => d.key).join(', ')}`);
    }
  }

  /** Moves the clock by `by` ms; stops at each slow hook's time on the way so it settles before its timeout. */
  async advance(by: number) {
    const target = this.clock.now().toMillis() + by;
    for (;;) {
      const now = this.clock.now().toMillis();
      const slow = [...this.blocked].filter((b) => b.record.kind === 'slow' && b.until <= target).map((b) => b.until);
      const next = slow.length > 0 ? Math.min(...slow) : target;
      if (next > now) this.clock.set(DateTime.fromMillis(next, { zone: 'utc' }));
      this.timeOutHangs();
      await this.settle();
      if (next >= target) return;
    }
  }

  /** Hangs whose timeout the clock has passed: callHook's timer fired at the same instant, so the hook failed. */
  private timeOutHangs() {
    const now = this.clock.now().toMillis();
    for (const b of this.blocked) {
      if (b.record.kind === 'hang' && b.until <= now) {
        this.blocked.delete(b);
        b.record.outcome = 'failed';
      }
    }
  }

  async reopen() {
    await this.close();
    for (const b of this.blocked) b.record.outcome = 'interrupted';
    this.blocked.clear();
    // A new clock at the same time: the old broker's timers (hook timeouts, slow gates) never fire.
    this.clock = new ManualClock(this.clock.now());
    this.generation++;
    await this.open();
    await this.settle();
  }


  async quiesce() {
    this.armed.clear();
    this.trace.push(`  end: faults disarmed; the clock moves past every hook timeout, then a minute at a time`);
    await this.advance(HOOK_TIMEOUT_MS + 1_000);
    let snap = await this.check('after disarming');
    for (let round = 0; !this.quiet(snap); round++) {
      if (round >= QUIET_ROUNDS) this.fail(`after ${QUIET_ROUNDS} more minutes`, ['the system never became quiet (work still due, objects in transit, leases waiting with capacity free, or a warm pool short)', ...[this.warmShortfall(snap) ?? []].flat()], snap);
      await this.advance(60_000);
      snap = await this.check(`at quiescence round ${round}`);
    }
    this.checkEnd(snap);
  }
}

const BASE = new ManualClock().now().toMillis();

let runCount = 0;
async function runScenario(scenario: Scenario): Promise<ModelRun> {
  const run = new ModelRun(scenario.config);
  const started = Date.now();
  const cpu = process.cpuUsage();
  if (VERBOSE) process.stderr.write(`run ${++runCount}: ${JSON.stringify(scenario.config)}\n`);
  try {
    await run.start(scenario.steps.some((s) => s?.do === 'reopen'));
    await run.settle();
    await run.check('at start');
    if (VERBOSE) process.stderr.write(`  open: ${Date.now() - started} ms\n`);
    for (const [i, step] of scenario.steps.entries()) {
      const t = Date.now();
      if (step) await run.step(step, i);
      if (VERBOSE) process.stderr.write(`     (${Date.now() - t} ms)\n`);
    }
    const t = Date.now();
    await run.quiesce();
    if (VERBOSE) process.stderr.write(`  quiesce: ${Date.now() - t} ms\n`);
    return run;
  } catch (error) {
    if (error instanceof Error) {
      error.message += `\n  replay this scenario: SLIPWAY_TEST_TIERS=${tier} SLIPWAY_MODEL_SCENARIO='${JSON.stringify(scenario)}' npm test -- test/model.test.ts -t model-based`;
      if (run.concurrency > 1) error.message += `\n  (${run.concurrency} workers: a replay may interleave differently; SLIPWAY_MODEL_CONCURRENCY=1 tries it serially)`;
    }
    throw error;
  } finally {
    await run.dispose();
    if (VERBOSE) {
      const used = process.cpuUsage(cpu);
      process.stderr.write(`run ${runCount} done in ${Date.now() - started} ms wall, ${Math.round((used.user + used.system) / 1000)} ms CPU (snapshots ${run.checkMs} ms wall)\n`);
    }
  }
}

describe('model-based: random acquire / release / reclaim / expiry / hook faults / reopen sequences', () => {
  test(
    `${SCENARIO ? 'one given scenario' : PATH ? 'replay of a seed and path' : `${RUNS} runs of ${STEPS} steps`} on the ${tier} tier: invariants after every step, the model's end state at quiescence`,
    async () => {
      const started = Date.now();
      const cpu = process.cpuUsage();
      if (SCENARIO) return void (await runScenario(SCENARIO));
      await fc.assert(
        fc.asyncProperty(scenarioArb, async (scenario) => void (await runScenario(scenario))),
        { numRuns: PATH ? 1 : RUNS, seed: SEED, path: PATH, endOnFailure: Boolean(PATH), verbose: 1 },
      );
      const used = process.cpuUsage(cpu);
      console.log(
        `model test: ${PATH ? 1 : RUNS} run(s) x ${STEPS} steps on ${tier} in ${((Date.now() - started) / 1000).toFixed(1)} s wall, ` +
          `${((used.user + used.system) / 1e6).toFixed(1)} s CPU of this process`,
      );
    },
    3 * 60 * 60 * 1000,
  );
});

/** What a replay must repeat, with ids replaced by their order of first appearance (`res#0`, `lease#1`). */
function fingerprint(run: ModelRun) {
  const names = new Map<string, string>();
  const name = (id: string) => {
    if (!names.has(id)) names.set(id, `${id.slice(0, id.indexOf('_'))}#${names.size}`);
    return names.get(id)!;
  };
  const ids = /\b(?:lease|res)_[0-9a-f]{20}\b/g;
  return {
    transitions: run.transitions.map((t) => `${t.kind} ${name(t.id)}${t.resource && t.resource !== t.id ? ` on ${name(t.resource)}` : ''}: ${t.from ?? '(new)'} -> ${t.to}`),
    faults: run.faults.map((f) => `${f.kind} ${f.hook} of ${f.passKey.replace(ids, name)}: ${f.outcome}`),
    trace: run.trace.map((line) => line.replace(ids, name)),
  };
}

/**
 * A recorded scenario (as a failure prints it) built to meet the ties a replay used to
 * break at random: three resources built at one clock instant, leases taking idle ones
 * (the allocator picks among equals by id), resource steps picking among them, faults of
 * every kind, expiry, and a close and reopen.
 */
const RECORDED: Scenario = {
  config: { exclusive: true, maxResources: null, concurrency: 1, idSeed: 7 },
  steps: [
    { do: 'acquire', ttl: null, priority: 0 },
    { do: 'acquire', ttl: null, priority: 0 },
    { do: 'acquire', ttl: 90_000, priority: 0 },
    { do: 'release', pick: 0 },
    { do: 'release', pick: 0 },
    { do: 'fault', hook: 'activateLease', kind: 'throw', after: null },
    { do: 'acquire', ttl: null, priority: 1 },
    { do: 'acquire', ttl: null, priority: 0 },
    { do: 'reclaim', pick: 1 },
    { do: 'fault', hook: 'destroyResource', kind: 'hang', after: null },
    { do: 'breakResource', pick: 2 },
    { do: 'fault', hook: 'acquireLease', kind: 'retry', after: 10_000 },
    { do: 'acquire', ttl: 3_600_000, priority: 0 },
    { do: 'advance', ms: 25_000 },
    { do: 'fault', hook: 'activateResource', kind: 'slow', after: null },
    { do: 'releaseResource', pick: 0 },
    { do: 'acquire', ttl: null, priority: 0 },
    { do: 'advance', ms: 6_000 },
    { do: 'reopen' },
    { do: 'acquire', ttl: null, priority: 1 },
    { do: 'release', pick: 1 },
    { do: 'advance', ms: 120_000 },
    { do: 'reclaim', pick: 0 },
    { do: 'acquire', ttl: null, priority: 0 },
    { do: 'advance', ms: 1_000 },
  ],
};

describe('replaying a scenario', () => {
  (SCENARIO || PATH ? test.skip : test)(
    `a recorded scenario at concurrency 1 replays to the same run on the ${tier} tier: the same status transitions in the same order, the same fault hits, the same trace (ids aside)`,
    async () => {
      const first = fingerprint(await runScenario(RECORDED));
      const second = fingerprint(await runScenario(RECORDED));
      expect(second.transitions).toEqual(first.transitions);
      expect(second.faults).toEqual(first.faults);
      expect(second.trace).toEqual(first.trace);

      // It met what it was built for (so the comparison is not vacuous).
      const resources = new Set(first.transitions.filter((t) => t.startsWith('resource ')).map((t) => t.split(' ')[1]));
      expect(resources.size).toBeGreaterThanOrEqual(3);
      expect(new Set(first.faults.map((f) => f.split(' ')[0]))).toEqual(new Set(['throw', 'hang', 'retry', 'slow']));
      expect(first.trace.filter((line) => /: (reclaim|releaseResource|breakResource) res#\d+/.test(line))).toHaveLength(4);
    },
    10 * 60 * 1000,
  );
});
