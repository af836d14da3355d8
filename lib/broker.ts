import { isPlainObject } from './values.js';
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { Duration, type DateTime } from 'luxon';
import { defineBlueprintCheck } from './blueprint/registry.js';
import type { Blueprint } from './blueprint/contract.js';
import { BROKER_EVENTS, BrokerEventBus, type BrokerEvents } from './broker-events.js';
import { systemClock, type Clock } from './clock.js';
import { crashPoint } from './engine/crash-points.js';
import { acquireAtOnce } from './engine/allocator.js';
import { Engine } from './engine/engine.js';
import { baseContext, leaseView, resourceView } from './engine/hooks.js';
import { silentLogger, type HookFailure, type Logger, type Runtime } from './engine/runtime.js';
import { AbortError } from './errors/abort-error.js';
import { BrokerClosedError } from './errors/broker-closed-error.js';
import { LeaseBrokenError } from './errors/lease-broken-error.js';
import { LeaseTimeoutError } from './errors/lease-timeout-error.js';
import { NotFoundError } from './errors/not-found-error.js';
import { UnknownTypeError } from './errors/unknown-type-error.js';
import { SlipwayError } from './errors/slipway-error.js';
import { ValidationError } from './errors/validation-error.js';
import { leaseSignal } from './lease-signal.js';
import { renderLog, type LogEntry } from './logs/log-types.js';
import { checkCommandOptions, checkFilter, checkOptions, checkSubscription, checkText, optionalBoolean, optionalSignal } from './model/call-arguments.js';
import type { Lease, LeaseAttributesOf, LeaseHandle, LeaseOf, LeaseRecord, NoAttributes, ResourceAttributesOf, ResourceRecord, TypedLeaseSpec } from './model/lease.js';
import { normalizeSpec, type JsonObject, type LeaseSpec, type NormalizedSpec } from './model/spec.js';
import { LEASE_STATE_FLAGS, LEASE_STATUSES, RESOURCE_STATE_FLAGS, RESOURCE_STATUSES, type LeaseStatus, type ResourceStatus } from './model/states.js';
import type { Db } from './store/db.js';
import { collectGarbage, type GcResult } from './store/gc.js';
import { channelFor, Listener } from './store/notifier.js';
import { checkDatabaseOptions, listenConnection, openDatabase, type DatabaseOptions } from './store/open.js';
import { mapLease, mapResource, Store, type LeaseRow, type LeaseWithResource, type NewLease, type ResourceRow, type StatusEvent, type Unit } from './store/store.js';
import { CommitOutcomeUnknownError } from './store/db.js';
import { fromDb, humanDuration, parseDuration, type DurationInput } from './time.js';

export interface BrokerOptions {
  /** @defaultValue `{ embedded: true }`: PGlite in memory */
  database?: DatabaseOptions;
  blueprints?: Blueprint<any, any, any>[];
  /** Workers in this process, or `false` for a broker that only writes requests and commands. @defaultValue `{ concurrency: 4 }` */
  workers?: { concurrency?: number } | false;
  /** @defaultValue the system clock */
  clock?: Clock;
  /** A pino-compatible logger. @defaultValue silent */
  logger?: Logger;
  /** How long `close()` waits for hooks in flight. @defaultValue 10 seconds */
  closeGrace?: DurationInput;
  /** How long a claim on a work item lives without a heartbeat. @defaultValue 30 seconds */
  claimTtl?: DurationInput;
  /** The backstop re-read of the database for runnable work. @defaultValue 2 seconds */
  sweepInterval?: DurationInput;
  /** How often a waiting lease looks again even when nothing woke it (one log row, its count bumped). @defaultValue 30 seconds */
  waitRecheck?: DurationInput;
  /**
   * Capped exponential backoff for every failure that is tried again: failed builds (per
   * blueprint and per lease), failing destroy hooks, slot-lock conflicts, and RetryLater
   * without a delay. @defaultValue 1 second to 5 minutes
   */
  backoff?: { initial?: DurationInput; max?: DurationInput };
  /**
   * How many allocations a lease may see fail in a row (the resource built for it broke
   * before serving it, or a blueprint's policy function threw) before it breaks, with
   * the last error as its reason. Between failures it backs off. @defaultValue 5
   */
  maxAllocationFailures?: number;
  /** How long history is kept: destroyed leases and resources with their logs, and consumed commands. @defaultValue 7 days */
  retention?: DurationInput;
  /** How often this broker's workers collect history older than `retention`; `false` never (call `gc()` yourself). @defaultValue 10 minutes */
  gcInterval?: DurationInput | false;
}

export interface LeaseQuery {
  status?: LeaseStatus | LeaseStatus[];
  type?: string;
  owner?: string;
  resource?: string;
}

export interface ResourceQuery {
  status?: ResourceStatus | ResourceStatus[];
  type?: string;
  blueprint?: string;
}

export interface BlueprintStats {
  type: string;
  resources: Record<ResourceStatus, number>;
  /** Resources still being built (`pending`). */
  allocating: number;
  /** `pending` + `active`: what counts as capacity. */
  live: number;
  /** `released` + `broken`: on the way out, never capacity. */
  deletionLane: number;
  /** Deletion-lane resources whose destroy hook has been tried at least once. */
  destroying: number;
  /** Age in milliseconds of the oldest resource in each transitional state. */
  oldestAgeMs: Partial<Record<'pending' | 'released' | 'broken' | 'destroying', number>>;
  /**
   * Builds that failed in a row (a hook or a policy function threw), the last error, and
   * until when no new allocation of this blueprint starts; null once a resource of it
   * activates again.
   */
  failures: { streak: number; lastError: string; lastFailureAt: string; retryAt: string } | null;
}

