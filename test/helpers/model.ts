/**
 * The parts of the model-based test that do not depend on the clock: the scenario and
 * step records and their arbitraries, the fault-injecting blueprint, the database
 * snapshot with its invariants (`checkSnapshot`), the reference model (`leaseDoom`,
 * `resourceDoom`, `quiet`, `checkEnd`) and the step interpreter. test/model.test.ts runs
 * them on a ManualClock with `runUntilIdle()`-style settling and explains the design;
 * test/model-real-clock.test.ts runs them on the system clock, as users run the broker.
 * Each supplies what time means to it: the subclass of `ModelHarness`.
 */
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { internals, type Broker } from '../../lib/broker/index.js';
import type { Blueprint } from '../../lib/blueprint/contract.js';
import { HOOKS, type HookName } from '../../lib/blueprint/timeouts.js';
import { RetryLater } from '../../lib/errors/retry-later.js';
import type { ObjectKind } from '../../lib/model/states.js';
import { admitted, allocationLimit, TransitionReplay } from './invariants.js';
import type { DatabaseOptions } from '../../lib/store/open.js';
import { createTestBroker, fakeBlueprint, type FakeBlueprint } from '../../lib/testing/index.js';
import { fromDb } from '../../lib/time.js';
import { testDatabase, tier } from './tier.js';

export const envInt = (name: string, fallback: number) => {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer (got ${raw})`);
  return n;
};

/** A fast-check seed from the environment: a 32-bit integer, may be negative. */
export const envSeed = (name: string): number | undefined => {
  const raw = process.env[name];
  if (!raw) return undefined;
  if (!/^-?\d+$/.test(raw.trim())) throw new Error(`${name} must be an integer (got ${raw})`);
  return Number(raw);
};

/** Workers of the model broker in most runs; a quarter of the runs use one worker (see Config.concurrency). */
export const CONCURRENCY = 4;

export type Hook = HookName;
/** `outage`: the real clock's harness only: the hook throws on every call for a while (see model-real-clock.test.ts). */
export type FaultKind = 'throw' | 'retry' | 'hang' | 'slow' | 'outage';
export type Step =
  | { do: 'acquire'; ttl: number | null; priority: number; owner?: string | null }
  | { do: 'release'; pick: number }
  | { do: 'releaseResource'; pick: number }
  | { do: 'reclaim'; pick: number }
  | { do: 'breakResource'; pick: number }
  | { do: 'advance'; ms: number }
  | { do: 'fault'; hook: Hook; kind: FaultKind; after: number | null }
  | { do: 'reopen' }
  | { do: 'drain' }
  | { do: 'resume' };
export interface Config {
  /** One lease per resource (fakeBlueprint's slot lock per resource). */
  exclusive: boolean;
  maxResources: number | null;
  /**
   * Workers of the model broker: CONCURRENCY, or 1. With one worker a run is a function of
   * its scenario (the replay test of model.test.ts proves it), so a failure
   * that shrinks to concurrency 1 replays exactly. Absent in scenarios printed before it
   * existed: CONCURRENCY.
   */
  concurrency?: number;
  /** Seeds the ids of this run's leases and resources (random-looking, the same on every replay). Absent: 0. */
  idSeed?: number;
  /** Pool policies (issue 15), each absent or off in scenarios printed before they existed. `limits.minIdle`: at most maxResources. */
  minIdle?: number;
  /** `limits.maxLeasesPerResourceLifetime`. */
  maxServed?: number | null;
  /** `limits.maxResourceAge`, in ms of the harness's clock. */
  maxAgeMs?: number | null;
  /** A broker quota on the owners `t1/*` (QUOTA_OWNER): acquire steps draw owners of two tenants, t1 and t2. */
  quota?: { maxLeases: number } | null;
  /**
   * The blueprint has no activateLease, releaseLease or destroyLease: leases take the shorter
   * paths (created active; released and destroyed in one statement). Faults armed for those
   * hooks never meet a call. Absent: every hook.
   */
  withoutLeaseHooks?: boolean;
}

/** The hooks a `withoutLeaseHooks` blueprint leaves out. */
export const LEASE_PHASE_HOOKS = ['activateLease', 'releaseLease', 'destroyLease'] as const;

/** The owner prefix the generated quota covers; `t2/...` owners are outside it. */
export const QUOTA_OWNER = 't1/*';
const inQuota = (owner: string | null | undefined) => owner?.startsWith('t1/') ?? false;
/** Lease statuses a quota counts: the leases that hold a resource. */
const HOLDING = new Set(['acquired', 'active', 'released', 'broken']);
/** The reasons a resource releases itself for recycling or a drain (retiredBecause in lib/engine/retirement.ts). */
const RETIRED = /^(recycled: |blueprint \S+ is draining$|served its lease \(destroyOnRelease\)$)/;
export interface Scenario {
  config: Config;
  steps: Array<Step | null>;
}

