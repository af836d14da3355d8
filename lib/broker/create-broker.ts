import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { authorizationCalls } from './authorizations.js';
import { BROKER_EVENTS, BrokerEventBus } from './events.js';
import { Engine } from '../engine/engine.js';
import type { Runtime } from '../engine/runtime.js';
import { BrokerClosedError } from '../errors/broker-closed-error.js';
import { checkOptions, checkSubscription } from '../model/call-arguments.js';
import type { LeaseSpec } from '../model/spec.js';
import type { Lease } from '../model/lease.js';
import type { Db } from '../store/db.js';
import { collectGarbage } from '../store/gc.js';
import type { Listener } from '../store/notifier.js';
import { openDatabase } from '../store/open.js';
import { Store, type LeaseRow, type Unit } from '../store/store.js';
import { parseDuration, type DurationInput } from '../time.js';
import { commandCalls } from './commands.js';
import { drainCalls } from './drain.js';
import { unboundedEmitter, type BrokerContext } from './context.js';
import { leaseObject } from './lease-object.js';
import { adoptEmbeddedDatabase, computeStats, startGcTimer } from './maintenance.js';
import { checkBrokerOptions, type BrokerOptions } from './options.js';
import { readCalls, toLogEntry } from './queries.js';
import { acquire, liveCall, recordLease, requestLease } from './requests.js';
import { extendLease } from './renewal.js';
import type { Broker } from './types.js';
import { SETTLED } from './waiter.js';
import { listenForHints } from './hints.js';

/** Internals reachable by `slipway/testing` and the tests, not by the public API. */
export const internals = new WeakMap<Broker, { engine: Engine | null; db: Db; runtime: Runtime; store: Store; events: BrokerEventBus; wrappers: CallWrappers; leaseHints: EventEmitter }>();

/**
 * What `slipway/tracing` puts around the broker's calls while it is on; null: the call runs
 * bare, at the cost of one property read. `acquire` gets the call's spec and the acquire
 * itself, to which it hands a listener for the lease's id (known before any hook runs).
 */
export interface CallWrappers {
  acquire: ((spec: LeaseSpec, run: (onId: (id: string) => void) => Promise<Lease>) => Promise<Lease>) | null;
}

/**
 * Opens the database (migrating it unless told not to), starts this process's workers,
 * and returns the broker. The parts: `options.ts` checks, `requests.ts` acquires and
 * waits, `commands.ts` writes commands, `queries.ts` reads, `maintenance.ts` keeps stats
 * and history; the engine (`lib/engine`) runs the workers on the store (`lib/store`).
 */