export interface TypeStats {
  leases: Record<LeaseStatus, number>;
  /** Pending leases: the waiting queue. */
  waiting: number;
  live: number;
  deletionLane: number;
  oldestAgeMs: Partial<Record<'pending' | 'acquired' | 'released' | 'broken', number>>;
}

export interface BrokerStats {
  blueprints: Record<string, BlueprintStats>;
  types: Record<string, TypeStats>;
}

export interface Broker extends AsyncDisposable {
  readonly clock: Clock;
  /**
   * Requests a lease and resolves once it is active. With `spec.blueprints` given as
   * blueprint objects (`blueprints: [local]`), the lease's `attributes` and
   * `resource.attributes` have the types those blueprints declare.
   */
  acquire<A extends JsonObject = NoAttributes, B extends Blueprint<any, any, any> = Blueprint<any, any, any>>(spec: TypedLeaseSpec<A, B>): Promise<LeaseOf<B, A>>;
  acquire<A extends JsonObject = JsonObject>(spec: LeaseSpec<A>): Promise<Lease<A & JsonObject>>;
  /** Requests a lease and returns its handle as soon as the request is recorded; typed like `acquire`. */
  requestLease<A extends JsonObject = NoAttributes, B extends Blueprint<any, any, any> = Blueprint<any, any, any>>(spec: TypedLeaseSpec<A, B>): Promise<LeaseHandle<A & LeaseAttributesOf<B>, ResourceAttributesOf<B>>>;
  requestLease<A extends JsonObject = JsonObject>(spec: LeaseSpec<A>): Promise<LeaseHandle<A & JsonObject>>;
  /** Writes a release command for a lease. */
  release(leaseId: string, options?: { reason?: string; author?: string }): Promise<void>;
  /** Writes a release command for a resource; its leases are released first. */
  releaseResource(resourceId: string, options?: { reason?: string; author?: string }): Promise<void>;
  /** Writes a reclaim command: an idle active resource is released, a leased one is left alone. */
  reclaimResource(resourceId: string, options?: { author?: string }): Promise<void>;
  /** Writes a break command: the resource breaks, its active leases break with the reason. */
  breakResource(resourceId: string, reason: string, options?: { author?: string }): Promise<void>;
  readonly leases: { get(id: string): Promise<LeaseRecord | null>; list(query?: LeaseQuery): Promise<LeaseRecord[]> };
  readonly resources: { get(id: string): Promise<ResourceRecord | null>; list(query?: ResourceQuery): Promise<ResourceRecord[]> };
  logs(filter?: { lease?: string; resource?: string; blueprint?: string; type?: string }): Promise<LogEntry[]>;
  on<E extends keyof BrokerEvents>(event: E, listener: (payload: BrokerEvents[E]) => void): () => void;
  stats(): Promise<BrokerStats>;
  /**
   * Deletes history older than `olderThan` (default: the broker's `retention`) now:
   * destroyed leases and resources with their logs, and consumed commands. Live objects
   * and their logs are never touched. Returns how many rows of each went.
   */
  gc(options?: { olderThan?: DurationInput }): Promise<GcResult>;
  /** Stops claiming work, waits up to the grace period for hooks in flight, and keeps all state. Releases nothing. */
  close(options?: { grace?: DurationInput }): Promise<void>;
}

/** Internals reachable by `slipway/testing` and the tests, not by the public API. */
export const internals = new WeakMap<Broker, { engine: Engine | null; db: Db; runtime: Runtime }>();

function optionalDuration(value: DurationInput | undefined, field: string, fallback: Duration): Duration {
  return value === undefined ? fallback : parseDuration(value, field);
}

const BROKER_OPTION_KEYS = new Set(['database', 'blueprints', 'workers', 'clock', 'logger', 'closeGrace', 'claimTtl', 'sweepInterval', 'waitRecheck', 'backoff', 'maxAllocationFailures', 'retention', 'gcInterval']);
/** Node runs a timer of more than 2^31 - 1 ms after 1 ms; tuning durations stay far below that. */
const MAX_TUNING_MS = 24 * 60 * 60 * 1000;

function atMostADay(duration: Duration, field: string): Duration {
  if (duration.toMillis() > MAX_TUNING_MS) throw new ValidationError(field, `must be at most 24 hours (got ${duration.toISO()})`);
  return duration;
}

/** For a write that is run again after an unknown outcome: swallows that error only. */
function unlessOutcomeUnknown(error: unknown): null {
  if (error instanceof CommitOutcomeUnknownError) return null;
  throw error;
}

/**
 * Runs an idempotent write, and once more if the connection died while it ran (its
 * outcome unknown): the second run finds what the first may have written.
 */
async function writeAgainIfUnknown<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (!(error instanceof CommitOutcomeUnknownError)) throw error;
    return write();
  }
}

/** Lease statuses that end a wait for activation, and the one that ends a release. */
const SETTLED: ReadonlySet<string> = new Set(['active', 'broken', 'released', 'destroyed']);
const DESTROYED: ReadonlySet<string> = new Set(['destroyed']);