/** Hooks of a resource's own pass (the in-flight work item is the resource); every other hook runs in a lease's pass. */
export const RESOURCE_HOOKS: ReadonlySet<Hook> = new Set(['allocateResource', 'activateResource', 'destroyResource']);
/** A failure of these breaks the lease (allocator hooks, activateLease). */
export const LEASE_FATAL: ReadonlySet<Hook> = new Set(['canEverAllocate', 'canAllocate', 'canAcquireLease', 'acquireLease', 'activateLease']);
/** A failure of these breaks the resource being built. releaseLease failures are logged and ignored; destroy hooks are retried. */
export const RESOURCE_FATAL: ReadonlySet<Hook> = new Set(['allocateResource', 'activateResource']);

/** The durations a scenario's steps draw from, in ms of the clock the harness runs on. */
export interface StepTimings {
  /** Lease ttls besides none (three times in four): one that expires within a few steps, one that rarely does. */
  ttl: readonly number[];
  /** How far an `advance` step moves time. */
  advance: readonly number[];
  /** The delay of a `RetryLater` that names one (the other half leave it to the broker's backoff). */
  retryAfter: number;
  /** The fault kinds to draw from. @defaultValue throw, retry, hang, slow */
  faultKinds?: readonly FaultKind[];
  /** `limits.maxResourceAge` values to draw from (in a few runs): a few steps' worth of this clock. */
  maxAge: readonly number[];
}

export interface HarnessOptions {
  concurrency: number;
  /** Every hook of the model's blueprint times out after this much broker-clock time. */
  hookTimeoutMs: number;
  /** Print the trace to stderr as the run goes. */
  verbose: boolean;
  /**
   * Replay every log row at each check instead of only the new ones: on a broker whose
   * workers run on their own, a Postgres log row can commit after one with a higher id
   * was read, and would be skipped.
   */
  replayEveryCheck?: boolean;
}

const pick = fc.nat({ max: 1000 });
/** The steps, with the durations of one clock (see StepTimings). */
export const stepArbOf = (t: StepTimings): fc.Arbitrary<Step> => fc.oneof(
  {
    weight: 60,
    arbitrary: fc.record({ do: fc.constant('acquire' as const), ttl: fc.constantFrom(null, null, null, ...t.ttl), priority: fc.constantFrom(0, 0, 1), owner: fc.constantFrom('t1/a', 't1/b', 't2/a') }),
  },
  { weight: 30, arbitrary: fc.record({ do: fc.constant('release' as const), pick }) },
  { weight: 12, arbitrary: fc.record({ do: fc.constant('releaseResource' as const), pick }) },
  { weight: 10, arbitrary: fc.record({ do: fc.constant('reclaim' as const), pick }) },
  { weight: 8, arbitrary: fc.record({ do: fc.constant('breakResource' as const), pick }) },
  { weight: 40, arbitrary: fc.record({ do: fc.constant('advance' as const), ms: fc.constantFrom(...t.advance) }) },
  {
    weight: 50,
    arbitrary: fc.record({
      do: fc.constant('fault' as const),
      hook: fc.constantFrom(...HOOKS),
      kind: fc.constantFrom<FaultKind>(...(t.faultKinds ?? ['throw', 'retry', 'hang', 'slow'])),
      after: fc.constantFrom(null, t.retryAfter),
    }),
  },
  // ~17% of the runs have at least one; only those pay for a durable database (a dataDir copy, slower opens).
  { weight: 1, arbitrary: fc.constant({ do: 'reopen' as const }) },
  // About one run in three drains; resumes are likelier, so most drains end before the run does.
  { weight: 2, arbitrary: fc.constant({ do: 'drain' as const }) },
  { weight: 4, arbitrary: fc.constant({ do: 'resume' as const }) },
);
export const scenarioOf = (steps: number, timings: StepTimings): fc.Arbitrary<Scenario> => fc.record({
  config: fc.record({
    exclusive: fc.boolean(),
    maxResources: fc.constantFrom(null, 1, 2, 3),
    // Cross-shrinking tries one worker first: a failure that survives it replays deterministically.
    concurrency: fc.oneof({ withCrossShrink: true }, { weight: 1, arbitrary: fc.constant(1) }, { weight: 3, arbitrary: fc.constant(CONCURRENCY) }),
    idSeed: fc.nat({ max: 0xffff }),
    // Pool policies: off in most runs, so the coverage of the rest stays. minIdle is capped at maxResources below.
    minIdle: fc.constantFrom(0, 0, 0, 0, 1, 2),
    maxServed: fc.constantFrom(null, null, null, null, 1, 2, 3),
    maxAgeMs: fc.constantFrom(null, null, null, null, ...timings.maxAge),
    quota: fc.constantFrom(null, null, null, { maxLeases: 1 }, { maxLeases: 2 }, { maxLeases: 3 }),
    withoutLeaseHooks: fc.constantFrom(false, false, true),
  }).map((c) => ({ ...c, minIdle: c.maxResources === null ? c.minIdle : Math.min(c.minIdle, c.maxResources) })),
  steps: fc.array(fc.option(stepArbOf(timings), { nil: null, freq: 1000 }), { minLength: steps, maxLength: steps }),
});

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
/** A copy of a migrated embedded dataDir (made once per test file): a durable database for a run that reopens. */
export async function freshDataDir(): Promise<string> {
  const from = await dataDirTemplate();
  const dir = mkdtempSync(join(tmpdir(), 'slipway-model-run-'));
  cpSync(from, dir, { recursive: true });
  return dir;
}
/** Removes the template dataDir (`afterAll(removeDataDirs)` in a file that uses `freshDataDir`); each run removes its own copy. */
export function removeDataDirs() {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  template = undefined;
}

