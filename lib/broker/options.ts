import { Duration } from 'luxon';
import { defineBlueprintCheck } from '../blueprint/registry.js';
import type { Blueprint } from '../blueprint/contract.js';
import { systemClock, type Clock } from '../clock.js';
import { silentLogger, type Logger } from '../engine/runtime.js';
import { ValidationError } from '../errors/validation-error.js';
import { checkQuotas, type Quota, type QuotaOptions } from '../model/quotas.js';
import { checkDatabaseOptions, type DatabaseOptions } from '../store/open.js';
import { parseDuration, type DurationInput } from '../time.js';
import { isPlainObject } from '../values.js';

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
  /**
   * No starvation: a waiting lease's effective priority rises by one for each `every` it
   * has waited, so that a steady stream of higher-priority leases cannot keep it waiting
   * forever. Give every broker of a database the same setting: each ranks the waiters of
   * the resources it frees. @defaultValue none: priority stays strict
   */
  priorityAging?: { every: DurationInput };
  /**
   * Caps across pools: at most `maxLeases` leases matching each quota (by requested `type`,
   * by `owner` or owner prefix `'tenant-a/*'`, or both) hold a resource at once, across
   * every blueprint and every broker that has the quota. A lease over quota waits, saying
   * why, and is served in order when a place frees. Give every broker of a database the
   * same quotas. @defaultValue none
   */
  quotas?: QuotaOptions[];
  /** How long history is kept: destroyed leases and resources with their logs, and consumed commands. @defaultValue 7 days */
  retention?: DurationInput;
  /** How often this broker's workers collect history older than `retention`; `false` never (call `gc()` yourself). @defaultValue 10 minutes */
  gcInterval?: DurationInput | false;
}

/** The options of `createBroker`, checked, with their defaults filled in. */
export interface BrokerSettings {
  database: ReturnType<typeof checkDatabaseOptions>;
  blueprints: Map<string, Blueprint<any, any, any>>;
  /** Null: no workers in this process. */
  concurrency: number | null;
  clock: Clock;
  logger: Logger;
  closeGrace: Duration;
  claimTtl: Duration;
  sweepInterval: Duration;
  waitRecheck: Duration;
  retention: Duration;
  gcInterval: Duration | null;
  backoff: { initial: Duration; max: Duration };
  maxAllocationFailures: number;
  /** `priorityAging.every`; null: strict priority. */
  priorityAging: Duration | null;
  /** In lock order (by key). */
  quotas: Quota[];
}

function optionalDuration(value: DurationInput | undefined, field: string, fallback: Duration): Duration {
  return value === undefined ? fallback : parseDuration(value, field);
}

const BROKER_OPTION_KEYS = new Set(['database', 'blueprints', 'workers', 'clock', 'logger', 'closeGrace', 'claimTtl', 'sweepInterval', 'waitRecheck', 'backoff', 'maxAllocationFailures', 'retention', 'gcInterval', 'priorityAging', 'quotas']);
/** Node runs a timer of more than 2^31 - 1 ms after 1 ms; tuning durations stay far below that. */
const MAX_TUNING_MS = 24 * 60 * 60 * 1000;

function atMostADay(duration: Duration, field: string): Duration {
  if (duration.toMillis() > MAX_TUNING_MS) throw new ValidationError(field, `must be at most 24 hours (got ${duration.toISO()})`);
  return duration;
}

/** Checks every option before anything is opened: a bad one is a ValidationError naming it. */
export function checkBrokerOptions(options: BrokerOptions): BrokerSettings {
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
  let priorityAging: Duration | null = null;
  if (options.priorityAging !== undefined) {
    if (!isPlainObject(options.priorityAging as unknown)) throw new ValidationError('priorityAging', "must be { every } (a duration such as { minutes: 1 } or 'PT1M')");
    for (const key of Object.keys(options.priorityAging)) if (key !== 'every') throw new ValidationError(`priorityAging.${key}`, 'is not a priorityAging option (known: every)');
    if (options.priorityAging.every === undefined) throw new ValidationError('priorityAging.every', 'is required: how long a lease waits for each step up in priority');
    priorityAging = parseDuration(options.priorityAging.every, 'priorityAging.every');
    if (priorityAging.toMillis() < 1_000) throw new ValidationError('priorityAging.every', `must be at least 1 second (got ${priorityAging.toISO()})`);
    atMostADay(priorityAging, 'priorityAging.every');
  }
  const quotas = checkQuotas(options.quotas).sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return {
    quotas,
    priorityAging,
    database,
    blueprints,
    concurrency: options.workers === false ? null : (options.workers?.concurrency ?? 4),
    clock,
    logger,
    closeGrace,
    claimTtl,
    sweepInterval,
    waitRecheck,
    retention,
    gcInterval,
    backoff,
    maxAllocationFailures,
  };
}
