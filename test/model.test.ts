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
 * - Steps: acquire (`requestLease`, with or without a ttl); release a lease; release,
 *   reclaim or break a resource; move the clock (expiry, retries, backoff, hook
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
 * - At the end the faults are disarmed, the clock is moved past every hook timeout and
 *   then a minute at a time until the system is quiet, and the model's prediction of
 *   every lease and resource is checked.
 * - The reference model (`leaseDoom`, `resourceDoom`, `checkEnd`) predicts fates, and keeps
 *   small by these simplifications:
 *   - It does not simulate allocation: it never says which resource a lease gets or in
 *     which order waiters are served. A lease ends destroyed if the test released it, its
 *     ttl passed, or a fault that breaks it hit its call; otherwise active. The one
 *     exception: on an exclusive blueprint with maxResources, extra leases may wait, and
 *     then exactly maxResources leases must be active.
 *   - Which leases a resource's release or break takes down is read from the commands
 *     that resource wrote (author `resource:<id>`), not derived: the model checks that the
 *     resource really went released/broken and that the lease was on it.
 *   - Whether a reclaim found its resource idle is read from the command's outcome.
 *   - A fault's consequence is the documented one for its hook (LEASE_FATAL,
 *     RESOURCE_FATAL; RetryLater and slow hooks change no fate; destroy hooks are
 *     retried; releaseLease failures are ignored); a hang cut off by a close has none.
 *   - One blueprint of one type, no idle expiry, no child leases, no acquire timeouts.
 *   - The allocation limit (`max(1, ceil(25% x active))`) is checked at each allocation
 *     decision, replayed from the log, not as a count at every instant: resources leaving
 *     `active` can legitimately lower the limit below what is already allocating.
 * - Each run has a fresh database: an in-memory PGlite from the migrated template, or,
 *   only for runs with a reopen step, a copy of a migrated PGlite dataDir made once per
 *   file; on the postgres tier a fresh schema, reopened on the same schema.
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
 * Environment: SLIPWAY_MODEL_RUNS (default 200 embedded, 100 postgres), SLIPWAY_MODEL_STEPS
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
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { DateTime } from 'luxon';
import { internals } from '../lib/broker.js';
import type { Blueprint } from '../lib/blueprint/contract.js';
import { HOOKS, type HookName } from '../lib/blueprint/timeouts.js';
import { RetryLater } from '../lib/errors/retry-later.js';
import { isLegalTransition, type ObjectKind } from '../lib/model/states.js';
import type { DatabaseOptions } from '../lib/store/open.js';
import { Store } from '../lib/store/store.js';
import { createTestBroker, fakeBlueprint, ManualClock, type FakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { fromDb, toDb } from '../lib/time.js';
import { guardBrokers, testBroker } from './helpers/broker.js';
import { testDatabase, tier } from './helpers/tier.js';

guardBrokers();

const envInt = (name: string, fallback: number) => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer (got ${raw})`);
  return n;
};
const RUNS = envInt('SLIPWAY_MODEL_RUNS', tier === 'postgres' ? 100 : 200);
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

/** Workers of the model broker in most runs; a quarter of the runs use one worker (see Config.concurrency). */
const CONCURRENCY = 4;
/** Every hook of the model's blueprint times out after this much broker-clock time. */
const HOOK_TIMEOUT_MS = 20_000;
/** A "slow" hook settles by itself after this much clock time (before its timeout). */
const SLOW_MS = 5_000;
/** Real time one settle may take before the run fails as stuck. */
const SETTLE_LIMIT_MS = 60_000;
/** Quiescence: the clock moves a minute at a time, at most this many times. */
const QUIET_ROUNDS = 90;

type Hook = HookName;
type FaultKind = 'throw' | 'retry' | 'hang' | 'slow';
type Step =
  | { do: 'acquire'; ttl: number | null; priority: number }
  | { do: 'release'; pick: number }
  | { do: 'releaseResource'; pick: number }
  | { do: 'reclaim'; pick: number }
  | { do: 'breakResource'; pick: number }
  | { do: 'advance'; ms: number }
  | { do: 'fault'; hook: Hook; kind: FaultKind; after: number | null }
  | { do: 'reopen' };
interface Config {
  /** One lease per resource (fakeBlueprint's slot lock per resource). */
  exclusive: boolean;
  maxResources: number | null;
  /**
   * Workers of the model broker: CONCURRENCY, or 1. With one worker a run is a function of
   * its scenario (the replay test below proves it), so a failure
   * that shrinks to concurrency 1 replays exactly. Absent in scenarios printed before it
   * existed: CONCURRENCY.
   */
  concurrency?: number;
  /** Seeds the ids of this run's leases and resources (random-looking, the same on every replay). Absent: 0. */
  idSeed?: number;
}
interface Scenario {
  config: Config;
  steps: Array<Step | null>;
}

/** Hooks of a resource's own pass (the in-flight work item is the resource); every other hook runs in a lease's pass. */
const RESOURCE_HOOKS: ReadonlySet<Hook> = new Set(['allocateResource', 'activateResource', 'destroyResource']);
/** A failure of these breaks the lease (allocator hooks, activateLease). */
const LEASE_FATAL: ReadonlySet<Hook> = new Set(['canEverAllocate', 'canAllocate', 'canAcquireLease', 'acquireLease', 'activateLease']);
/** A failure of these breaks the resource being built. releaseLease failures are logged and ignored; destroy hooks are retried. */
const RESOURCE_FATAL: ReadonlySet<Hook> = new Set(['allocateResource', 'activateResource']);

const pick = fc.nat({ max: 1000 });
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 60, arbitrary: fc.record({ do: fc.constant('acquire' as const), ttl: fc.constantFrom(null, null, null, 90_000, 3_600_000), priority: fc.constantFrom(0, 0, 1) }) },
  { weight: 30, arbitrary: fc.record({ do: fc.constant('release' as const), pick }) },
  { weight: 12, arbitrary: fc.record({ do: fc.constant('releaseResource' as const), pick }) },
  { weight: 10, arbitrary: fc.record({ do: fc.constant('reclaim' as const), pick }) },
  { weight: 8, arbitrary: fc.record({ do: fc.constant('breakResource' as const), pick }) },
  { weight: 40, arbitrary: fc.record({ do: fc.constant('advance' as const), ms: fc.constantFrom(1_000, 6_000, 25_000, 120_000, 3_600_000) }) },
  {
    weight: 50,
    arbitrary: fc.record({
      do: fc.constant('fault' as const),
      hook: fc.constantFrom(...HOOKS),
      kind: fc.constantFrom<FaultKind>('throw', 'retry', 'hang', 'slow'),
      after: fc.constantFrom(null, 10_000),
    }),
  },
  // ~17% of the runs have at least one; only those pay for a durable database (a dataDir copy, slower opens).
  { weight: 1, arbitrary: fc.constant({ do: 'reopen' as const }) },
);
const scenarioOf = (steps: number): fc.Arbitrary<Scenario> => fc.record({
  config: fc.record({
    exclusive: fc.boolean(),
    maxResources: fc.constantFrom(null, 1, 2, 3),
    // Cross-shrinking tries one worker first: a failure that survives it replays deterministically.
    concurrency: fc.oneof({ withCrossShrink: true }, { weight: 1, arbitrary: fc.constant(1) }, { weight: 3, arbitrary: fc.constant(CONCURRENCY) }),
    idSeed: fc.nat({ max: 0xffff }),
  }),
  steps: fc.array(fc.option(stepArb, { nil: null, freq: 1000 }), { minLength: steps, maxLength: steps }),
});
const scenarioArb = scenarioOf(STEPS);

// --- durable embedded databases: one migrated dataDir per file, copied per run ------------

const tempDirs: string[] = [];
let template: Promise<string> | undefined;
function dataDirTemplate(): Promise<string> {
  template ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'slipway-model-tpl-'));
    tempDirs.push(dir);
    const broker = await createTestBroker({ database: { embedded: true, dataDir: dir }, workers: false, gcInterval: false });
    await broker.close();
    return dir;
  })();
  return template;
}
async function freshDataDir(): Promise<string> {
  const from = await dataDirTemplate();
  const dir = mkdtempSync(join(tmpdir(), 'slipway-model-run-'));
  cpSync(from, dir, { recursive: true });
  return dir;
}
afterAll(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

// --- deterministic ids -------------------------------------------------------------------
//
// The library names leases and resources with random ids, and breaks ties by id where the
// clock cannot (resources created in one step share created_at on the manual clock: which
// one a lease takes, which idle one a reclaim picks). While a scenario runs, ids come from
// its idSeed instead, so a replay makes the same choices. They still look random, so the
// id order is not the creation order.

let idSource: ((prefix: string) => string) | undefined;
const randomNewId = Store.prototype.newId;
beforeAll(() => {
  Store.prototype.newId = function newId(this: Store, prefix) {
    return idSource ? idSource(prefix) : randomNewId.call(this, prefix);
  };
});
afterAll(() => {
  Store.prototype.newId = randomNewId;
});

function seededIds(seed: number): (prefix: string) => string {
  let n = 0;
  return (prefix) => `${prefix}_${createHash('sha256').update(`${seed}:${n++}`).digest('hex').slice(0, 20)}`;
}

// --- the harness -------------------------------------------------------------------------

interface FaultRecord {
  hook: Hook;
  kind: FaultKind;
  lease: string | null;
  resource: string | null;
  /** The work item whose pass made the call. */
  passKey: string;
  /** `failed`: the hook failed (a throw, or a hang that reached its timeout); `interrupted`: the broker closed while it was blocked. */
  outcome: 'blocked' | 'failed' | 'retried' | 'ok' | 'interrupted';
}
interface Blocked {
  record: FaultRecord;
  /** Clock millis when a hang times out or a slow hook settles. */
  until: number;
}

interface LeaseModel {
  id: string;
  expiresAt: number | null;
  /** The test wrote a release command for it. */
  released: boolean;
}
interface ResourceModel {
  id: string;
  /** The test wrote a release or break command for it. */
  released: boolean;
  broken: boolean;
}

interface Snapshot {
  now: number;
  leases: Array<{ id: string; status: string; resourceId: string | null; expiresAt: number | null; brokenReason: string | null }>;
  resources: Array<{ id: string; status: string; blueprint: string; leaseCount: number }>;
  work: Map<string, { runAt: number | null; claimedBy: string | null }>;
  slots: Array<{ key: string; holderKind: string; holderId: string }>;
  commands: Array<{ id: number; targetKind: string; targetId: string; command: string; author: string | null; consumed: boolean; outcome: string | null }>;
  logs: Array<{ id: number; type: string; lease: string | null; resource: string | null; data: Record<string, any> }>;
  inflight: Set<string>;
}

const ms = (v: unknown) => fromDb(v as Date | string | null)?.toMillis() ?? null;
const allocationLimit = (active: number) => Math.max(1, Math.ceil(0.25 * active));
/**
 * The allocation-limit replay reads log rows in id order. On embedded that is commit order
 * (one unit at a time). On Postgres a unit that takes a resource out of `active` can log
 * just before an allocation yet commit after the allocation counted: there the limit is
 * taken from the largest active count over this many preceding log rows.
 */
const ACTIVE_WINDOW = tier === 'postgres' ? 40 : 0;

class ModelRun {
  broker!: TestBroker;
  clock = new ManualClock();
  generation = 0;
  readonly fake: FakeBlueprint;
  readonly blueprint: Blueprint<any, any, any>;
  readonly armed = new Map<Hook, Array<{ kind: FaultKind; after: number | null }>>();
  readonly nextGate: Partial<Record<Hook, () => Promise<void>>> = {};
  readonly blocked = new Set<Blocked>();
  readonly faults: FaultRecord[] = [];
  readonly leases = new Map<string, LeaseModel>();
  readonly resources = new Map<string, ResourceModel>();
  readonly trace: string[] = [];
  /** Engine errors of brokers already closed. */
  readonly pastErrors: unknown[] = [];
  database: DatabaseOptions | undefined;
  dataDir: string | undefined;
  // log replay
  private lastLogId = 0;
  private readonly replayed = new Map<string, { status: string; visited: Set<string> }>();
  private readonly activeHistory: number[] = [];
  last: Snapshot | undefined;
  /** Resource id -> its place in allocation order (from the resource.allocating logs): how steps pick a resource, independent of ids. */
  private readonly allocationOrder = new Map<string, number>();
  /** Every status change, in log order (`from` null: a resource starting to allocate): what a replay must repeat. */
  readonly transitions: Array<{ kind: string; id: string; from: string | null; to: string; resource: string | null }> = [];
  readonly concurrency: number;
  readonly newId: (prefix: string) => string;

  constructor(readonly config: Config) {
    this.concurrency = CONCURRENCY_OVERRIDE ?? config.concurrency ?? CONCURRENCY;
    this.newId = seededIds(config.idSeed ?? 0);
    const gates = Object.fromEntries(
      HOOKS.map((hook) => [
        hook,
        () => {
          const gate = this.nextGate[hook];
          delete this.nextGate[hook];
          return gate ? gate() : Promise.resolve();
        },
      ]),
    );
    this.fake = fakeBlueprint({
      name: 'm',
      exclusive: config.exclusive,
      limits: config.maxResources ? { maxResources: config.maxResources } : undefined,
      timeouts: { default: { milliseconds: HOOK_TIMEOUT_MS } },
      gates,
    });
    const impl = this.fake.implementation as unknown as Record<string, unknown>;
    const wrapped: Record<string, unknown> = { ...impl };
    for (const hook of HOOKS) {
      const original = impl[hook] as (ctx: any) => unknown;
      wrapped[hook] = (ctx: any) => {
        const fault = this.armed.get(hook)?.shift();
        if (fault) this.nextGate[hook] = this.startFault(hook, fault, ctx);
        return original.call(impl, ctx);
      };
    }
    // The same blueprint (name, limits, timeouts, counters), with the wrapped hooks.
    this.blueprint = { ...this.fake, implementation: wrapped } as unknown as Blueprint<any, any, any>;
  }

  /** Runs synchronously inside the hook call that meets the fault: records whose call it was, returns what the gate does. */
  private startFault(hook: Hook, fault: { kind: FaultKind; after: number | null }, ctx: any): () => Promise<void> {
    const record: FaultRecord = {
      hook,
      kind: fault.kind,
      lease: ctx.lease?.id ?? null,
      resource: ctx.resource?.id ?? null,
      passKey: RESOURCE_HOOKS.has(hook) ? `resource:${ctx.resource.id}` : `lease:${ctx.lease.id}`,
      outcome: 'blocked',
    };
    this.faults.push(record);
    this.trace.push(`      fault ${fault.kind} hit ${hook} of ${record.passKey}${record.resource && !record.passKey.endsWith(record.resource) ? ` (on ${record.resource})` : ''}`);
    const now = this.clock.now().toMillis();
    switch (fault.kind) {
      case 'throw':
        record.outcome = 'failed';
        return () => Promise.reject(new Error(`model: injected failure of ${hook}`));
      case 'retry':
        record.outcome = 'retried';
        return () => Promise.reject(new RetryLater(`model: injected RetryLater in ${hook}`, fault.after === null ? undefined : { milliseconds: fault.after }));
      case 'hang':
        this.blocked.add({ record, until: now + HOOK_TIMEOUT_MS });
        return () => new Promise<void>(() => undefined);
      case 'slow': {
        const blocked = { record, until: now + SLOW_MS };
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
    }
  }

  async open() {
    this.broker = await testBroker({ database: this.database, blueprints: [this.blueprint], clock: this.clock, gcInterval: false, workers: { concurrency: this.concurrency } });
  }

  async start(withReopen: boolean) {
    if (tier === 'postgres') this.database = testDatabase('m');
    else if (withReopen) {
      this.dataDir = await freshDataDir();
      this.database = { embedded: true, dataDir: this.dataDir };
    }
    await this.open();
  }

  async close() {
    if (!this.broker) return;
    this.pastErrors.push(...(internals.get(this.broker)?.engine?.errors ?? []));
    await this.broker.close({ grace: { milliseconds: 50 } });
  }

  async dispose() {
    await this.close().catch(() => undefined);
    if (this.dataDir) rmSync(this.dataDir, { recursive: true, force: true });
  }

  private get engine() {
    return internals.get(this.broker)!.engine!;
  }

  private blockedKeys(): Set<string> {
    return new Set([...this.blocked].map((b) => b.record.passKey));
  }

  /**
   * Lets the workers run until no work is due and every pass still running is blocked on
   * purpose (a hang or a slow hook). Like `runUntilIdle()`, which would wait for those.
   */
  async settle(): Promise<void> {
    const { engine } = this;
    const { db, runtime } = internals.get(this.broker)!;
    const { store } = runtime;
    const deadline = Date.now() + SETTLE_LIMIT_MS;
    const quiet = () => !(engine as unknown as { polling: boolean }).polling && engine.inflightKeys().every((k) => this.blockedKeys().has(k));
    for (;;) {
      await store.settled();
      engine.poke();
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

  // --- the model ---------------------------------------------------------------------------

  fatalLeases(): Set<string> {
    return new Set(this.faults.filter((f) => f.outcome === 'failed' && LEASE_FATAL.has(f.hook) && f.lease).map((f) => f.lease!));
  }

  fatalResources(): Set<string> {
    return new Set(this.faults.filter((f) => f.outcome === 'failed' && RESOURCE_FATAL.has(f.hook) && f.resource).map((f) => f.resource!));
  }

  /**
   * Why a lease may be (or must end) destroyed, or null when the model says it stays live:
   * the test released it, its ttl passed, a fatal fault hit it, or a resource it was on was
   * released or broke and told it so (a command authored `resource:<id>`: the model takes
   * the lib's word for which leases were on the resource then, and checks that resource).
   */
  leaseDoom(id: string, snap: Snapshot): string | null {
    const m = this.leases.get(id);
    if (m?.released) return 'released by the test';
    if (m?.expiresAt !== null && m?.expiresAt !== undefined && m.expiresAt <= snap.now) return 'expired';
    if (this.fatalLeases().has(id)) return 'a fatal fault';
    const told = snap.commands.find((c) => c.targetKind === 'lease' && c.targetId === id && c.author?.startsWith('resource:'));
    if (told) return `${told.command} by ${told.author}`;
    return null;
  }

  /** Why a resource may be (or must end) destroyed: released or broken by the test, a fatal build fault, or a reclaim that was applied. */
  resourceDoom(id: string, snap: Snapshot): string | null {
    const m = this.resources.get(id);
    if (m?.released) return 'released by the test';
    if (m?.broken) return 'broken by the test';
    if (this.fatalResources().has(id)) return 'a fatal fault';
    const reclaimed = snap.commands.find((c) => c.targetKind === 'resource' && c.targetId === id && c.command === 'reclaim' && c.outcome === 'applied');
    if (reclaimed) return `reclaimed (${reclaimed.author ?? 'test'})`;
    return null;
  }

  // --- reading and checking the database -------------------------------------------------------

  async snapshot(): Promise<Snapshot> {
    const { db, runtime } = internals.get(this.broker)!;
    const s = runtime.store.s;
    const inflight = new Set(this.engine.inflightKeys());
    const now = this.clock.now().toMillis();
    return db.transaction(async (tx) => {
      await tx.execute('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      const leases = await tx.query(`SELECT id, status, resource_id, expires_at, broken_reason FROM ${s}.leases ORDER BY seq`);
      const resources = await tx.query(`SELECT id, status, blueprint, lease_count FROM ${s}.resources ORDER BY created_at, id`);
      const work = await tx.query(`SELECT object_kind, object_id, run_at, claimed_by FROM ${s}.work_items`);
      const slots = await tx.query(`SELECT key, holder_kind, holder_id FROM ${s}.slot_locks`);
      const commands = await tx.query(`SELECT id, target_kind, target_id, command, author, consumed_at, outcome FROM ${s}.commands ORDER BY id`);
      const logs = await tx.query(
        `SELECT id, type, lease_id, resource_id, data FROM ${s}.logs WHERE id > $1 AND type IN ('status.changed', 'resource.allocating') ORDER BY id`,
        [this.lastLogId],
      );
      return {
        now,
        inflight,
        leases: leases.map((r) => ({ id: r.id, status: r.status, resourceId: r.resource_id ?? null, expiresAt: ms(r.expires_at), brokenReason: r.broken_reason ?? null })),
        resources: resources.map((r) => ({ id: r.id, status: r.status, blueprint: r.blueprint, leaseCount: Number(r.lease_count) })),
        work: new Map(work.map((r) => [`${r.object_kind}:${r.object_id}`, { runAt: ms(r.run_at), claimedBy: r.claimed_by ?? null }])),
        slots: slots.map((r) => ({ key: r.key, holderKind: r.holder_kind, holderId: r.holder_id })),
        commands: commands.map((r) => ({
          id: Number(r.id),
          targetKind: r.target_kind,
          targetId: r.target_id,
          command: r.command,
          author: r.author ?? null,
          consumed: r.consumed_at !== null && r.consumed_at !== undefined,
          outcome: r.outcome ?? null,
        })),
        logs: logs.map((r) => ({ id: Number(r.id), type: r.type, lease: r.lease_id ?? null, resource: r.resource_id ?? null, data: r.data ?? {} })),
      };
    });
  }

  /** Reads the database and checks every invariant; records resources the model has not seen yet. */
  checkMs = 0;
  async check(phase: string): Promise<Snapshot> {
    const t = Date.now();
    const snap = await this.snapshot();
    this.checkMs += Date.now() - t;
    for (const r of snap.resources) if (!this.resources.has(r.id)) this.resources.set(r.id, { id: r.id, released: false, broken: false });
    const problems = this.checkSnapshot(snap);
    if (problems.length > 0) this.fail(phase, problems, snap);
    this.last = snap;
    return snap;
  }

  fail(phase: string, problems: string[], snap?: Snapshot): never {
    const rows = snap
      ? [
          '  leases:',
          ...snap.leases.map((l) => `    ${l.id} ${l.status}${l.resourceId ? ` on ${l.resourceId}` : ''}${l.brokenReason ? ` (${l.brokenReason})` : ''}; work ${JSON.stringify(snap.work.get(`lease:${l.id}`) ?? null)}`),
          '  resources:',
          ...snap.resources.map((r) => `    ${r.id} ${r.status}; work ${JSON.stringify(snap.work.get(`resource:${r.id}`) ?? null)}`),
          `  slot locks: ${snap.slots.map((s) => `${s.key}=${s.holderKind}:${s.holderId}`).join(', ') || 'none'}`,
          `  commands: ${snap.commands.map((c) => `#${c.id} ${c.command} ${c.targetKind}:${c.targetId} by ${c.author} -> ${c.consumed ? c.outcome : 'unconsumed'}`).join('; ') || 'none'}`,
          `  in flight: ${[...snap.inflight].join(', ') || 'none'}; blocked on purpose: ${[...this.blockedKeys()].join(', ') || 'none'}`,
        ]
      : [];
    throw new Error([`model check failed ${phase} (tier ${tier}, config ${JSON.stringify(this.config)}):`, ...problems.map((p) => `  - ${p}`), ...rows, '  trace:', ...this.trace].join('\n'));
  }

  private checkSnapshot(snap: Snapshot): string[] {
    const problems: string[] = [];
    const { config } = this;
    const leaseById = new Map(snap.leases.map((l) => [l.id, l]));
    const resourceById = new Map(snap.resources.map((r) => [r.id, r]));
    const unconsumed = snap.commands.filter((c) => !c.consumed);
    const hasUnconsumed = (kind: string, id: string) => unconsumed.some((c) => c.targetKind === kind && c.targetId === id);

    // 1. Logged status changes: every (from, to) legal, each object's chain connected, ending at its row's status.
    //    Also the allocation limit and maxResources at each allocation decision, replayed from the log.
    for (const log of snap.logs) {
      if (log.type === 'resource.allocating') {
        const id = log.resource!;
        const live = [...this.replayed.entries()].filter(([k]) => k.startsWith('resource:'));
        const pending = live.filter(([, v]) => v.status === 'pending').length;
        const activeNow = live.filter(([, v]) => v.status === 'active').length;
        const window = this.activeHistory.slice(Math.max(0, this.activeHistory.length - ACTIVE_WINDOW));
        const active = Math.max(activeNow, ...window);
        if (pending >= allocationLimit(active)) problems.push(`allocation limit exceeded: ${id} started while ${pending} resource(s) were allocating and ${active} active (limit ${allocationLimit(active)}) [log ${log.id}]`);
        this.replayed.set(`resource:${id}`, { status: 'pending', visited: new Set(['pending']) });
        this.allocationOrder.set(id, this.allocationOrder.size);
        this.transitions.push({ kind: 'resource', id, from: null, to: 'pending', resource: id });
        const nonDestroyed = live.filter(([, v]) => v.status !== 'destroyed').length + 1;
        if (config.maxResources !== null && nonDestroyed > config.maxResources) problems.push(`maxResources ${config.maxResources} exceeded: ${id} is resource number ${nonDestroyed} not destroyed [log ${log.id}]`);
      } else {
        const kind = log.data.kind as ObjectKind;
        const id = kind === 'lease' ? log.lease : log.resource;
        const key = `${kind}:${id}`;
        const { from, to } = log.data as { from: string; to: string };
        this.transitions.push({ kind, id: id!, from, to, resource: log.resource });
        if (!isLegalTransition(kind, from, to)) problems.push(`illegal transition logged: ${key} ${from} -> ${to} [log ${log.id}]`);
        let entry = this.replayed.get(key);
        if (!entry) {
          if (kind === 'resource') problems.push(`status change of ${key} before its resource.allocating log [log ${log.id}]`);
          entry = { status: 'pending', visited: new Set(['pending']) };
          this.replayed.set(key, entry);
        }
        if (entry.status !== from) problems.push(`status chain of ${key} broken: logged ${from} -> ${to} after it was ${entry.status} [log ${log.id}]`);
        entry.status = to;
        entry.visited.add(to);
      }
      this.activeHistory.push([...this.replayed.entries()].filter(([k, v]) => k.startsWith('resource:') && v.status === 'active').length);
      this.lastLogId = Math.max(this.lastLogId, log.id);
    }
    for (const l of snap.leases) {
      const replayed = this.replayed.get(`lease:${l.id}`)?.status ?? 'pending';
      if (replayed !== l.status) problems.push(`lease ${l.id} is ${l.status} but its logged changes end at ${replayed}`);
    }
    for (const r of snap.resources) {
      const replayed = this.replayed.get(`resource:${r.id}`)?.status;
      if (replayed !== r.status) problems.push(`resource ${r.id} is ${r.status} but its logged changes end at ${replayed ?? '(none: no resource.allocating log)'}`);
    }

    // 2. The allocation limit as counted now: maxResources, and its capacity slot locks, one per resource not destroyed.
    const nonDestroyed = snap.resources.filter((r) => r.status !== 'destroyed');
    if (config.maxResources !== null) {
      if (nonDestroyed.length > config.maxResources) problems.push(`${nonDestroyed.length} resources not destroyed, maxResources is ${config.maxResources}`);
      const capacity = snap.slots.filter((s) => s.key.startsWith('slipway:capacity:'));
      const holders = new Set(capacity.map((s) => s.holderId));
      for (const r of nonDestroyed) if (!holders.has(r.id)) problems.push(`resource ${r.id} (${r.status}) holds no capacity slot`);
      if (capacity.length !== holders.size) problems.push(`a resource holds two capacity slots: ${capacity.map((s) => `${s.key}=${s.holderId}`).join(', ')}`);
    }

    // 3. Slot locks: held only by live holders; on an exclusive blueprint, exactly by the leases holding a resource.
    for (const s of snap.slots) {
      const holder = s.holderKind === 'lease' ? leaseById.get(s.holderId) : resourceById.get(s.holderId);
      if (!holder) problems.push(`slot lock ${s.key} held by a missing ${s.holderKind} ${s.holderId}`);
      else if (holder.status === 'destroyed') problems.push(`slot lock ${s.key} still held by destroyed ${s.holderKind} ${s.holderId}`);
    }
    const leaseSlots = snap.slots.filter((s) => s.key.startsWith('fake:'));
    if (!config.exclusive && leaseSlots.length > 0) problems.push(`slot locks on a shared blueprint: ${leaseSlots.map((s) => s.key).join(', ')}`);
    if (config.exclusive) {
      for (const l of snap.leases) {
        const holds = l.resourceId !== null && l.status !== 'destroyed' && l.status !== 'pending';
        const held = leaseSlots.find((s) => s.holderId === l.id);
        if (holds && held?.key !== `fake:${l.resourceId}`) problems.push(`lease ${l.id} (${l.status} on ${l.resourceId}) does not hold slot fake:${l.resourceId}${held ? ` (holds ${held.key})` : ''}`);
        if (!holds && held) problems.push(`lease ${l.id} (${l.status}) still holds ${held.key}`);
      }
      for (const r of snap.resources) {
        const on = snap.leases.filter((l) => l.resourceId === r.id && l.status !== 'destroyed' && l.status !== 'pending');
        if (on.length > 1) problems.push(`exclusive resource ${r.id} has ${on.length} leases: ${on.map((l) => `${l.id} ${l.status}`).join(', ')}`);
      }
    }

    // The lease count a resource keeps (the allocator's index) is its leases not destroyed yet, at every step.
    for (const r of snap.resources) {
      const counted = snap.leases.filter((l) => l.resourceId === r.id && l.status !== 'destroyed').length;
      if (r.leaseCount !== counted) problems.push(`resource ${r.id} keeps lease_count ${r.leaseCount} but has ${counted} leases not destroyed`);
    }

    // 4. No lease is active on a resource that is not active (unless it has been told and not yet listened: an unconsumed command).
    for (const l of snap.leases) {
      if (l.status !== 'active') continue;
      const r = l.resourceId ? resourceById.get(l.resourceId) : undefined;
      if (r?.status !== 'active' && !hasUnconsumed('lease', l.id)) problems.push(`lease ${l.id} is active on ${l.resourceId ?? 'no resource'}, which is ${r?.status ?? 'missing'}, and has no command to act on`);
    }

    // 5. Every object not destroyed has a driver: its work item, due (or running), or a reason to need none.
    const driven = (key: string) => {
      const w = snap.work.get(key);
      return w !== undefined && (w.runAt !== null || snap.inflight.has(key));
    };
    for (const l of snap.leases) {
      if (l.status === 'destroyed') continue;
      const key = `lease:${l.id}`;
      const w = snap.work.get(key);
      if (!w) {
        problems.push(`lease ${l.id} (${l.status}) has no work item`);
        continue;
      }
      if (l.status === 'active') {
        // Parked is fine (a command or the expiry wakes it), as long as an expiry is scheduled.
        if (l.expiresAt !== null && !snap.inflight.has(key) && (w.runAt === null || w.runAt > l.expiresAt)) problems.push(`active lease ${l.id} expires at ${l.expiresAt} but its work item runs at ${w.runAt}`);
      } else if (!driven(key)) problems.push(`lease ${l.id} is ${l.status} and its work item is parked: nothing will move it`);
    }
    for (const r of snap.resources) {
      if (r.status === 'destroyed') continue;
      const key = `resource:${r.id}`;
      if (!snap.work.get(key)) {
        problems.push(`resource ${r.id} (${r.status}) has no work item`);
        continue;
      }
      if (r.status === 'active') continue; // parked until a command or a lease wakes it (no idle expiry here)
      const liveLeases = snap.leases.filter((l) => l.resourceId === r.id && l.status !== 'destroyed' && l.status !== 'pending');
      // released/broken with leases left: woken when its last lease is destroyed
      if ((r.status === 'released' || r.status === 'broken') && liveLeases.length > 0) continue;
      if (!driven(key)) problems.push(`resource ${r.id} is ${r.status} and its work item is parked: nothing will move it`);
    }
    for (const c of unconsumed) {
      if (!driven(`${c.targetKind}:${c.targetId}`)) problems.push(`command #${c.id} (${c.command} ${c.targetKind}:${c.targetId}) is unconsumed and its target's work item is not due`);
    }

    // 6. Nothing is destroyed or broken without a cause the model knows.
    for (const l of snap.leases) {
      const m = this.leases.get(l.id);
      if (!m) {
        problems.push(`lease ${l.id} was not requested by the test`);
        continue;
      }
      if (m.expiresAt !== l.expiresAt) problems.push(`lease ${l.id} expires at ${l.expiresAt}, the model says ${m.expiresAt}`);
      const visited = this.replayed.get(`lease:${l.id}`)?.visited ?? new Set(['pending']);
      const doom = this.leaseDoom(l.id, snap);
      if (l.status === 'destroyed' && doom === null) problems.push(`lease ${l.id} was destroyed without a cause (not released, not expired, no fatal fault, not told by its resource)`);
      if (visited.has('broken')) {
        const told = snap.commands.some((c) => c.targetKind === 'lease' && c.targetId === l.id && c.command === 'break' && c.author?.startsWith('resource:'));
        if (!this.fatalLeases().has(l.id) && !told) problems.push(`lease ${l.id} broke without a fatal fault or a break from its resource (${l.brokenReason})`);
      }
      if (this.fatalLeases().has(l.id) && !visited.has('broken')) {
        // the fault's pass breaks the lease before it does anything else
        problems.push(`lease ${l.id} met a fatal fault but never went to broken (${[...visited].join(', ')})`);
      }
    }
    for (const c of snap.commands) {
      if (c.targetKind !== 'lease' || !c.author?.startsWith('resource:')) continue;
      const rid = c.author.slice('resource:'.length);
      const r = resourceById.get(rid);
      const l = leaseById.get(c.targetId);
      if (!r || r.status === 'pending' || r.status === 'active') problems.push(`resource ${rid} (${r?.status ?? 'missing'}) told lease ${c.targetId} to ${c.command}, but it was never released or broken`);
      if (l && l.resourceId !== rid) problems.push(`resource ${rid} told lease ${c.targetId} to ${c.command}, but that lease is on ${l.resourceId}`);
    }
    for (const r of snap.resources) {
      const visited = this.replayed.get(`resource:${r.id}`)?.visited ?? new Set<string>();
      if (r.status === 'destroyed' && this.resourceDoom(r.id, snap) === null) problems.push(`resource ${r.id} was destroyed without a cause`);
      if (visited.has('broken') && !this.fatalResources().has(r.id) && !this.resources.get(r.id)?.broken) problems.push(`resource ${r.id} broke without a fatal fault or a break command`);
      if (this.fatalResources().has(r.id) && !visited.has('broken')) problems.push(`resource ${r.id} met a fatal fault but never went to broken (${[...visited].join(', ')})`);
    }

    // 7. The library's own writes never failed.
    const errors = [...this.pastErrors, ...(internals.get(this.broker)?.engine?.errors ?? [])];
    if (errors.length > 0) problems.push(`engine errors: ${errors.map((e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e))).join(' | ')}`);
    return problems;
  }

  /** Quiet: nothing running, nothing due, nothing on its way; waiting leases only when an exclusive pool is full. */
  quiet(snap: Snapshot): boolean {
    if (this.blocked.size > 0 || snap.inflight.size > 0) return false;
    if ([...snap.work.values()].some((w) => w.runAt !== null && w.runAt <= snap.now)) return false;
    if (snap.commands.some((c) => !c.consumed)) return false;
    if (snap.resources.some((r) => r.status !== 'active' && r.status !== 'destroyed')) return false;
    if (snap.leases.some((l) => l.status !== 'active' && l.status !== 'destroyed' && l.status !== 'pending')) return false;
    return !snap.leases.some((l) => l.status === 'pending') || this.poolFull(snap);
  }

  poolFull(snap: Snapshot): boolean {
    const { exclusive, maxResources } = this.config;
    return exclusive && maxResources !== null && snap.leases.filter((l) => l.status === 'active').length === maxResources;
  }

  /** The model's end state: each lease destroyed (with its cause) or active (or waiting for a full exclusive pool); each resource destroyed or active. */
  checkEnd(snap: Snapshot) {
    const problems: string[] = [];
    for (const l of snap.leases) {
      const doom = this.leaseDoom(l.id, snap);
      if (doom !== null && l.status !== 'destroyed') problems.push(`lease ${l.id} should be destroyed (${doom}) but is ${l.status}`);
      if (doom === null && l.status !== 'active' && !(l.status === 'pending' && this.poolFull(snap))) problems.push(`lease ${l.id} should be active but is ${l.status}`);
      const visited = this.replayed.get(`lease:${l.id}`)?.visited;
      if (this.fatalLeases().has(l.id) && !visited?.has('broken')) problems.push(`lease ${l.id} met a fatal fault but never went to broken`);
    }
    for (const r of snap.resources) {
      const doom = this.resourceDoom(r.id, snap);
      if (doom !== null && r.status !== 'destroyed') problems.push(`resource ${r.id} should be destroyed (${doom}) but is ${r.status}`);
      if (doom === null && r.status !== 'active') problems.push(`resource ${r.id} should be active but is ${r.status}`);
    }
    for (const [key, w] of snap.work) {
      const [kind, id] = key.split(':') as [string, string];
      const row = kind === 'lease' ? snap.leases.find((l) => l.id === id) : snap.resources.find((r) => r.id === id);
      if (!row || row.status === 'destroyed') problems.push(`work item ${key} left behind for a ${row ? 'destroyed' : 'missing'} object`);
      if (w.claimedBy !== null) problems.push(`work item ${key} still claimed by ${w.claimedBy} at quiescence`);
    }
    if (problems.length > 0) this.fail('at quiescence', problems, snap);
  }

  // --- steps ---------------------------------------------------------------------------------

  /** The n-th (modulo) object not destroyed: leases in request order (seq), resources in allocation order. */
  private live<T extends { id: string; status: string }>(rows: T[] | undefined, n: number, order?: Map<string, number>): T | undefined {
    const list = (rows ?? []).filter((r) => r.status !== 'destroyed');
    if (order) list.sort((a, b) => (order.get(a.id) ?? Infinity) - (order.get(b.id) ?? Infinity));
    return list.length > 0 ? list[n % list.length] : undefined;
  }

  async step(step: Step, index: number) {
    const at = `step ${index}`;
    const describe = (what: string) => {
      this.trace.push(`  ${index}: ${what} @${this.clock.now().toMillis() - BASE}`);
      if (VERBOSE) process.stderr.write(`${this.trace[this.trace.length - 1]}\n`);
    };
    switch (step.do) {
      case 'acquire': {
        const handle = await this.broker.requestLease({ type: 'fake', priority: step.priority, ...(step.ttl ? { ttl: { milliseconds: step.ttl } } : {}) });
        this.leases.set(handle.id, { id: handle.id, expiresAt: step.ttl ? this.clock.now().toMillis() + step.ttl : null, released: false });
        describe(`acquire ${handle.id}${step.ttl ? ` ttl ${step.ttl / 1000}s` : ''}${step.priority ? ' priority 1' : ''}`);
        break;
      }
      case 'release': {
        const l = this.live(this.last?.leases, step.pick);
        describe(`release ${l?.id ?? '(no live lease)'}`);
        if (!l) return;
        this.leases.get(l.id)!.released = true;
        await this.broker.release(l.id, { author: 'model' });
        break;
      }
      case 'releaseResource':
      case 'reclaim':
      case 'breakResource': {
        const r = this.live(this.last?.resources, step.pick, this.allocationOrder);
        describe(`${step.do} ${r?.id ?? '(no live resource)'}`);
        if (!r) return;
        const m = this.resources.get(r.id)!;
        if (step.do === 'releaseResource') {
          m.released = true;
          await this.broker.releaseResource(r.id, { author: 'model' });
        } else if (step.do === 'breakResource') {
          m.broken = true;
          await this.broker.breakResource(r.id, 'model: broken by the test', { author: 'model' });
        } else await this.broker.reclaimResource(r.id, { author: 'model' });
        break;
      }
      case 'advance':
        describe(`advance ${step.ms / 1000}s`);
        await this.advance(step.ms);
        await this.check(at);
        return;
      case 'fault': {
        describe(`arm ${step.kind}${step.kind === 'retry' && step.after ? ` (after ${step.after / 1000}s)` : ''} for the next ${step.hook}`);
        const list = this.armed.get(step.hook) ?? [];
        list.push({ kind: step.kind, after: step.after });
        this.armed.set(step.hook, list);
        return; // nothing in the database changed
      }
      case 'reopen':
        describe(`close and reopen${this.blocked.size ? ` (cutting off ${[...this.blockedKeys()].join(', ')})` : ''}`);
        await this.reopen();
        await this.check(at);
        return;
    }
    await this.settle();
    await this.check(at);
  }

  async quiesce() {
    this.armed.clear();
    this.trace.push(`  end: faults disarmed; the clock moves past every hook timeout, then a minute at a time`);
    await this.advance(HOOK_TIMEOUT_MS + 1_000);
    let snap = await this.check('after disarming');
    for (let round = 0; !this.quiet(snap); round++) {
      if (round >= QUIET_ROUNDS) this.fail(`after ${QUIET_ROUNDS} more minutes`, ['the system never became quiet (work still due, objects in transit, or leases waiting with capacity free)'], snap);
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
  idSource = run.newId;
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
    idSource = undefined;
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
