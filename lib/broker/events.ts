import { EventEmitter } from 'node:events';
import type { HookCall, WorkDone } from '../engine/runtime.js';
import type { LogEntry } from '../logs/log-types.js';
import type { LeaseStatus, ResourceStatus } from '../model/states.js';

export interface LeaseEvent {
  id: string;
  /** `null` when the lease was just created. */
  from: LeaseStatus | null;
  to: LeaseStatus;
}

export interface ResourceEvent {
  id: string;
  from: ResourceStatus | null;
  to: ResourceStatus;
}

export interface BrokerEvents {
  lease: LeaseEvent;
  resource: ResourceEvent;
  log: LogEntry;
}

/**
 * The `leaseHints` event every LISTEN hint from another broker also emits, whatever it
 * concerns: for watchers of the whole schema (the dashboard's live updates).
 */
export const ANY_HINT = Symbol('any hint');

/** The events `broker.on()` accepts. */
export const BROKER_EVENTS = ['lease', 'resource', 'log'] as const satisfies ReadonlyArray<keyof BrokerEvents>;

/**
 * Events for `slipway/metrics` and `slipway/tracing`, not accepted by `broker.on()`: each is worked out only
 * while someone listens to it, so a broker without metrics pays nothing for them.
 */
export interface InternalEvents {
  /** A blueprint hook returned, threw, or timed out (`callHook`). */
  'hook.called': HookCall;
  /** A lease became active, after waiting `waitedMs` since its request (its `createdAt`), on the broker's clock. */
  'lease.waited': { type: string; waitedMs: number };
  /** A unit of work of the engine's hot path ended: a claim of due work, or one worker pass (`slipway/tracing`). */
  'work.done': WorkDone;
}

type AllEvents = BrokerEvents & InternalEvents;

/** In-process, after-commit announcements. Hints for listeners, never the source of truth. */
export class BrokerEventBus {
  private readonly emitter = new EventEmitter({ captureRejections: false });
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  /** Listeners that want the event only while their `wants()` says so (see `on`), by event. */
  private readonly conditional = new Map<keyof AllEvents, Set<() => boolean>>();

  /**
   * `listener` for `event`. With `wants`, the listener counts for `listening(event)` only
   * while `wants()` is true: `slipway/tracing` with no SDK registered wants nothing, so
   * the engine does not work the event out for it.
   */
  on<E extends keyof AllEvents>(event: E, listener: (payload: AllEvents[E]) => void, wants?: () => boolean): () => void {
    const safe = (payload: AllEvents[E]) => {
      if (wants && !wants()) return;
      try {
        listener(payload);
      } catch {
        // A throwing listener must not break the worker that announced the change.
      }
    };
    this.emitter.on(event, safe);
    if (wants) {
      let set = this.conditional.get(event);
      if (!set) this.conditional.set(event, (set = new Set()));
      set.add(wants);
    }
    return () => {
      this.emitter.off(event, safe);
      if (wants) this.conditional.get(event)?.delete(wants);
    };
  }
  emit<E extends keyof AllEvents>(event: E, payload: AllEvents[E]) {
    this.emitter.emit(event, payload);
  }
  /** Whether anyone listens to `event`: what is costly to work out for it is skipped when not. */
  listening(event: keyof AllEvents): boolean {
    const all = this.emitter.listenerCount(event);
    if (all === 0) return false;
    const conditional = this.conditional.get(event);
    if (!conditional || conditional.size < all) return true;
    for (const wants of conditional) if (wants()) return true;
    return false;
  }
}
