import { createBroker, internals, type Broker, type BrokerOptions } from '../broker.js';
import { ManualClock } from './manual-clock.js';

export { ManualClock } from './manual-clock.js';
export { fakeBlueprint } from './fake-blueprint.js';
export type { FakeBlueprint, FakeBlueprintOptions, FakeFailure, FakeHook } from './fake-blueprint.js';

export interface TestBroker extends Broker {
  readonly clock: ManualClock;
  /** Runs workers until no work is due at the current (manual) time and nothing is running. */
  runUntilIdle(): Promise<void>;
  /** Moves the clock, then runs until idle. */
  advance(by: Parameters<ManualClock['advance']>[0]): Promise<void>;
}

/** An embedded, in-memory broker with a manual clock: for users' own test suites. */
export async function createTestBroker(options: Omit<BrokerOptions, 'clock'> & { clock?: ManualClock } = {}): Promise<TestBroker> {
  const clock = options.clock ?? new ManualClock();
  const broker = await createBroker({ sweepInterval: { milliseconds: 200 }, backoff: { initial: { seconds: 1 }, max: { minutes: 5 } }, ...options, clock });
  const engine = internals.get(broker)!.engine;
  const runUntilIdle = async () => {
    if (!engine) throw new Error('runUntilIdle needs a broker with workers');
    await engine.runUntilIdle();
  };
  return Object.assign(broker, {
    clock,
    runUntilIdle,
    async advance(by: Parameters<ManualClock['advance']>[0]) {
      clock.advance(by);
      await runUntilIdle();
    },
  });
}
