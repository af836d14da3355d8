import { createBroker, internals, type Broker, type BrokerOptions } from '../../lib/broker/index.js';
import { createTestBroker, type TestBroker } from '../../lib/testing/index.js';
import { testDatabase } from './tier.js';

const open = new Set<Broker>();

/**
 * A test broker on this run's tier (a fresh database each), that the leak guard closes and reports: a test that leaves a broker
 * running fails (see `afterEach` in each file via `guardBrokers()`).
 */
export async function testBroker(options: Parameters<typeof createTestBroker>[0] = {}): Promise<TestBroker> {
  return track(await createTestBroker({ database: testDatabase(), ...options }));
}

/**
 * A broker as users run it: `createBroker` on the system clock, its workers on their own
 * (no `runUntilIdle`), on this run's tier, closed by the leak guard.
 */
export async function realBroker(options: BrokerOptions = {}): Promise<Broker> {
  return track(await createBroker({ database: testDatabase(), ...options }));
}

/** Registers a broker with the leak guard; closing it unregisters it. */
export function track<B extends Broker>(broker: B): B {
  open.add(broker);
  const close = broker.close.bind(broker);
  (broker as { close: Broker['close'] }).close = async (o) => {
    open.delete(broker);
    await close(o);
  };
  return broker;
}

/** Leak guard: fails the test that left a broker open, after closing it. */
export function guardBrokers() {
  afterEach(async () => {
    const left = [...open];
    for (const b of left) await b.close({ grace: { milliseconds: 100 } });
    if (left.length > 0) throw new Error(`${left.length} broker(s) left open by this test`);
  });
}

export function engineErrors(broker: Broker): unknown[] {
  return internals.get(broker)?.engine?.errors ?? [];
}

/** Polls the test broker's workers until `done` holds (real time, bounded). */
export async function until(broker: TestBroker, done: () => Promise<boolean> | boolean, what = 'condition', ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    await broker.runUntilIdle();
    if (await done()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}