export async function createBroker(options: BrokerOptions = {}): Promise<Broker> {
  if (!isPlainObject(options as unknown)) throw new ValidationError('options', 'must be an object');
  for (const key of Object.keys(options)) {
    if (!BROKER_OPTION_KEYS.has(key)) throw new ValidationError(key, `is not a createBroker option (known: ${[...BROKER_OPTION_KEYS].join(', ')})`);
  }
  const database = checkDatabaseOptions(options.database);
  const blueprints = defineBlueprintCheck(options.blueprints);
  if (options.workers !== undefined && options.workers !== false) {
    if (!isPlainObject(options.workers as unknown)) throw new ValidationError('workers', 'must be { concurrency? } or false');
    for (const key of Object.keys(options.workers)) if (key !== 'concurrency') throw new ValidationError(`workers.${key}`, 'is not a workers option (known: concurrency)');
    const c = options.workers.concurrency;
    if (c !== undefined && !(Number.isInteger(c) && c >= 1 && c <= 256)) throw new ValidationError('workers.concurrency', 'must be an integer from 1 to 256');
  }
  const clock = options.clock ?? systemClock;
  if (typeof clock?.now !== 'function' || typeof clock?.schedule !== 'function') throw new ValidationError('clock', 'must have now() and schedule()');
  const logger = options.logger ?? silentLogger;
  if (!(logger !== null && typeof logger === 'object' && (['debug', 'info', 'warn', 'error'] as const).every((level) => typeof logger[level] === 'function'))) {
    throw new ValidationError('logger', 'must have debug(), info(), warn() and error() (a pino-compatible logger)');
  }
  if (options.backoff !== undefined) {
    if (!isPlainObject(options.backoff as unknown)) throw new ValidationError('backoff', 'must be { initial?, max? }');
    for (const key of Object.keys(options.backoff)) if (key !== 'initial' && key !== 'max') throw new ValidationError(`backoff.${key}`, 'is not a backoff option (known: initial, max)');
  }
  const closeGrace = optionalDuration(options.closeGrace, 'closeGrace', Duration.fromObject({ seconds: 10 }));
  const claimTtl = optionalDuration(options.claimTtl, 'claimTtl', Duration.fromObject({ seconds: 30 }));
  const sweepInterval = optionalDuration(options.sweepInterval, 'sweepInterval', Duration.fromObject({ seconds: 2 }));
  const waitRecheck = optionalDuration(options.waitRecheck, 'waitRecheck', Duration.fromObject({ seconds: 30 }));
  const retention = optionalDuration(options.retention, 'retention', Duration.fromObject({ days: 7 }));
  const gcInterval = options.gcInterval === false ? null : optionalDuration(options.gcInterval, 'gcInterval', Duration.fromObject({ minutes: 10 }));
  if (gcInterval && gcInterval.toMillis() < 1_000) throw new ValidationError('gcInterval', 'must be at least 1 second (or false)');
  const backoff = {
    initial: optionalDuration(options.backoff?.initial, 'backoff.initial', Duration.fromObject({ seconds: 1 })),
    max: optionalDuration(options.backoff?.max, 'backoff.max', Duration.fromObject({ minutes: 5 })),
  };
  if (sweepInterval.toMillis() < 10) throw new ValidationError('sweepInterval', 'must be at least 10 ms');
  if (claimTtl.toMillis() < 100) throw new ValidationError('claimTtl', 'must be at least 100 ms');
  // Zero would re-run a waiting lease, or a failing destroy hook, in a busy loop.
  if (waitRecheck.toMillis() < 10) throw new ValidationError('waitRecheck', 'must be at least 10 ms');
  if (backoff.initial.toMillis() < 1) throw new ValidationError('backoff.initial', 'must be longer than zero');
  if (backoff.max.toMillis() < backoff.initial.toMillis()) throw new ValidationError('backoff.max', `must be at least backoff.initial (${backoff.initial.toISO()})`);
  atMostADay(sweepInterval, 'sweepInterval');
  atMostADay(claimTtl, 'claimTtl');
  atMostADay(closeGrace, 'closeGrace');
  atMostADay(waitRecheck, 'waitRecheck');
  atMostADay(backoff.max, 'backoff.max');
  if (gcInterval && gcInterval.toMillis() > MAX_TUNING_MS) throw new ValidationError('gcInterval', `must be at most 24 hours (got ${gcInterval.toISO()})`);
  const maxAllocationFailures = options.maxAllocationFailures === undefined ? 5 : options.maxAllocationFailures;
  if (!(Number.isInteger(maxAllocationFailures) && maxAllocationFailures >= 1 && maxAllocationFailures <= 1000)) {
    throw new ValidationError('maxAllocationFailures', `must be an integer from 1 to 1000 (got ${String(options.maxAllocationFailures)})`);
  }

  const db = await openDatabase(
    database,
    (state, error) =>
      state === 'lost'
        ? logger.warn({ err: error }, 'slipway: the database is unreachable; retrying')
        : logger.info({}, 'slipway: the database answers again'),
    (stale) => logger.warn({ ...stale }, `slipway: took over the stale lock of database.dataDir ${stale.dataDir}: ${stale.reason}`),
  );
  const events = new BrokerEventBus();
  const abort = new AbortController();
  let engine: Engine | null = null;
  /** Set when `close()` begins: new calls are refused from then on. */
  let closed = false;
  let closing: Promise<void> | undefined;
  /** Emits `closed` once the workers have stopped: every wait still open rejects with BrokerClosedError. */
  const closedEvents = new EventEmitter();
  closedEvents.setMaxListeners(0);
  /**
   * Runs a public call: refused at once on a closed broker, and an error it meets because
   * the broker closed while it ran (the database went away under it) is reported as
   * BrokerClosedError, with that error as the cause.
   */
  const live = async <T>(call: () => Promise<T>): Promise<T> => {
    if (closed) throw new BrokerClosedError();
    try {
      return await call();
    } catch (error) {
      if (closed && !(error instanceof SlipwayError)) throw new BrokerClosedError({ cause: error });
      throw error;
    }
  };
  let gcTimer: NodeJS.Timeout | undefined;
  let gcRunning: Promise<void> | undefined;

  const renderers = (blueprint: string | null) => (blueprint ? blueprints.get(blueprint)?.implementation.logTypes : undefined);
  const toLogEntry = (r: Record<string, any>): LogEntry => ({
    id: Number(r.id),
    type: r.type,
    at: fromDb(r.at)!,
    lastAt: fromDb(r.last_at)!,
    count: Number(r.count),
    blueprint: r.blueprint ?? null,
    resource: r.resource_id ?? null,
    lease: r.lease_id ?? null,
    data: r.data ?? {},
    message: renderLog(r.type, r.data ?? {}, renderers(r.blueprint ?? null)),
  });

  const workerId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  const channel = channelFor(db.schema);
  const afterCommit = (unit: Unit) => {
    for (const e of unit.events) {
      events.emit(e.kind, { id: e.id, from: e.from as any, to: e.to as any });
      if (e.kind === 'lease') leaseWatchers.emit(e.id, e);
    }
    for (const l of unit.logs) events.emit('log', toLogEntry(l));
    if (unit.woke) engine?.poke();
    // The other brokers of the schema: work became due, or leases they may watch moved.
    const leases = unit.events.filter((e) => e.kind === 'lease' && SETTLED.has(e.to)).map((e) => e.id);
    if (listener && (unit.woke || leases.length > 0)) listener.send({ from: workerId, work: unit.woke, leases });
  };
  const store = new Store(db, clock, afterCommit, Store.idSourceOf(options));
  // Lease status changes of this process, with the rows their writer had, for `watchLease`.
  const leaseWatchers = new EventEmitter();
  leaseWatchers.setMaxListeners(0);
  // Hints from other brokers on the same schema (LISTEN/NOTIFY): wake the workers, re-read watched leases.
  const leaseHints = new EventEmitter();
  leaseHints.setMaxListeners(0);
  const listener =
    'url' in database || 'dataSource' in database
      ? new Listener({
          url: listenConnection(database)!,
          channel,
          applicationName: database.applicationName ?? 'slipway',
          onHint(hint) {
            if (hint.from === workerId) return;
            if (hint.work) engine?.poke();
            if (hint.leases === null) leaseHints.emit('*');
            else for (const id of hint.leases) leaseHints.emit(id);
          },
          onConnected(again) {
            if (!again) return;
            logger.info({}, 'slipway: LISTEN connection is back');
            engine?.poke();
            leaseHints.emit('*');
          },
          onLost(error, retryInMs) {
            logger.warn({ err: error, retryInMs }, 'slipway: LISTEN connection lost; reconnecting (the sweep covers the gap)');
          },
        })
      : null;
  if (listener) await listener.start();

  const runtime: Runtime = {
    store,
    clock,
    logger,
    workerId,
    blueprints,
    signal: abort.signal,
    waitRecheck,
    backoff,
    maxAllocationFailures,
    createLease: (spec, extra) => insertLease(spec, extra),
    leaseObject: (row) => leaseObject(row),
  };

  if (db.embedded) {
    // A PGlite database has one owner at a time: claims left by an earlier broker on this dataDir are dead.
    await db.execute(store.sql.releaseAllClaims);
    // So are the holders of its active leases: say what they left, since a lease without a
    // ttl stays active (its slots held) until someone releases it.
    const left = await store.activeLeases();
    if (left.active > 0) {
      logger.warn(
        { ...left, oldestSince: left.oldestSince?.toISO() ?? null },
        `slipway: this database holds ${left.active} active lease(s) of an earlier process, ${left.withoutTtl} of them without a ttl; they stay active until released (broker.leases.list({ status: 'active' }), broker.release(id))`,
      );
    }
  }

  function checkSpecAgainstRegistry(spec: NormalizedSpec) {
    if (blueprints.size === 0) return;
    const ofType = [...blueprints.values()].filter((b) => b.type === spec.type);
    if (ofType.length === 0) throw new UnknownTypeError(spec.type, [...new Set([...blueprints.values()].map((b) => b.type))]);
    for (const name of spec.blueprints ?? []) {
      const b = blueprints.get(name);
      if (!b) throw new ValidationError('spec.blueprints', `unknown blueprint "${name}" (known: ${[...blueprints.keys()].join(', ')})`);
      if (b.type !== spec.type) throw new ValidationError('spec.blueprints', `blueprint "${name}" serves type "${b.type}", not "${spec.type}"`);
      // The lease is typed by the object given: it must be the one that will serve it.
      const given = spec.blueprintObjects.get(name);
      if (given && given !== b) throw new ValidationError('spec.blueprints', `the blueprint "${name}" given is not the one this broker was created with (pass that object, or its name)`);
    }
  }

  /**
   * Records a lease. With `atOnce` (only `acquire()`, whose caller waits for the hooks
   * anyway), a free resource with nobody waiting is taken here, in this call: its hooks
   * run inline and the lease is created acquired. `requestLease()` and child leases only
   * record, so that they return as soon as the row exists, however slow the hooks are.
   */
  async function insertLease(spec: NormalizedSpec, extra: { parentResourceId?: string; childKey?: string } = {}, atOnce = false): Promise<LeaseRow> {
    if (closed) throw new BrokerClosedError();
    checkSpecAgainstRegistry(spec);
    const id = store.newId('lease');
    // This broker's workers take the new lease at once when they have a free slot: it is
    // created claimed by them, and its first pass needs no claim and no poll.
    const claim = engine?.reserve() ?? null;
    const now = clock.now();
    const lease: NewLease = {
      id,
      type: spec.type,
      attributes: spec.attributes,
      blueprints: spec.blueprints,
      owner: spec.owner,
      priority: spec.priority,
      expiresAt: spec.ttl ? now.plus(spec.ttl) : spec.until,
      deadlineAt: spec.timeout ? now.plus(spec.timeout) : null,
      parentResourceId: extra.parentResourceId ?? null,
      childKey: extra.childKey ?? null,
    };
    const insert = () => store.single((u) => store.insertLease(u, lease, claim));
    let row: LeaseRow | null;
    let trouble: HookFailure | undefined;
    try {
      // A free resource and nobody waiting: the lease is created acquired on it.
      const fast = claim && atOnce ? await acquireAtOnce(runtime, lease, claim).catch(unlessOutcomeUnknown) : null;
      if (fast && 'lease' in fast) {
        engine!.adopt('lease', id, fast);
        return fast.lease;
      }
      trouble = fast ?? undefined;
      // Idempotent per id: if the fast path or a first insert whose outcome was lost
      // committed the lease, this inserts nothing and the lease is read instead.
      row = (await writeAgainIfUnknown(insert)) ?? (await store.lease(id));
    } catch (error) {
      if (claim) engine!.unreserve();
      throw error;
    }
    if (!row) {
      if (claim) engine!.unreserve();
      throw new Error(`lease ${id} was not recorded`);
    }
    if (claim) engine!.adopt('lease', id, { lease: row, trouble });
    return row;
  }

  async function leaseObject(row: LeaseRow, known?: ResourceRow | null): Promise<Lease> {
    const resource = known ?? (row.resourceId ? await store.resource(row.resourceId) : null);
    if (!resource) throw new LeaseBrokenError(row.id, 'lease has no resource');
    const blueprint = blueprints.get(resource.blueprint);
    const signal = leaseSignal({ clock, store, changes: leaseWatchers, hints: leaseHints, recheck: sweepInterval, closed: abort.signal }, row);
    const lease: Lease = {
      id: row.id,
      type: row.type,
      status: row.status,
      attributes: row.attributes,
      owner: row.owner,
      expiresAt: row.expiresAt,
      resource: { id: resource.id, type: resource.type, blueprint: resource.blueprint, attributes: resource.attributes },
      get signal() {
        return signal.get();
      },
      interface(name: string): any {
        const offers = blueprint?.implementation.interfaces ?? {};
        // Own names only: `constructor` or `__proto__` must not find Object's.
        const factory = typeof name === 'string' && Object.hasOwn(offers, name) ? offers[name] : undefined;
        if (!factory) {
          throw new ValidationError('interface', `blueprint ${resource.blueprint} offers no "${String(name)}" interface (it offers: ${Object.keys(offers).join(', ') || 'none'})`);
        }
        return factory({
          ...baseContext(runtime, blueprint!, { lease: row.id, resource: resource.id }, false),
          lease: leaseView(row),
          resource: resourceView(resource),
          // Read when the interface needs it: an interface that never looks starts no watch.
          get signal() {
            return signal.get();
          },
        });
      },
      async release(opts) {
        await releaseAndWait(row.id, opts);
        if (opts?.wait !== false) {
          gone = true;
          signal.destroyed();
        }
      },
      // Seen destroyed already: nothing to release, also after close (`await using` after an explicit release).
      async [Symbol.asyncDispose]() {
        if (gone) return;
        await releaseAndWait(row.id);
        gone = true;
        signal.destroyed();
      },
    };
    let gone = false;
    return lease;
  }

  async function writeCommand(kind: 'lease' | 'resource', id: string, command: 'release' | 'reclaim' | 'break', data: Record<string, string>, author: string | null) {
    if (closed) throw new BrokerClosedError();
    if (typeof id !== 'string' || !id) throw new ValidationError(kind === 'lease' ? 'leaseId' : 'resourceId', 'must be a non-empty string');
    // Written again after a lost outcome: if both landed, the second is consumed with
    // "no effect"; a command is never lost.
    const status = await writeAgainIfUnknown(() => store.single((u) => store.writeCommand(u, kind, id, command, data, author)));
    if (status === null) throw new NotFoundError(kind, id);
  }

  interface WatchOptions<R> {
    timeout?: Duration;
    signal?: AbortSignal;
    onTimeout?: () => Promise<Error>;
    onAbort?: () => Error;
    /** How to read the lease (default: the row alone). */
    read?: (id: string) => Promise<R | null>;
    /** The statuses an event of this broker must carry to be worth a read; the others cannot decide. */
    decisive?: ReadonlySet<string>;
    /** The caller knows the lease cannot have reached an end yet: wait for an event or a re-read. */
    skipFirstRead?: boolean;
    /** What an event of this process tells without a read, if enough (the row its writer had). */
    fromEvent?: (e: StatusEvent) => R | null;
  }

  /** Waits, on events and a slow re-read (other processes), until `decide` says the lease reached an end. */
  function watchLease<T, R extends LeaseRow = LeaseRow>(id: string, decide: (row: R) => { value: T } | { error: Error } | null, opts: WatchOptions<R> = {}): Promise<T> {
    const read = opts.read ?? ((leaseId: string) => store.lease(leaseId) as Promise<R | null>);
    return new Promise<T>((resolve, reject) => {
      let finished = false;
      let checking = false;
      let again = false;
      const cleanups: Array<() => void> = [];
      const finish = (fn: () => void) => {
        if (finished) return;
        finished = true;
        for (const c of cleanups) c();
        fn();
      };
      const check = async () => {
        if (finished) return;
        if (checking) return void (again = true);
        checking = true;
        try {
          const row = await read(id);
          const verdict = row ? decide(row) : { error: new NotFoundError('lease', id) };
          if (verdict && 'value' in verdict) finish(() => resolve(verdict.value));
          else if (verdict) finish(() => reject(verdict.error));
        } catch (error) {
          if (closed) finish(() => reject(new BrokerClosedError()));
        } finally {
          checking = false;
          if (again) {
            again = false;
            void check();
          }
        }
      };
      const onChange = (e: StatusEvent) => {
        if (opts.decisive && !opts.decisive.has(e.to)) return;
        const known = opts.fromEvent?.(e);
        if (!known) return void check();
        const verdict = decide(known);
        if (verdict && 'value' in verdict) finish(() => resolve(verdict.value));
        else if (verdict) finish(() => reject(verdict.error));
      };
      leaseWatchers.on(id, onChange);
      cleanups.push(() => leaseWatchers.off(id, onChange));
      const onClosed = () => finish(() => reject(new BrokerClosedError()));
      closedEvents.once('closed', onClosed);
      cleanups.push(() => closedEvents.off('closed', onClosed));
      const onHint = () => void check();
      leaseHints.on(id, onHint).on('*', onHint);
      cleanups.push(() => leaseHints.off(id, onHint).off('*', onHint));
      const poll = setInterval(() => void check(), Math.max(50, sweepInterval.toMillis()));
      poll.unref();
      cleanups.push(() => clearInterval(poll));
      if (opts.timeout) {
        const cancel = clock.schedule(clock.now().plus(opts.timeout), () => finish(() => void opts.onTimeout!().then(reject, reject)));
        cleanups.push(cancel);
      }
      if (opts.signal) {
        const onAbort = () => finish(() => reject(opts.onAbort!()));
        if (opts.signal.aborted) return onAbort();
        opts.signal.addEventListener('abort', onAbort, { once: true });
        cleanups.push(() => opts.signal!.removeEventListener('abort', onAbort));
      }
      if (!opts.skipFirstRead) void check();
    });
  }

  async function whenActive(id: string, opts: { timeout?: DurationInput; signal?: AbortSignal; justRequested?: boolean } = {}): Promise<Lease> {
    const timeout = opts.timeout === undefined ? undefined : parseDuration(opts.timeout, 'timeout');
    optionalSignal(opts.signal, 'signal');
    const giveUp = () => writeCommand('lease', id, 'release', { reason: 'not active in time' }, 'acquire').catch(() => undefined);
    const timeoutText = (l: LeaseRow) => humanDuration(timeout ?? l.deadlineAt!.diff(l.createdAt));
    const row = await watchLease<LeaseWithResource, LeaseWithResource>(
      id,
      (l) => {
        if (l.status === 'active') {
          // Activated just before its expiry and read after it: its worker releases it now; never hand it over.
          if (l.expiresAt && l.expiresAt <= clock.now()) return { error: new LeaseBrokenError(id, `it expired at ${l.expiresAt.toISO()} as it became active`) };
          return { value: l };
        }
        if (l.status === 'broken' || (l.status === 'destroyed' && l.brokenReason)) return { error: new LeaseBrokenError(id, l.brokenReason ?? 'broken', { cause: l.brokenReason }) };
        if (l.status === 'released' || l.status === 'destroyed') {
          // Its own worker released it at its deadline: the same error as this watcher's own timer gives.
          if (l.endCause === 'timeout') return { error: new LeaseTimeoutError(id, timeoutText(l), { released: true, lastFailure: l.lastFailure }) };
          if (l.endCause === 'expired') return { error: new LeaseBrokenError(id, `it expired at ${l.expiresAt?.toISO()} before it became active`) };
          return { error: new LeaseBrokenError(id, 'it was released before it became active') };
        }
        return null;
      },
      {
        timeout,
        signal: opts.signal,
        onTimeout: async () => {
          await giveUp();
          // What the lease is now: released already (by its worker at the same deadline), or only asked to be.
          const now = await store.lease(id).catch(() => null);
          const released = !!now && !LEASE_STATE_FLAGS[now.status].live;
          return new LeaseTimeoutError(id, humanDuration(timeout!), { released, lastFailure: now?.lastFailure ?? null });
        },
        onAbort: () => (void giveUp(), new AbortError(`lease ${id}: aborted before it became active`, { cause: opts.signal?.reason })),
        read: (leaseId) => store.leaseWithResource(leaseId),
        // The worker that activated the lease in this process had both rows.
        fromEvent: (e) => (e.row && e.resource ? { ...(e.row as LeaseRow), resource: e.resource } : null),
        decisive: SETTLED,
        skipFirstRead: opts.justRequested,
      },
    );
    return leaseObject(row, row.resource);
  }

  async function releaseAndWait(id: string, opts?: { wait?: boolean }): Promise<void> {
    const wait = optionalBoolean(checkOptions(opts, ['wait'], { call: 'release' }).wait, 'wait');
    // Rendered "Lease released by holder.": the author says who, and there is no more to say why.
    await writeCommand('lease', id, 'release', { reason: 'released' }, 'holder');
    if (wait === false) return;
    await watchLease(id, (l) => (l.status === 'destroyed' ? { value: undefined } : null), { decisive: DESTROYED, fromEvent: (e) => (e.row as LeaseRow | undefined) ?? null });
  }

  /** Records a lease request; the caller watches it. */
  async function request(spec: LeaseSpec, atOnce = false) {
    const normalized = normalizeSpec(spec, { now: clock.now() });
    // No acquire timeout and no abort signal: hooks run inline cannot honour either.
    const row = await insertLease(normalized, {}, atOnce && !normalized.timeout && !normalized.signal);
    crashPoint('acquire.recorded');
    const activeOptions = (opts: { timeout?: DurationInput; signal?: AbortSignal }) => ({ timeout: opts.timeout ?? normalized.timeout ?? undefined, signal: opts.signal ?? normalized.signal });
    return { id: row.id, activeOptions };
  }

  async function requestLease(spec: LeaseSpec): Promise<LeaseHandle> {
    const { id, activeOptions } = await request(spec);
    let gone = false;
    const release = async (opts?: { wait?: boolean }) => {
      await releaseAndWait(id, opts);
      if (opts?.wait !== false) gone = true;
    };
    return {
      id,
      whenActive: (options) => live(() => whenActive(id, activeOptions(checkOptions(options, ['timeout', 'signal'], { call: 'whenActive' }) as { timeout?: DurationInput; signal?: AbortSignal }))),
      status: () => live(async () => (await store.lease(id))!.status),
      release: (opts) => live(() => release(opts)),
      // Seen destroyed already: nothing to release, also after close.
      [Symbol.asyncDispose]: () => (gone ? Promise.resolve() : live(() => release())),
    };
  }

  const statusFilter = (value: string | string[] | undefined, known: readonly string[], field: string) => {
    if (value === undefined) return null;
    const list = Array.isArray(value) ? value : [value];
    for (const s of list) if (!known.includes(s)) throw new ValidationError(field, `unknown status "${s}" (one of ${known.join(', ')})`);
    return list;
  };

  const publicLease = (r: LeaseRow): LeaseRecord => ({
    id: r.id, type: r.type, status: r.status, attributes: r.attributes, owner: r.owner, priority: r.priority, resourceId: r.resourceId,
    parentResourceId: r.parentResourceId, expiresAt: r.expiresAt, createdAt: r.createdAt, statusChangedAt: r.statusChangedAt, brokenReason: r.brokenReason,
  });
  const publicResource = (r: ReturnType<typeof mapResource>): ResourceRecord => ({
    id: r.id, type: r.type, blueprint: r.blueprint, status: r.status, attributes: r.attributes, createdAt: r.createdAt, statusChangedAt: r.statusChangedAt, brokenReason: r.brokenReason,
  });

  // One implementation for both overloads: the typed one only narrows what the caller sees.
  const acquire = (spec: LeaseSpec) =>
    live(async () => {
      const { id, activeOptions } = await request(spec, true);
      // Nothing can have moved the lease since its insert returned: no statement completes
      // between here and the watch starting, so the watch skips its first read.
      return whenActive(id, { ...activeOptions({}), justRequested: true });
    });

  const broker: Broker = {
    clock,
    acquire: acquire as Broker['acquire'],
    requestLease: ((spec: LeaseSpec) => live(() => requestLease(spec))) as Broker['requestLease'],
    // Arguments are checked here, in order, before writeCommand reads or writes anything.
    release: (id, options) =>
      live(async () => {
        checkText(id, 'leaseId');
        const o = checkCommandOptions(options, 'release', ['reason', 'author']);
        return writeCommand('lease', id, 'release', { reason: o.reason ?? 'released' }, o.author ?? null);
      }),
    releaseResource: (id, options) =>
      live(async () => {
        checkText(id, 'resourceId');
        const o = checkCommandOptions(options, 'releaseResource', ['reason', 'author']);
        return writeCommand('resource', id, 'release', { reason: o.reason ?? 'released' }, o.author ?? null);
      }),
    reclaimResource: (id, options) =>
      live(async () => {
        checkText(id, 'resourceId');
        const o = checkCommandOptions(options, 'reclaimResource', ['author']);
        return writeCommand('resource', id, 'reclaim', {}, o.author ?? null);
      }),
    breakResource: (id, reason, options) =>
      live(async () => {
        checkText(id, 'resourceId');
        // The reason is what the broken leases report: a missing one must not be recorded as "undefined".
        checkText(reason, 'reason');
        const o = checkCommandOptions(options, 'breakResource', ['author']);
        return writeCommand('resource', id, 'break', { reason }, o.author ?? null);
      }),
    leases: {
      get: (id) =>
        live(async () => {
          checkText(id, 'id');
          const row = await store.lease(id);
          return row ? publicLease(row) : null;
        }),
      list: (query) => live(async () => {
        const q = checkFilter(query, { call: 'leases.list', field: 'query' }, ['type', 'owner', 'resource'], ['status']) as LeaseQuery;
        const statuses = statusFilter(q.status, LEASE_STATUSES, 'status');
        const rows = await db.query(
          `SELECT * FROM ${store.s}.leases WHERE ($1::text[] IS NULL OR status = ANY($1::text[])) AND ($2::text IS NULL OR type = $2)
             AND ($3::text IS NULL OR owner = $3) AND ($4::text IS NULL OR resource_id = $4) ORDER BY seq`,
          [statuses, q.type ?? null, q.owner ?? null, q.resource ?? null],
        );
        return rows.map((r) => publicLease(mapLease(r)));
      }),
    },
    resources: {
      get: (id) =>
        live(async () => {
          checkText(id, 'id');
          const row = await store.resource(id);
          return row ? publicResource(row) : null;
        }),
      list: (query) => live(async () => {
        const q = checkFilter(query, { call: 'resources.list', field: 'query' }, ['type', 'blueprint'], ['status']) as ResourceQuery;
        const statuses = statusFilter(q.status, RESOURCE_STATUSES, 'status');
        const rows = await db.query(
          `SELECT * FROM ${store.s}.resources WHERE ($1::text[] IS NULL OR status = ANY($1::text[])) AND ($2::text IS NULL OR type = $2)
             AND ($3::text IS NULL OR blueprint = $3) ORDER BY created_at, id`,
          [statuses, q.type ?? null, q.blueprint ?? null],
        );
        return rows.map((r) => publicResource(mapResource(r)));
      }),
    },
    logs: (options) => live(async () => {
      const filter = checkFilter(options, { call: 'logs', field: 'filter' }, ['lease', 'resource', 'blueprint', 'type']);
      const rows = await db.query(
        `SELECT * FROM ${store.s}.logs WHERE ($1::text IS NULL OR lease_id = $1) AND ($2::text IS NULL OR resource_id = $2)
           AND ($3::text IS NULL OR blueprint = $3) AND ($4::text IS NULL OR type = $4) ORDER BY id`,
        [filter.lease ?? null, filter.resource ?? null, filter.blueprint ?? null, filter.type ?? null],
      );
      return rows.map(toLogEntry);
    }),
    on(event, listener) {
      if (closed) throw new BrokerClosedError();
      checkSubscription(event, listener, BROKER_EVENTS);
      return events.on(event, listener);
    },
    stats: () => live(() => computeStats(store, clock.now(), blueprints)),
    gc: (options) =>
      live(async () => {
        const o = checkOptions(options, ['olderThan'], { call: 'gc' }) as { olderThan?: DurationInput };
        const olderThan = o.olderThan === undefined ? retention : parseDuration(o.olderThan, 'olderThan');
        return collectGarbage(store, clock.now().minus(olderThan));
      }),
    async close(options) {
      // Refuse bad options before anything changes: a refused close leaves the broker as it was.
      const o = checkOptions(options, ['grace'], { call: 'close' }) as { grace?: DurationInput };
      const grace = o.grace === undefined ? closeGrace : parseDuration(o.grace, 'grace');
      // Every close() shares the first one's promise: none resolves before the database is closed.
      closing ??= (async () => {
        closed = true;
        clearInterval(gcTimer);
        await gcRunning;
        // Passes in flight and requests running their hooks inline (acquire) get the grace period.
        if (engine) await engine.stop(grace);
        abort.abort(new BrokerClosedError());
        closedEvents.emit('closed');
        await listener?.stop();
        await db.execute(store.sql.releaseClaims, [workerId]).catch(() => undefined);
        await db.close();
      })();
      return closing;
    },
    [Symbol.asyncDispose]: () => broker.close(),
  };

  if (options.workers !== false) {
    engine = new Engine(runtime, { concurrency: options.workers?.concurrency ?? 4, claimTtl, sweepInterval });
    engine.start();
    if (gcInterval) {
      gcTimer = setInterval(() => {
        if (gcRunning) return;
        gcRunning = collectGarbage(store, clock.now().minus(retention))
          .then((r) => {
            if (r.leases + r.resources + r.logs + r.commands > 0) logger.debug({ ...r }, 'slipway: collected history');
          })
          .catch((error) => logger.warn({ err: error }, 'slipway: collecting history failed; the next interval retries'))
          .finally(() => (gcRunning = undefined));
      }, gcInterval.toMillis());
      gcTimer.unref();
    }
  }
  internals.set(broker, { engine, db, runtime });
  return broker;
}