export async function createBroker(options: BrokerOptions = {}): Promise<Broker> {
  const settings = checkBrokerOptions(options);
  const { clock, logger } = settings;
  const db = await openDatabase(
    settings.database,
    (state, error) => (state === 'lost' ? logger.warn({ err: error }, 'slipway: the database is unreachable; retrying') : logger.info({}, 'slipway: the database answers again')),
    (stale) => logger.warn({ ...stale }, `slipway: took over the stale lock of database.dataDir ${stale.dataDir}: ${stale.reason}`),
  );
  const events = new BrokerEventBus();
  const workerId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  let listener: Listener | null = null;
  // After each commit: this process's events and waits, its workers, and the other brokers of the schema.
  const afterCommit = (unit: Unit) => {
    for (const e of unit.events) {
      // The same status on both sides: an extend moved the expiry. Waits and signals hear of it; it is no transition.
      if (e.from !== e.to) events.emit(e.kind, { id: e.id, from: e.from as any, to: e.to as any });
      if (e.kind === 'lease') ctx.leaseWatchers.emit(e.id, e);
      // Every activation is a CAS that returns the row: its request and activation times are on it.
      if (e.kind === 'lease' && e.to === 'active' && e.from !== 'active' && e.row && events.listening('lease.waited')) {
        const lease = e.row as LeaseRow;
        events.emit('lease.waited', { type: lease.type, waitedMs: Math.max(0, lease.statusChangedAt.toMillis() - lease.createdAt.toMillis()) });
      }
    }
    for (const l of unit.logs) events.emit('log', toLogEntry(settings.blueprints, l));
    if (unit.woke) ctx.engine?.poke();
    // A spare resource may have been taken, freed, built or lost: the warm pools look (a hint; the sweep repeats it).
    if (unit.events.some((e) => (e.kind === 'resource' && e.to !== 'pending') || (e.kind === 'lease' && e.to === 'acquired'))) ctx.engine?.topUpWarmPools();
    const leases = unit.events.filter((e) => e.kind === 'lease' && (SETTLED.has(e.to) || e.from === e.to)).map((e) => e.id);
    if (listener && (unit.woke || leases.length > 0)) listener.send({ from: workerId, work: unit.woke, leases });
  };
  const store = new Store(db, clock, afterCommit, Store.idSourceOf(options), settings.priorityAging);
  const abort = new AbortController();
  const runtime: Runtime = {
    store,
    clock,
    logger,
    workerId,
    blueprints: settings.blueprints,
    signal: abort.signal,
    waitRecheck: settings.waitRecheck,
    backoff: settings.backoff,
    maxAllocationFailures: settings.maxAllocationFailures,
    quotas: settings.quotas,
    createLease: (spec, origin) => recordLease(ctx, spec, origin),
    leaseObject: (row) => leaseObject(ctx, row),
    hookObserver: () => (events.listening('hook.called') ? (call) => events.emit('hook.called', call) : null),
    workObserver: () => (events.listening('work.done') ? (work) => events.emit('work.done', work) : null),
  };
  const wrappers: CallWrappers = { acquire: null };
  const ctx: BrokerContext = {
    settings,
    store,
    runtime,
    engine: null,
    closed: false,
    abort,
    leaseWatchers: unboundedEmitter(),
    leaseHints: unboundedEmitter(),
    keepAlives: new Map(),
    closedEvents: unboundedEmitter(),
  };
  listener = await listenForHints(ctx, workerId, logger);
  if (db.embedded) await adoptEmbeddedDatabase(store, logger);

  const live = liveCall(ctx);
  const commands = commandCalls(ctx);
  let stopGc = async () => undefined as void;
  let closing: Promise<void> | undefined;
  const broker: Broker = {
    clock,
    acquire: ((spec: LeaseSpec) =>
      live(() => {
        const wrap = wrappers.acquire;
        return wrap ? wrap(spec, (onId) => acquire(ctx, spec, onId)) : acquire(ctx, spec);
      })) as Broker['acquire'],
    requestLease: ((spec: LeaseSpec) => live(() => requestLease(ctx, spec))) as Broker['requestLease'],
    release: (id, o) => live(() => commands.release(id, o)),
    extendLease: (id, renewal, o) => live(() => extendLease(ctx, id, renewal, o)),
    releaseResource: (id, o) => live(() => commands.releaseResource(id, o)),
    reclaimResource: (id, o) => live(() => commands.reclaimResource(id, o)),
    breakResource: (id, reason, o) => live(() => commands.breakResource(id, reason, o)),
    ...readCalls(ctx, live),
    authorizations: authorizationCalls(ctx, live),
    ...drainCalls(ctx, live),
    on(event, listener) {
      if (ctx.closed) throw new BrokerClosedError();
      checkSubscription(event, listener, BROKER_EVENTS);
      return events.on(event, listener);
    },
    stats: () => live(() => computeStats(store, clock.now(), settings.blueprints)),
    gc: (options) =>
      live(async () => {
        const o = checkOptions(options, ['olderThan'], { call: 'gc' }) as { olderThan?: DurationInput };
        const olderThan = o.olderThan === undefined ? settings.retention : parseDuration(o.olderThan, 'olderThan');
        return collectGarbage(store, clock.now().minus(olderThan));
      }),
    async close(options) {
      // Refuse bad options before anything changes: a refused close leaves the broker as it was.
      const o = checkOptions(options, ['grace'], { call: 'close' }) as { grace?: DurationInput };
      const grace = o.grace === undefined ? settings.closeGrace : parseDuration(o.grace, 'grace');
      // Every close() shares the first one's promise: none resolves before the database is closed.
      closing ??= (async () => {
        ctx.closed = true;
        // The holders of this process are going: their leases expire a ttl after the last renewal.
        for (const stop of [...ctx.keepAlives.values()]) stop();
        await stopGc();
        // Passes in flight and requests running their hooks inline (acquire) get the grace period.
        if (ctx.engine) await ctx.engine.stop(grace);
        abort.abort(new BrokerClosedError());
        ctx.closedEvents.emit('closed');
        await listener?.stop();
        await store.releaseClaims(workerId).catch(() => undefined);
        await db.close();
      })();
      return closing;
    },
    [Symbol.asyncDispose]: () => broker.close(),
  };

  if (settings.concurrency !== null) {
    ctx.engine = new Engine(runtime, { concurrency: settings.concurrency, claimTtl: settings.claimTtl, sweepInterval: settings.sweepInterval });
    ctx.engine.start();
    stopGc = startGcTimer(ctx, logger);
  }
  internals.set(broker, { engine: ctx.engine, db, runtime, store, events, wrappers, leaseHints: ctx.leaseHints });
  return broker;
}
