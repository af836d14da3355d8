import { createBroker, internals, type Broker, type BrokerOptions } from '../broker/index.js';
import { ValidationError } from '../errors/validation-error.js';
import { ID_SOURCE, type IdSource } from '../store/store.js';
import { ManualClock } from './manual-clock.js';

export { ManualClock } from './manual-clock.js';
export { fakeBlueprint } from './fake-blueprint.js';
export type { FakeBlueprint, FakeBlueprintOptions, FakeCommandCall, FakeCommandOptions, FakeCommandReply, FakeFailure, FakeHook } from './fake-blueprint.js';

export interface TestBrokerOptions extends Omit<BrokerOptions, 'clock'> {
  /** @defaultValue a new ManualClock at 2030-01-01T00:00:00Z */
  clock?: ManualClock;
  /**
   * Number leases and resources in the order they are created, per broker (`lease_0001`,
   * `res_0001`, ...) instead of random ids, so ids, logs and snapshots are the same on
   * every run. The numbers start at 1 for each broker, so they suit a fresh database only:
   * a second broker on the same data would reuse them.
   * @defaultValue true on the default in-memory database; false with a `dataDir` or a `url`
   */
  deterministicIds?: boolean;
}

export interface TestBroker extends Broker {
  readonly clock: ManualClock;
  /** Runs workers until no work is due at the current (manual) time and nothing is running. */
  runUntilIdle(): Promise<void>;
  /** Moves the clock, then runs until idle. */
  advance(by: Parameters<ManualClock['advance']>[0]): Promise<void>;
}

/** `lease_0001`, `res_0001`, ...: one counter per prefix. */
function numberedIds(): IdSource {
  const next = { lease: 0, res: 0 };
  return (prefix) => `${prefix}_${String(++next[prefix]).padStart(4, '0')}`;
}

/** Whether `database` is a fresh one of this broker's own: the default, in-memory PGlite. */
function inMemory(database: BrokerOptions['database']): boolean {
  return database === undefined || (typeof database === 'object' && database !== null && 'embedded' in database && database.dataDir === undefined);
}

/**
 * An embedded, in-memory broker with a manual clock and numbered ids: for users' own test
 * suites. Any `createBroker` option may be given (a `database` on PostgreSQL too).
 */
export async function createTestBroker(options: TestBrokerOptions = {}): Promise<TestBroker> {
  const { deterministicIds, ...brokerOptions } = options;
  if (deterministicIds !== undefined && typeof deterministicIds !== 'boolean') throw new ValidationError('deterministicIds', 'must be a boolean');
  const clock = options.clock ?? new ManualClock();
  // An id source given under ID_SOURCE (slipway's own tests: seeded ids) wins over the numbered ones.
  const given = (options as { [ID_SOURCE]?: IdSource })[ID_SOURCE];
  const ids = given ? {} : (deterministicIds ?? inMemory(options.database)) ? { [ID_SOURCE]: numberedIds() } : {};
  const broker = await createBroker({ sweepInterval: { milliseconds: 200 }, backoff: { initial: { seconds: 1 }, max: { minutes: 5 } }, ...brokerOptions, clock, ...ids });
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