async function computeStats(store: Store, now: DateTime, blueprints: Map<string, Blueprint<any, any, any>>): Promise<BrokerStats> {
  const zero = <S extends string>(list: readonly S[]) => Object.fromEntries(list.map((s) => [s, 0])) as Record<S, number>;
  const result: BrokerStats = { blueprints: {}, types: {} };
  for (const b of blueprints.values()) {
    result.blueprints[b.name] = { type: b.type, resources: zero(RESOURCE_STATUSES), allocating: 0, live: 0, deletionLane: 0, destroying: 0, oldestAgeMs: {}, failures: null };
    result.types[b.type] ??= { leases: zero(LEASE_STATUSES), waiting: 0, live: 0, deletionLane: 0, oldestAgeMs: {} };
  }
  const age = (at: Date | string | null) => (at ? Math.max(0, now.toMillis() - fromDb(at)!.toMillis()) : undefined);
  const resources = await store.db.query(
    `SELECT blueprint, type, status, (phase IN ('destroy', 'destroy:retry')) AS destroying, count(*)::int AS n, min(status_changed_at) AS oldest
     FROM ${store.s}.resources GROUP BY blueprint, type, status, (phase IN ('destroy', 'destroy:retry'))`,
  );
  for (const r of resources) {
    const s = (result.blueprints[r.blueprint] ??= { type: r.type, resources: zero(RESOURCE_STATUSES), allocating: 0, live: 0, deletionLane: 0, destroying: 0, oldestAgeMs: {}, failures: null });
    const status = r.status as ResourceStatus;
    s.resources[status] += Number(r.n);
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
  const leases = await store.db.query(`SELECT type, status, count(*)::int AS n, min(status_changed_at) AS oldest FROM ${store.s}.leases GROUP BY type, status`);
  for (const l of leases) {
    const s = (result.types[l.type] ??= { leases: zero(LEASE_STATUSES), waiting: 0, live: 0, deletionLane: 0, oldestAgeMs: {} });
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
  return result;
}
