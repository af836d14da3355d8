import { createBroker, type Blueprint, type Broker, type DatabaseOptions, type Lease } from '../../lib/index.js';
import type { Tier } from '../support/tiers.js';

/** A cycle that has not finished after this long is reported as stuck instead of hanging the bench. */
export const STUCK_MS = 30_000;

export class StuckCycleError extends Error {}

/** A broker with the library's defaults (4 workers, pool of 10, real clock) on a fresh schema or database. */
export async function openBroker(tier: Tier, label: string, blueprint: Blueprint<any, any, any>): Promise<{ broker: Broker; database: DatabaseOptions }> {
  const database = tier.database(label);
  const broker = await createBroker({ database, blueprints: [blueprint] });
  return { broker, database };
}

/** `work`, or a StuckCycleError naming the lease and its status if it takes longer than `limitMs`. */
export async function bounded<T>(broker: Broker, leaseId: string | null, phase: string, work: Promise<T>, limitMs = STUCK_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const stuck = new Promise<never>((_, reject) => {
    timer = setTimeout(async () => {
      if (leaseId === null) {
        // An acquire() in flight: its id is not known yet; name the leases that are not done.
        const live = (await broker.leases.list({ status: ['pending', 'acquired', 'active', 'released', 'broken'] }).catch(() => []))
          .slice(0, 10)
          .map((l) => `${l.id} ${l.status}`);
        reject(new StuckCycleError(`an acquire() still not ${phase} after ${limitMs} ms (leases not destroyed: ${live.join(', ') || 'none'})`));
        return;
      }
      const row = await broker.leases.get(leaseId).catch(() => null);
      reject(new StuckCycleError(`lease ${leaseId} still not ${phase} after ${limitMs} ms (status ${row?.status ?? 'unknown'}, resource ${row?.resourceId ?? 'none'})`));
    }, limitMs);
    timer.unref();
  });
  work.catch(() => undefined);
  try {
    return await Promise.race([work, stuck]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Lets timers run. On the embedded tier a loop of back-to-back cycles never reaches
 * the event loop's timer phase (PGlite answers through promise jobs alone, no I/O), so
 * no setTimeout fires, not the bench's clock, nor the broker's own sweep, heartbeat and
 * lease timeouts; see bench/README.md, "What limits the figures".
 */
export const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** `broker.acquire()` under the watchdog. */
export function boundedAcquire(broker: Broker, type = 'fake'): Promise<Lease> {
  return bounded(broker, null, 'active', broker.acquire({ type }));
}

/**
 * One full lease cycle: request, active, release, destroyed: `broker.acquire()` and
 * `lease.release()`, with a watchdog so that a lease that never moves fails the cycle
 * instead of the whole run, after one turn of the event loop (see `yieldToEventLoop`).
 */
export async function fullCycle(broker: Broker, type = 'fake'): Promise<void> {
  await yieldToEventLoop();
  const lease = await boundedAcquire(broker, type);
  await bounded(broker, lease.id, 'destroyed', lease.release());
}

/** Holds `count` leases at once, then releases them all: leaves `count` idle active resources of an exclusive blueprint. */
export async function prewarm(broker: Broker, count: number, type = 'fake'): Promise<void> {
  const handles = await Promise.all(Array.from({ length: count }, () => broker.requestLease({ type })));
  const leases = await Promise.all(handles.map((h) => bounded(broker, h.id, 'active', h.whenActive())));
  await Promise.all(leases.map((l, i) => bounded(broker, handles[i].id, 'destroyed', l.release())));
}
