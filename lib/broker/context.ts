import { EventEmitter } from 'node:events';
import type { Engine } from '../engine/engine.js';
import type { Runtime } from '../engine/runtime.js';
import type { Store } from '../store/store.js';
import type { BrokerSettings } from './options.js';

/** What the parts of one broker share; made once by `createBroker`. */
export interface BrokerContext {
  settings: BrokerSettings;
  store: Store;
  runtime: Runtime;
  /** This broker's workers; null with `workers: false`. */
  engine: Engine | null;
  /** Set when `close()` begins: new calls are refused from then on. */
  closed: boolean;
  /** Aborted once the workers have stopped. */
  abort: AbortController;
  /** Lease status changes of this process, by lease id, with the rows their writer had. */
  leaseWatchers: EventEmitter;
  /** Hints from other brokers on the same schema (LISTEN/NOTIFY), by lease id or '*': re-read. */
  leaseHints: EventEmitter;
  /** The keepalives of leases held in this process, by lease id: each entry stops its own. */
  keepAlives: Map<string, () => void>;
  /** Emits `closed` once the workers have stopped: every wait still open rejects with BrokerClosedError. */
  closedEvents: EventEmitter;
}

/** An emitter any number of waits may listen to. */
export function unboundedEmitter(): EventEmitter {
  const emitter = new EventEmitter();
  emitter.setMaxListeners(0);
  return emitter;
}