// --- the harness -------------------------------------------------------------------------

export interface FaultRecord {
  hook: Hook;
  kind: FaultKind;
  lease: string | null;
  resource: string | null;
  /** The work item whose pass made the call. */
  passKey: string;
  /** `failed`: the hook failed (a throw, or a hang that reached its timeout); `interrupted`: the broker closed while it was blocked. */
  outcome: 'blocked' | 'failed' | 'retried' | 'ok' | 'interrupted';
  /** The harness's count (`seq`) when the hook was called. */
  seq: number;
  /** The count when a hang reached its timeout (the real clock's harness sets it). */
  failedSeq?: number;
}
export interface Blocked {
  record: FaultRecord;
  /** Clock millis when a hang times out or a slow hook settles. */
  until: number;
}

export interface LeaseModel {
  id: string;
  expiresAt: number | null;
  /** The test wrote a release command for it. */
  released: boolean;
}
export interface ResourceModel {
  id: string;
  /** The test wrote a release or break command for it. */
  released: boolean;
  broken: boolean;
}

export interface Snapshot {
  now: number;
  /** The harness's fault count when the snapshot began. */
  seq: number;
  leases: Array<{ id: string; status: string; resourceId: string | null; expiresAt: number | null; brokenReason: string | null; owner: string | null }>;
  /** `statusChangedAt`: of an active resource, its activation (what maxResourceAge counts from). */
  resources: Array<{ id: string; status: string; blueprint: string; leaseCount: number; leasesServed: number; statusChangedAt: number }>;
  /** The model blueprint's drain state (blueprint_states). */
  draining: boolean;
  /** Until when the model blueprint backs off after failed builds (blueprint_failures.retry_at), or null. */
  backoffUntil: number | null;
  work: Map<string, { runAt: number | null; claimedBy: string | null }>;
  slots: Array<{ key: string; holderKind: string; holderId: string }>;
  commands: Array<{ id: number; targetKind: string; targetId: string; command: string; author: string | null; consumed: boolean; outcome: string | null }>;
  logs: Array<{ id: number; type: string; lease: string | null; resource: string | null; data: Record<string, any>; at: number }>;
  /** Work items a pass runs for (the engine's, or on the real clock the rows claimed in the snapshot). */
  inflight: Set<string>;
}

/** The log rows the checks replay: status changes, and what the pool-policy invariants need. */
const LOG_TYPES = ['status.changed', 'resource.allocating', 'lease.acquired', 'resource.released', 'blueprint.draining', 'blueprint.resumed'] as const;

export const ms = (v: unknown) => fromDb(v as Date | string | null)?.toMillis() ?? null;
/**
 * The allocation-limit replay reads log rows in id order. On embedded that is commit order
 * (one unit at a time). On Postgres a unit that takes a resource out of `active` can log
 * just before an allocation yet commit after the allocation counted: there the limit is
 * taken from the largest active count over this many preceding log rows.
 */
export const ACTIVE_WINDOW = tier === 'postgres' ? 40 : 0;

export abstract class ModelHarness {
  broker!: Broker;
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
  /** Counts fault hits and hook timeouts, and is read as each snapshot starts: what the harness knew before that snapshot. */
  protected seq = 0;
  private readonly replay = new TransitionReplay();
  private readonly activeHistory: number[] = [];
  last: Snapshot | undefined;
  /** Resource id -> its place in allocation order (from the resource.allocating logs): how steps pick a resource, independent of ids. */
  private readonly allocationOrder = new Map<string, number>();
  /** Every status change, in log order (`from` null: a resource starting to allocate): what a replay must repeat. */
  readonly transitions: Array<{ kind: string; id: string; from: string | null; to: string; resource: string | null }> = [];
  readonly concurrency: number;
  /** While set, a hook call meets no armed fault (it stays armed for the next call). */
  protected faultsPaused = false;
  // Pool policies, from the log replay (cleared with it).
  /** Resource id -> the leases that took it (`lease.acquired` rows), in log order. */
  private readonly acquiredOn = new Map<string, string[]>();
  /** Resource id -> the clock time of its pending -> active change. */
  private readonly activatedAt = new Map<string, number>();
  /** Resource id -> the retirement reason its own release logged (recycling, a drain). */
  private readonly retiredFor = new Map<string, string>();
  /** The `blueprint.draining` row in force in log order (none since, or a `blueprint.resumed` after it), or null. */
  private drainRow: { id: number } | null = null;
  private drainsLogged = 0;
  /** Log id -> the check that first read it; kept across replays (see the drain invariant). */
  private readonly firstSeen = new Map<number, number>();
  private checks = 0;

