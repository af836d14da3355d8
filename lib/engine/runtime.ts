import { Duration, type DateTime } from 'luxon';
import type { Quota } from '../model/quotas.js';
import type { Blueprint } from '../blueprint/contract.js';
import type { Clock } from '../clock.js';
import type { Lease } from '../model/lease.js';
import type { NormalizedSpec } from '../model/spec.js';
import type { ClaimedWork, LeaseRow, ResourceRow } from '../store/store.js';
import type { StoreBackend } from '../store/backend.js';
import type { HookError } from '../errors/hook-error.js';

/** A pino-compatible logger: only these methods are used. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/** What the workers share: the store, the clock, the registered blueprints and tuning. */
export interface Runtime {
  store: StoreBackend;
  clock: Clock;
  logger: Logger;
  workerId: string;
  blueprints: Map<string, Blueprint<any, any, any>>;
  /** Aborted when the broker closes past its grace period. */
  signal: AbortSignal;
  waitRecheck: Duration;
  backoff: { initial: Duration; max: Duration };
  /** Allocations a lease may see fail in a row before it breaks with the last error. */
  maxAllocationFailures: number;
  /** `createBroker({ quotas })`, in lock order (by key). */
  quotas: Quota[];
  createLease(spec: NormalizedSpec, extra?: { parentResourceId?: string; childKey?: string }): Promise<LeaseRow>;
  leaseObject(row: LeaseRow): Promise<Lease>;
  /**
   * Who hears of each hook call right now (`slipway/metrics`, `slipway/tracing`), or null: then `callHook`
   * does not even read the clock for it. Absent: nobody ever listens.
   */
  hookObserver?(): ((call: HookCall) => void) | null;
  /**
   * Who hears of each unit of work of the engine right now (`slipway/tracing` with
   * `unitsOfWork`), or null: then the engine does not read the clock for it.
   */
  workObserver?(): ((work: WorkDone) => void) | null;
}

/**
 * One unit of work of the engine's hot path: a claim of due work items (`claim`), or one
 * worker pass over a lease or resource (`pass`), timed on the broker's clock.
 */
export type WorkDone =
  | { unit: 'claim'; durationMs: number; claimed: number; error: unknown }
  | { unit: 'pass'; durationMs: number; kind: 'lease' | 'resource'; id: string; outcome: Exclude<Outcome['next'], 'deleted' | 'finished'> | 'error'; error: unknown };

/**
 * One blueprint hook call as `callHook` saw it: its time on the broker's clock, how it
 * ended, and for a failure the `code` of what the hook threw (null when it had none).
 */
export interface HookCall {
  blueprint: string;
  hook: string;
  outcome: 'ok' | 'retry' | 'child' | 'failed';
  durationMs: number;
  code: string | null;
  /** The lease of the hook's context (`ctx.lease`), or null: a resource's own hook, or one with no lease driving it. */
  lease: string | null;
  /** The resource of the hook's context (`ctx.resource`), or null (a lease that has none yet). */
  resource: string | null;
  /** What the hook threw, for a failure (a `HookError`, whose cause is the hook's own error); else null. */
  error: HookError | null;
}

/**
 * What one pass over an object decided about its work item. `then`: a waiting lease's
 * work item the pass's hand-off claimed for this worker, whose pass runs next.
 */
export type Outcome =
  | { next: 'park' }
  | { next: 'at'; at: DateTime; attempts?: number }
  | { next: 'delete'; then?: HandedWork }
  | { next: 'deleted'; then?: HandedWork }
  /** The statement that ended the pass also released its claim on the work item: due again at once (a wake came during the pass), at `at`, or parked. */
  | { next: 'finished'; due: boolean; at: DateTime | null };

/**
 * What one step of a lease's pass hands to the next: the lease as the step's own CAS left
 * it (no read needed), the resource it read or wrote, and whether that CAS also recorded
 * the intent of the phase that follows (so the next step calls its hook without another
 * write, and with `resume: false`). `REREAD`: read the lease again.
 */
/** A waiting lease's work item a hand-off claimed for this worker, and (`moved`) the lease as its pass would read it first, when the hand-off had it all. */
export type HandedWork = ClaimedWork & { moved?: LeaseMoved };

export interface LeaseMoved {
  lease: LeaseRow;
  resource?: ResourceRow;
  intent?: 'activate' | 'destroy';
  /** A hook of the request's fast path failed before the lease was written: the lease's first step deals with it as the allocator would. */
  trouble?: HookFailure;
}

/** A hook call that did not answer (see `callHook`). */
export type HookResult<T> =
  | { ok: true; value: T }
  | { ok: false; kind: 'retry'; at: DateTime; reason: string }
  | { ok: false; kind: 'child'; childId: string }
  | { ok: false; kind: 'failed'; error: HookError };

export type HookFailure = Exclude<HookResult<unknown>, { ok: true }>;

export const REREAD = 'reread' as const;

export type LeaseStep = Outcome | LeaseMoved | typeof REREAD;

export const PARK: Outcome = { next: 'park' };
/** The object reached its end: its work item is deleted. */
export const DROP_WORK: Outcome = { next: 'delete' };
/** The object reached its end, and the statement that ended it deleted its work item too. */
export const WORK_DROPPED: Outcome = { next: 'deleted' };
export const at = (when: DateTime, attempts?: number): Outcome => ({ next: 'at', at: when, attempts });

/** Capped exponential backoff in milliseconds: initial × 2^(attempt-1), at most max. */
export function exponentialMs(initialMs: number, maxMs: number, attempt: number): number {
  return Math.min(maxMs, initialMs * 2 ** Math.max(0, attempt - 1));
}

/** The broker's `backoff` for a hook's attempt. */
export function backoffDelay(rt: Runtime, attempt: number): Duration {
  return Duration.fromMillis(exponentialMs(rt.backoff.initial.toMillis(), rt.backoff.max.toMillis(), attempt));
}

export function blueprintsForType(rt: Runtime, type: string): Blueprint<any, any, any>[] {
  return [...rt.blueprints.values()].filter((b) => b.type === type);
}
