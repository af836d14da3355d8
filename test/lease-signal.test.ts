import { internals } from '../lib/broker/index.js';
import { systemClock, type Clock } from '../lib/clock.js';
import { createBroker, LeaseNotActiveError, SlipwayError, type Broker, type Lease } from '../lib/index.js';
import { watching } from '../lib/broker/lease-signal.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { describeOnPostgres, freshSchema, testDatabase, tierUrl } from './helpers/tier.js';

guardBrokers();

// Invariant 9: a lease's `signal` aborts when it leaves `active`. Real clock, real workers.

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// How late after expiresAt the signal may abort. It aborts after a read of the lease at the
// expiry (which waits for a renewal being written), so the bound covers a timer and a read
// on a loaded server: with both tiers running at once, one read took 121 ms against the 100
// this bound used to be. A signal that waited for the worker's pass instead would be late by
// the pass (the second test holds the only worker for good).
const LATE_MS = 250;

/** A real broker on this run's tier with one exclusive fake blueprint. */
async function realBroker(options: Parameters<typeof fakeBlueprint>[0] = {}, extra: Partial<Parameters<typeof createBroker>[0]> = {}): Promise<Broker> {
  return track(
    await createBroker({ database: testDatabase(), blueprints: [fakeBlueprint({ name: 'pool', exclusive: true, ...options })], sweepInterval: { milliseconds: 100 }, ...extra }),
  );
}

/** When the signal aborted (Date.now()), and its reason. */
function aborted(signal: AbortSignal, within = 10_000): Promise<{ at: number; reason: unknown }> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve({ at: Date.now(), reason: signal.reason });
    const timer = setTimeout(() => reject(new Error(`the lease signal did not abort within ${within} ms`)), within);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve({ at: Date.now(), reason: signal.reason })), { once: true });
  });
}

function expectNotActive(reason: unknown, lease: Lease, why: LeaseNotActiveError['why']) {
  expect(reason).toBeInstanceOf(LeaseNotActiveError);
  expect(reason).toBeInstanceOf(SlipwayError);
  expect(reason).toMatchObject({ code: 'LEASE_NOT_ACTIVE', leaseId: lease.id, why });
  expect((reason as Error).message).toContain(lease.id);
}

const storeOf = (broker: Broker) => internals.get(broker)!.runtime.store;

