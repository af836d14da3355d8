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
  on<E extends keyof AllEvents>(event: E, listener: (payload: AllEvents[E]) => void): () => void {
    const safe = (payload: AllEvents[E]) => {
      try {
        listener(payload);
      } catch {
        // A throwing listener must not break the worker that announced the change.
      }
    };
    this.emitter.on(event, safe);
    return () => this.emitter.off(event, safe);
  }
  emit<E extends keyof AllEvents>(event: E, payload: AllEvents[E]) {
    this.emitter.emit(event, payload);
  }
  /** Whether anyone listens to `event`: what is costly to work out for it is skipped when not. */
  listening(event: keyof AllEvents): boolean {
    return this.emitter.listenerCount(event) > 0;
  }
}
