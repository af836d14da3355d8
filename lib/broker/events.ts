import { EventEmitter } from 'node:events';
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

/** The events `broker.on()` accepts. */
export const BROKER_EVENTS = ['lease', 'resource', 'log'] as const satisfies ReadonlyArray<keyof BrokerEvents>;

/** In-process, after-commit announcements. Hints for listeners, never the source of truth. */
export class BrokerEventBus {
  private readonly emitter = new EventEmitter({ captureRejections: false });
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  on<E extends keyof BrokerEvents>(event: E, listener: (payload: BrokerEvents[E]) => void): () => void {
    const safe = (payload: BrokerEvents[E]) => {
      try {
        listener(payload);
      } catch {
        // A throwing listener must not break the worker that announced the change.
      }
    };
    this.emitter.on(event, safe);
    return () => this.emitter.off(event, safe);
  }
  emit<E extends keyof BrokerEvents>(event: E, payload: BrokerEvents[E]) {
    this.emitter.emit(event, payload);
  }
}