describe('lease.signal', () => {
  test('is not aborted while the lease is active', async () => {
    const broker = await realBroker();
    const lease = await broker.acquire({ type: 'fake', ttl: { seconds: 30 } });
    expect(lease.signal).toBeInstanceOf(AbortSignal);
    expect(lease.signal).toBe(lease.signal);
    await sleep(300);
    expect(lease.signal.aborted).toBe(false);
    await lease.release();
    await broker.close();
  });

  test('aborts at expiresAt, on the real clock, with a LeaseNotActiveError (expired)', async () => {
    const broker = await realBroker();
    // The ttl runs from the request: long enough that a loaded machine builds the resource and hands the lease over before it (1 s was not).
    const lease = await broker.acquire({ type: 'fake', ttl: { milliseconds: 5_000 } });
    const { at, reason } = await aborted(lease.signal);
    expect(at).toBeGreaterThanOrEqual(lease.expiresAt!.toMillis() - 5);
    expect(at - lease.expiresAt!.toMillis()).toBeLessThan(LATE_MS);
    expectNotActive(reason, lease, 'expired');
    await broker.close();
  });

  test('aborts at expiresAt even while no worker has processed the expiry yet', async () => {
    let hold: (() => void) | undefined;
    const gate = new Promise<void>((r) => (hold = r));
    let activations = 0;
    // One worker; the second lease's activation holds it, so the first lease's expiry waits.
    const broker = await realBroker(
      { exclusive: false, gates: { activateLease: () => (++activations === 1 ? Promise.resolve() : gate) } },
      { workers: { concurrency: 1 } },
    );
    const lease = await broker.acquire({ type: 'fake', ttl: { milliseconds: 5_000 } });
    const other = await broker.requestLease({ type: 'fake' });
    void lease.signal;
    const { at, reason } = await aborted(lease.signal);
    expect(at - lease.expiresAt!.toMillis()).toBeLessThan(LATE_MS);
    expectNotActive(reason, lease, 'expired');
    // The worker is still held: the row still says active, the signal knew from the clock.
    expect((await broker.leases.get(lease.id))?.status).toBe('active');
    hold!();
    await (await other.whenActive()).release();
    await broker.close();
  });

  test('aborts when the lease is released by id through the broker (released)', async () => {
    const broker = await realBroker();
    const lease = await broker.acquire({ type: 'fake' });
    const signal = lease.signal;
    await broker.release(lease.id);
    const { reason } = await aborted(signal, 3_000);
    expectNotActive(reason, lease, 'released');
    await broker.close();
  });

  test('aborts when its resource is broken (broken)', async () => {
    const broker = await realBroker();
    const lease = await broker.acquire({ type: 'fake' });
    const signal = lease.signal;
    await broker.breakResource(lease.resource.id, 'the disk is on fire');
    const { reason } = await aborted(signal, 3_000);
    expectNotActive(reason, lease, 'broken');
    await broker.close();
  });

  test('is already aborted when lease.release() resolves, even if it was never read before', async () => {
    const broker = await realBroker();
    const lease = await broker.acquire({ type: 'fake' });
    await lease.release();
    expect(lease.signal.aborted).toBe(true);
    expectNotActive(lease.signal.reason, lease, 'released');
    await broker.close();
  });

  test('read for the first time after the lease ended, it aborts from a read of the row', async () => {
    const broker = await realBroker();
    const lease = await broker.acquire({ type: 'fake' });
    await broker.release(lease.id);
    while ((await broker.leases.get(lease.id))?.status !== 'destroyed') await sleep(20);
    const { reason } = await aborted(lease.signal, 1_000);
    expectNotActive(reason, lease, 'released');
    await broker.close();
  });

  test('a lease nobody reads the signal of is not watched; a watch ends when the lease leaves active', async () => {
    const broker = await realBroker();
    const unwatched = await broker.acquire({ type: 'fake', ttl: { seconds: 30 } });
    expect(watching(storeOf(broker))).toEqual({ leases: 0, polling: false });
    await unwatched.release();

    const lease = await broker.acquire({ type: 'fake', ttl: { seconds: 30 } });
    void lease.signal;
    expect(watching(storeOf(broker))).toEqual({ leases: 1, polling: true });
    await broker.release(lease.id);
    await aborted(lease.signal, 3_000);
    expect(watching(storeOf(broker))).toEqual({ leases: 0, polling: false });
    await broker.close();
  });

  test('close() removes every watch and timer of the signals, and the clock is left with nothing scheduled', async () => {
    const pending = new Set<object>();
    // The system clock, counting what is scheduled on it and not yet fired or cancelled.
    const counting: Clock = {
      now: () => systemClock.now(),
      schedule(at, fn) {
        const token = {};
        pending.add(token);
        const cancel = systemClock.schedule(at, () => (pending.delete(token), fn()));
        return () => (pending.delete(token), cancel());
      },
    };
    const broker = await realBroker({}, { clock: counting });
    const leases = await Promise.all([1, 2, 3].map(() => broker.acquire({ type: 'fake', ttl: { minutes: 10 } })));
    for (const lease of leases) void lease.signal;
    expect(watching(storeOf(broker))).toEqual({ leases: 3, polling: true });
    const store = storeOf(broker);
    await broker.close();
    expect(watching(store)).toEqual({ leases: 0, polling: false });
    expect(pending.size).toBe(0);
    // Closed, the broker no longer knows: a signal not aborted by then stays as it was.
    expect(leases.every((l) => !l.signal.aborted)).toBe(true);
  });
});

describeOnPostgres('lease.signal across brokers on one schema', () => {
  async function twoBrokers(sweepMs: number) {
    const schema = freshSchema();
    const database = { url: tierUrl!, schema, poolSize: 4 };
    const blueprint = () => fakeBlueprint({ name: 'pool', exclusive: true });
    // The holder has no workers: every status change of its lease is written by the other broker.
    const holder = track(await createBroker({ database, blueprints: [blueprint()], workers: false, sweepInterval: { milliseconds: sweepMs } }));
    const worker = track(await createBroker({ database, blueprints: [blueprint()], sweepInterval: { milliseconds: 100 } }));
    return { holder, worker };
  }

  test('a release written by another broker aborts the signal, woken by its NOTIFY (no sweep in time)', async () => {
    const { holder, worker } = await twoBrokers(60_000);
    const lease = await holder.acquire({ type: 'fake', timeout: { seconds: 10 } });
    const signal = lease.signal;
    const started = Date.now();
    await worker.release(lease.id);
    const { reason } = await aborted(signal, 5_000);
    expect(Date.now() - started).toBeLessThan(3_000);
    expectNotActive(reason, lease, 'released');
    await holder.close();
    await worker.close();
  });

  test('a resource broken through another broker aborts the signal (broken)', async () => {
    const { holder, worker } = await twoBrokers(60_000);
    const lease = await holder.acquire({ type: 'fake', timeout: { seconds: 10 } });
    const signal = lease.signal;
    await worker.breakResource(lease.resource.id, 'lost power');
    const { reason } = await aborted(signal, 5_000);
    expectNotActive(reason, lease, 'broken');
    await holder.close();
    await worker.close();
  });
});