  constructor(
    readonly config: Config,
    readonly options: HarnessOptions,
  ) {
    this.concurrency = options.concurrency;
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
      limits: {
        ...(config.maxResources ? { maxResources: config.maxResources } : {}),
        ...(config.minIdle ? { minIdle: config.minIdle } : {}),
        ...(config.maxServed ? { maxLeasesPerResourceLifetime: config.maxServed } : {}),
        ...(config.maxAgeMs ? { maxResourceAge: { milliseconds: config.maxAgeMs } } : {}),
      },
      timeouts: { default: { milliseconds: options.hookTimeoutMs } },
      gates,
      without: config.withoutLeaseHooks ? [...LEASE_PHASE_HOOKS] : [],
    });
    const impl = this.fake.implementation as unknown as Record<string, unknown>;
    const wrapped: Record<string, unknown> = { ...impl };
    for (const hook of HOOKS) {
      const original = impl[hook] as ((ctx: any) => unknown) | undefined;
      if (!original) continue;
      wrapped[hook] = (ctx: any) => {
        const fault = this.faultsPaused ? undefined : this.nextFault(hook, ctx);
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
      seq: ++this.seq,
    };
    this.faults.push(record);
    this.trace.push(`      fault ${fault.kind} hit ${hook} of ${record.passKey}${record.resource && !record.passKey.endsWith(record.resource) ? ` (on ${record.resource})` : ''}`);
    switch (fault.kind) {
      case 'throw':
      case 'outage':
        record.outcome = 'failed';
        return () => Promise.reject(new Error(`model: injected failure of ${hook}`));
      case 'retry':
        record.outcome = 'retried';
        return () => Promise.reject(new RetryLater(`model: injected RetryLater in ${hook}`, fault.after === null ? undefined : { milliseconds: fault.after }));
      case 'hang':
        return this.hang(record, ctx);
      case 'slow':
        return this.slow(record);
    }
  }

  /** The fault this call of `hook` meets: the next one armed for it. */
  protected nextFault(hook: Hook, _ctx: any): { kind: FaultKind; after: number | null } | undefined {
    return this.armed.get(hook)?.shift();
  }

  /** A hang: adds the record to `blocked`; returns a gate that never settles (the hook's timeout, or a close, ends the call). */
  protected abstract hang(record: FaultRecord, ctx: any): () => Promise<void>;
  /** A slow hook: adds the record to `blocked`; returns a gate that settles by itself before the hook's timeout. */
  protected abstract slow(record: FaultRecord): () => Promise<void>;
  /** Clock millis now (the broker's clock). */
  protected abstract now(): number;
  /** Millis since the run began, for the trace. */
  protected abstract elapsed(): number;
  /** The expiry of a lease just requested with `ttl`, at `requestedAt` or after. */
  protected abstract expiryOf(id: string, requestedAt: number, ttl: number): Promise<number>;
  /** Work items a pass is running for, read just before a snapshot; null: the snapshot's claimed rows say it. */
  protected abstract inflightNow(): Set<string> | null;
  /** The time a snapshot is checked at, given the clock before its transaction. */
  protected abstract snapshotNow(before: number): number;
  /** Lets the workers run until no work is due and every pass still running is blocked on purpose. */
  abstract settle(): Promise<void>;
  /** Lets `by` ms of clock time pass. */
  abstract advance(by: number): Promise<void>;
  /** Closes the broker (hooks in flight are cut off) and opens a new one on the same data. */
  abstract reopen(): Promise<void>;
  /** The end of a run: faults disarmed, time passes until the system is quiet, then `checkEnd`. */
  abstract quiesce(): Promise<void>;
  abstract open(): Promise<void>;

  /**
   * Whether a snapshot must show the consequence of a fault that failed: always when every
   * check follows a settle. On the real clock, only a fault that failed before the
   * snapshot began and whose pass had ended by then.
   */
  protected faultSettled(_fault: FaultRecord, _snap: Snapshot): boolean {
    return true;
  }

  /** What the scenario asks of `createBroker` besides the blueprint and the clock: its quota. */
  protected brokerOptions(): { quotas?: Array<{ owner: string; maxLeases: number }> } {
    return this.config.quota ? { quotas: [{ owner: QUOTA_OWNER, maxLeases: this.config.quota.maxLeases }] } : {};
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

  protected get engine() {
    return internals.get(this.broker)!.engine!;
  }

  protected blockedKeys(): Set<string> {
    return new Set([...this.blocked].map((b) => b.record.passKey));
  }

  // --- the model ---------------------------------------------------------------------------

  /** Leases a fatal fault hit; with `settledIn`, only those whose consequence that snapshot must show. */
  fatalLeases(settledIn?: Snapshot): Set<string> {
    return new Set(this.faults.filter((f) => f.outcome === 'failed' && LEASE_FATAL.has(f.hook) && f.lease && (!settledIn || this.faultSettled(f, settledIn))).map((f) => f.lease!));
  }

  fatalResources(settledIn?: Snapshot): Set<string> {
    return new Set(this.faults.filter((f) => f.outcome === 'failed' && RESOURCE_FATAL.has(f.hook) && f.resource && (!settledIn || this.faultSettled(f, settledIn))).map((f) => f.resource!));
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
    // Recycling or a drain: the resource released itself with the reason (policyLog checks that the reason held).
    const retired = this.retiredFor.get(id);
    if (retired) return retired;
    return null;
  }

  // --- pool policies (issue 15) ------------------------------------------------------------

  /** Whether a resource takes no new lease now: its blueprint drains, or it is past a recycling limit. */
  retiredNow(r: Snapshot['resources'][number], snap: Snapshot): boolean {
    const { maxServed, maxAgeMs } = this.config;
    if (snap.draining) return true;
    if (maxServed && r.leasesServed >= maxServed) return true;
    return !!maxAgeMs && r.status === 'active' && r.statusChangedAt + maxAgeMs <= snap.now;
  }

  /** How many leases the quota counts now (those of its owners that hold a resource). */
  quotaHeld(snap: Snapshot): number {
    return snap.leases.filter((l) => inQuota(l.owner) && HOLDING.has(l.status)).length;
  }

  /**
   * The log rows of the pool policies, in id order:
   * - `lease.acquired`: no resource takes more than maxLeasesPerResourceLifetime leases, or
   *   one after its activation + maxResourceAge, or one while its blueprint drains;
   * - `resource.released` with a retirement reason: the reason held when it was logged.
   */
  private policyLog(log: Snapshot['logs'][number]): string[] {
    const problems: string[] = [];
    const { maxServed, maxAgeMs } = this.config;
    switch (log.type) {
      case 'lease.acquired': {
        const id = log.resource!;
        const takers = this.acquiredOn.get(id) ?? [];
        takers.push(log.lease!);
        this.acquiredOn.set(id, takers);
        if (maxServed && takers.length > maxServed) problems.push(`resource ${id} took lease number ${takers.length} (${log.lease}), maxLeasesPerResourceLifetime is ${maxServed}: ${takers.join(', ')} [log ${log.id}]`);
        const activated = this.activatedAt.get(id);
        if (maxAgeMs && activated !== undefined && log.at >= activated + maxAgeMs) {
          problems.push(`lease ${log.lease} acquired resource ${id} ${log.at - activated} ms after its activation, maxResourceAge is ${maxAgeMs} ms [log ${log.id}]`);
        }
        // On one database session (embedded), or when no worker runs while the test drains
        // (the manual clock: the step runs after a settle), log id order is commit order. On
        // Postgres with workers on their own (the real clock), a take whose statement began
        // before the drain committed may log after it, and is ordered before it (see
        // lib/store/sql/pool-policies.ts): there a lease.acquired row counts only when it
        // was first read by a later check than the drain row, which had committed then.
        const strict = tier === 'embedded' || !this.options.replayEveryCheck;
        if (this.drainRow && (strict || this.firstSeen.get(this.drainRow.id)! < this.firstSeen.get(log.id)!)) {
          problems.push(`lease ${log.lease} acquired resource ${id} while blueprint ${this.blueprint.name} drains (drained at log ${this.drainRow.id}) [log ${log.id}]`);
        }
        break;
      }
      case 'blueprint.draining':
        this.drainRow = { id: log.id };
        this.drainsLogged++;
        break;
      case 'blueprint.resumed':
        this.drainRow = null;
        break;
      case 'resource.released': {
        const reason = String(log.data.reason ?? '');
        if (log.data.author !== null || !RETIRED.test(reason)) break;
        const id = log.resource!;
        this.retiredFor.set(id, reason);
        const served = this.acquiredOn.get(id)?.length ?? 0;
        const activated = this.activatedAt.get(id);
        // A drain reason only needs some drain before it: a worker that read the drain may log after a resume that raced it.
        if (reason.includes('draining') && this.drainsLogged === 0) problems.push(`resource ${id} released as draining, but no drain was logged before [log ${log.id}]`);
        if (reason.startsWith('recycled: served') && !(maxServed && served >= maxServed)) problems.push(`resource ${id} recycled (${reason}) after ${served} lease(s), maxLeasesPerResourceLifetime is ${maxServed ?? 'unset'} [log ${log.id}]`);
        if (reason.startsWith('recycled: active') && !(maxAgeMs && activated !== undefined && log.at >= activated + maxAgeMs)) {
          problems.push(`resource ${id} recycled (${reason}) at ${activated === undefined ? 'no activation' : `${log.at - activated} ms after activation`}, maxResourceAge is ${maxAgeMs ?? 'unset'} [log ${log.id}]`);
        }
        if (reason.includes('destroyOnRelease')) problems.push(`resource ${id} released for destroyOnRelease, which the model never sets [log ${log.id}]`);
        break;
      }
    }
    return problems;
  }

  /** The pool-policy invariants of one snapshot: the quota, and leases served per resource (counted and logged). */
  private policySnapshot(snap: Snapshot): string[] {
    const problems: string[] = [];
    const { maxServed, quota } = this.config;
    if (quota) {
      const held = this.quotaHeld(snap);
      if (held > quota.maxLeases) {
        const over = snap.leases.filter((l) => inQuota(l.owner) && HOLDING.has(l.status));
        problems.push(`quota ${QUOTA_OWNER} of ${quota.maxLeases} exceeded: ${held} leases hold a resource: ${over.map((l) => `${l.id} ${l.status} (${l.owner})`).join(', ')}`);
      }
    }
    for (const r of snap.resources) {
      const logged = this.acquiredOn.get(r.id)?.length ?? 0;
      if (maxServed && r.leasesServed > maxServed) problems.push(`resource ${r.id} has served ${r.leasesServed} leases, maxLeasesPerResourceLifetime is ${maxServed}`);
      if (r.leasesServed !== logged) problems.push(`resource ${r.id} keeps leases_served ${r.leasesServed} but ${logged} lease.acquired rows name it`);
    }
    return problems;
  }

  /**
   * Whether a pending lease may still wait at quiescence: its blueprint drains (the only one
   * of its type), the quota it falls under is full, or the pool is full (poolFull).
   */
  mayWait(l: Snapshot['leases'][number], snap: Snapshot): boolean {
    if (snap.draining) return true;
    if (this.config.quota && inQuota(l.owner) && this.quotaHeld(snap) >= this.config.quota.maxLeases) return true;
    return this.poolFull(snap);
  }

  /**
   * The warm pool at quiescence: null when it holds, else what is missing. Idle resources
   * (active, no lease, not retired: a retired one is released soon) must number at least
   * min(minIdle, maxResources - resources holding leases): minIdle never pushes the pool
   * past maxResources, and a resource a lease holds is not spare. Not checked while the
   * blueprint drains (it builds nothing) or backs off after failed builds (blueprint_failures'
   * retry_at ahead of the clock: the top-up waits for it, as every allocation does; the
   * faults the model injects make that happen).
   */
  warmShortfall(snap: Snapshot): string | null {
    const { minIdle, maxResources } = this.config;
    if (!minIdle || snap.draining || (snap.backoffUntil !== null && snap.backoffUntil > snap.now)) return null;
    const live = snap.resources.filter((r) => r.status !== 'destroyed');
    const idle = live.filter((r) => r.status === 'active' && r.leaseCount === 0 && !this.retiredNow(r, snap)).length;
    const held = live.filter((r) => r.leaseCount > 0).length;
    const target = Math.min(minIdle, maxResources === null ? minIdle : maxResources - held);
    return idle >= target ? null : `warm pool short: ${idle} idle resource(s), minIdle ${minIdle}, target ${target} (maxResources ${maxResources ?? 'none'}, ${held} held by leases)`;
  }

  // --- reading and checking the database -------------------------------------------------------

  async snapshot(): Promise<Snapshot> {
    const { db, store } = internals.get(this.broker)!;
    const s = store.s;
    const running = this.inflightNow();
    const before = this.now();
    return db.transaction(async (tx) => {
      await tx.execute('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      // Read before the first query takes the snapshot: every fault counted here came before it.
      const seq = this.seq;
      const leases = await tx.query(`SELECT id, status, resource_id, expires_at, broken_reason, owner FROM ${s}.leases ORDER BY seq`);
      const resources = await tx.query(`SELECT id, status, blueprint, lease_count, leases_served, status_changed_at FROM ${s}.resources ORDER BY created_at, id`);
      const states = await tx.query(`SELECT draining FROM ${s}.blueprint_states WHERE blueprint = $1`, [this.blueprint.name]);
      const failures = await tx.query(`SELECT retry_at FROM ${s}.blueprint_failures WHERE blueprint = $1`, [this.blueprint.name]);
      const work = await tx.query(`SELECT object_kind, object_id, run_at, claimed_by FROM ${s}.work_items`);
      const slots = await tx.query(`SELECT key, holder_kind, holder_id FROM ${s}.slot_locks`);
      const commands = await tx.query(`SELECT id, target_kind, target_id, command, author, consumed_at, outcome FROM ${s}.commands ORDER BY id`);
      const logs = await tx.query(
        `SELECT id, type, lease_id, resource_id, data, at FROM ${s}.logs WHERE id > $1 AND type IN (${LOG_TYPES.map((t) => `'${t}'`).join(', ')}) ORDER BY id`,
        [this.lastLogId],
      );
      return {
        now: this.snapshotNow(before),
        seq,
        inflight: running ?? new Set(work.filter((r) => r.claimed_by).map((r) => `${r.object_kind}:${r.object_id}`)),
        leases: leases.map((r) => ({ id: r.id, status: r.status, resourceId: r.resource_id ?? null, expiresAt: ms(r.expires_at), brokenReason: r.broken_reason ?? null, owner: r.owner ?? null })),
        resources: resources.map((r) => ({ id: r.id, status: r.status, blueprint: r.blueprint, leaseCount: Number(r.lease_count), leasesServed: Number(r.leases_served), statusChangedAt: ms(r.status_changed_at)! })),
        draining: Boolean(states[0]?.draining),
        backoffUntil: failures[0] ? ms(failures[0].retry_at) : null,
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
        logs: logs.map((r) => ({ id: Number(r.id), type: r.type, lease: r.lease_id ?? null, resource: r.resource_id ?? null, data: r.data ?? {}, at: ms(r.at)! })),
      };
    });
  }

  /** Drops what the log replay learned: the next snapshot replays every log row from the first. */
  private forgetReplay() {
    this.lastLogId = 0;
    this.replay.clear();
    this.activeHistory.length = 0;
    this.allocationOrder.clear();
    this.transitions.length = 0;
    this.acquiredOn.clear();
    this.activatedAt.clear();
    this.retiredFor.clear();
    this.drainRow = null;
    this.drainsLogged = 0;
  }

  /** Reads the database and checks every invariant; records resources the model has not seen yet. */
  checkMs = 0;
  async check(phase: string): Promise<Snapshot> {
    const t = Date.now();
    if (this.options.replayEveryCheck) this.forgetReplay();
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
    this.checks++;
    for (const log of snap.logs) {
      if (!this.firstSeen.has(log.id)) this.firstSeen.set(log.id, this.checks);
      if (log.type !== 'status.changed' && log.type !== 'resource.allocating') {
        problems.push(...this.policyLog(log));
        this.lastLogId = Math.max(this.lastLogId, log.id);
        continue;
      }
      if (log.type === 'status.changed' && log.data.kind === 'resource' && log.data.from === 'pending' && log.data.to === 'active') this.activatedAt.set(log.resource!, log.at);
      if (log.type === 'resource.allocating') {
        const id = log.resource!;
        const pending = this.replay.count('resource', 'pending');
        const window = this.activeHistory.slice(Math.max(0, this.activeHistory.length - ACTIVE_WINDOW));
        const active = Math.max(this.replay.count('resource', 'active'), ...window);
        if (!admitted(pending, active)) problems.push(`allocation limit exceeded: ${id} started while ${pending} resource(s) were allocating and ${active} active (limit ${allocationLimit(active)}) [log ${log.id}]`);
        const nonDestroyed = this.replay.entries('resource').filter(([, status]) => status !== 'destroyed').length + 1;
        if (config.maxResources !== null && nonDestroyed > config.maxResources) problems.push(`maxResources ${config.maxResources} exceeded: ${id} is resource number ${nonDestroyed} not destroyed [log ${log.id}]`);
        this.allocationOrder.set(id, this.allocationOrder.size);
        this.transitions.push({ kind: 'resource', id, from: null, to: 'pending', resource: id });
      } else {
        const kind = log.data.kind as ObjectKind;
        const { from, to } = log.data as { from: string; to: string };
        this.transitions.push({ kind, id: (kind === 'lease' ? log.lease : log.resource)!, from, to, resource: log.resource });
      }
      problems.push(...this.replay.apply(log));
      this.activeHistory.push(this.replay.count('resource', 'active'));
      this.lastLogId = Math.max(this.lastLogId, log.id);
    }
    for (const l of snap.leases) {
      const replayed = this.replay.status(`lease:${l.id}`) ?? 'pending';
      if (replayed !== l.status) problems.push(`lease ${l.id} is ${l.status} but its logged changes end at ${replayed}`);
    }
    for (const r of snap.resources) {
      const replayed = this.replay.status(`resource:${r.id}`);
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

    // 2b. Pool policies at this instant: the quota, and no resource serving past maxLeasesPerResourceLifetime.
    problems.push(...this.policySnapshot(snap));

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
      const visited = this.replay.visited(`lease:${l.id}`) ?? new Set(['pending']);
      const doom = this.leaseDoom(l.id, snap);
      if (l.status === 'destroyed' && doom === null) problems.push(`lease ${l.id} was destroyed without a cause (not released, not expired, no fatal fault, not told by its resource)`);
      if (visited.has('broken')) {
        const told = snap.commands.some((c) => c.targetKind === 'lease' && c.targetId === l.id && c.command === 'break' && c.author?.startsWith('resource:'));
        if (!this.fatalLeases().has(l.id) && !told) problems.push(`lease ${l.id} broke without a fatal fault or a break from its resource (${l.brokenReason})`);
      }
      if (this.fatalLeases(snap).has(l.id) && !visited.has('broken')) {
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
      const visited = this.replay.visited(`resource:${r.id}`) ?? new Set<string>();
      if (r.status === 'destroyed' && this.resourceDoom(r.id, snap) === null) problems.push(`resource ${r.id} was destroyed without a cause`);
      if (visited.has('broken') && !this.fatalResources().has(r.id) && !this.resources.get(r.id)?.broken) problems.push(`resource ${r.id} broke without a fatal fault or a break command`);
      if (this.fatalResources(snap).has(r.id) && !visited.has('broken')) problems.push(`resource ${r.id} met a fatal fault but never went to broken (${[...visited].join(', ')})`);
    }

    // 7. The library's own writes never failed.
    const errors = [...this.pastErrors, ...(internals.get(this.broker)?.engine?.errors ?? [])];
    if (errors.length > 0) problems.push(`engine errors: ${errors.map((e) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e))).join(' | ')}`);
    return problems;
  }

  /** Quiet: nothing running, nothing due, nothing on its way; waiting leases only where they may wait (mayWait); the warm pool filled. */
  quiet(snap: Snapshot): boolean {
    if (this.blocked.size > 0 || snap.inflight.size > 0) return false;
    if ([...snap.work.values()].some((w) => w.runAt !== null && w.runAt <= snap.now)) return false;
    if (snap.commands.some((c) => !c.consumed)) return false;
    if (snap.resources.some((r) => r.status !== 'active' && r.status !== 'destroyed')) return false;
    if (snap.leases.some((l) => l.status !== 'active' && l.status !== 'destroyed' && l.status !== 'pending')) return false;
    if (snap.leases.some((l) => l.status === 'pending' && !this.mayWait(l, snap))) return false;
    return this.warmShortfall(snap) === null;
  }

  /**
   * No resource can take a lease and none can be built: maxResources resources not
   * destroyed, each active and retired (it keeps its leases until they end) or, on an
   * exclusive blueprint, held by a lease. Without recycling this is the exclusive pool
   * with maxResources leases active; recycling adds the pool full of retired resources
   * whose leases have not ended.
   */
  poolFull(snap: Snapshot): boolean {
    const { exclusive, maxResources } = this.config;
    if (maxResources === null) return false;
    const live = snap.resources.filter((r) => r.status !== 'destroyed');
    return live.length >= maxResources && live.every((r) => r.status === 'active' && (this.retiredNow(r, snap) || (exclusive && r.leaseCount > 0)));
  }

  /** The model's end state: each lease destroyed (with its cause) or active (or waiting where it may: mayWait); each resource destroyed or active; the warm pool filled. */
  checkEnd(snap: Snapshot) {
    const problems: string[] = [];
    for (const l of snap.leases) {
      const doom = this.leaseDoom(l.id, snap);
      if (doom !== null && l.status !== 'destroyed') problems.push(`lease ${l.id} should be destroyed (${doom}) but is ${l.status}`);
      if (doom === null && l.status !== 'active' && !(l.status === 'pending' && this.mayWait(l, snap))) problems.push(`lease ${l.id} should be active but is ${l.status}`);
      const visited = this.replay.visited(`lease:${l.id}`);
      if (this.fatalLeases(snap).has(l.id) && !visited?.has('broken')) problems.push(`lease ${l.id} met a fatal fault but never went to broken`);
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
    const short = this.warmShortfall(snap);
    if (short) problems.push(short);
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
      this.trace.push(`  ${index}: ${what} @${this.elapsed()}`);
      if (this.options.verbose) process.stderr.write(`${this.trace[this.trace.length - 1]}\n`);
    };
    switch (step.do) {
      case 'acquire': {
        const requestedAt = this.now();
        const handle = await this.broker.requestLease({ type: 'fake', priority: step.priority, ...(step.ttl ? { ttl: { milliseconds: step.ttl } } : {}), ...(step.owner ? { owner: step.owner } : {}) });
        const expiresAt = step.ttl ? await this.expiryOf(handle.id, requestedAt, step.ttl) : null;
        this.leases.set(handle.id, { id: handle.id, expiresAt, released: false });
        describe(`acquire ${handle.id}${step.ttl ? ` ttl ${step.ttl / 1000}s` : ''}${step.priority ? ' priority 1' : ''}${step.owner ? ` for ${step.owner}` : ''}`);
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
      case 'drain':
        describe(`drain blueprint ${this.blueprint.name}`);
        await this.broker.drainBlueprint(this.blueprint.name, { author: 'model' });
        break;
      case 'resume':
        describe(`resume blueprint ${this.blueprint.name}`);
        await this.broker.resumeBlueprint(this.blueprint.name, { author: 'model' });
        break;
      case 'reopen':
        describe(`close and reopen${this.blocked.size ? ` (cutting off ${[...this.blockedKeys()].join(', ')})` : ''}`);
        await this.reopen();
        await this.check(at);
        return;
    }
    await this.settle();
    await this.check(at);
  }
}
