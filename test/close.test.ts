/**
 * close() as users run it (issue 9, bugs 5 and 9), on the real clock with `createBroker`.
 * The suites before closed brokers only when idle, after `runUntilIdle`: a close while
 * `acquire()` ran its hooks inline, or a second close while the first ran, was never tried.
 */
import { BrokerClosedError, type Broker } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, realBroker } from './helpers/broker.js';

guardBrokers();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A gate a hook waits on: the test sees the hook reached, and opens it (or never does). */
function gate() {
  let reached = 0;
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return {
    hook: async () => {
      reached++;
      await opened;
    },
    reached: async () => {
      const deadline = Date.now() + 10_000;
      while (reached === 0) {
        if (Date.now() > deadline) throw new Error('the gated hook was never reached');
        await sleep(5);
      }
    },
    open: () => open(),
  };
}

/** A broker whose one resource is active and free, so that the next acquire() takes the fast path (its hooks run inline). */
async function warmBroker(acquireGate: ReturnType<typeof gate>, closeGrace = { seconds: 5 }) {
  let gated = false;
  const fake = fakeBlueprint({ name: 'pool', type: 'host', exclusive: true, gates: { acquireLease: () => (gated ? acquireGate.hook() : Promise.resolve()) } });
  const broker = await realBroker({ blueprints: [fake], closeGrace });
  const first = await broker.acquire({ type: 'host', owner: 'warm-up' });
  await first.release();
  gated = true;
  return { broker, fake };
}

async function expectClosed(call: () => unknown) {
  let error: unknown;
  try {
    await call();
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(BrokerClosedError);
}

describe('close() and the hooks acquire() runs inline', () => {
  test('close() waits, within its grace, for an inline acquireLease: the lease is recorded and activated, releaseLease runs on its release', async () => {
    const g = gate();
    const { broker, fake } = await warmBroker(g);
    const acquiring = broker.acquire({ type: 'host', owner: 'ci' }).then(
      (lease) => ({ lease }),
      (error) => ({ error }),
    );
    await g.reached();
    const started = Date.now();
    const closing = broker.close();
    await sleep(300);
    g.open();
    await closing;
    expect(Date.now() - started).toBeGreaterThanOrEqual(280);
    const outcome = await acquiring;
    // The hook's result was not thrown away: the lease was recorded and activated before the database closed.
    expect(outcome).toHaveProperty('lease');
    expect(fake.calls.activateLease).toBe(2);
  });

  test('past the grace period: close() returns, acquire() rejects with BrokerClosedError (not a bare database error)', async () => {
    const g = gate();
    const { broker } = await warmBroker(g, { seconds: 5 });
    const acquiring = broker.acquire({ type: 'host', owner: 'ci' }).catch((e) => e);
    await g.reached();
    const started = Date.now();
    await broker.close({ grace: { milliseconds: 200 } });
    expect(Date.now() - started).toBeLessThan(2_000);
    g.open();
    expect(await acquiring).toBeInstanceOf(BrokerClosedError);
  });

  test('every public call on a closed broker throws BrokerClosedError', async () => {
    const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host' })] });
    const handle = await broker.requestLease({ type: 'host', owner: 'ci' });
    const lease = await handle.whenActive();
    await broker.close();
    const calls: Array<[string, () => unknown]> = [
      ['acquire', () => broker.acquire({ type: 'host' })],
      ['requestLease', () => broker.requestLease({ type: 'host' })],
      ['release', () => broker.release(lease.id)],
      ['releaseResource', () => broker.releaseResource(lease.resource.id)],
      ['reclaimResource', () => broker.reclaimResource(lease.resource.id)],
      ['breakResource', () => broker.breakResource(lease.resource.id, 'test')],
      ['leases.get', () => broker.leases.get(lease.id)],
      ['leases.list', () => broker.leases.list()],
      ['resources.get', () => broker.resources.get(lease.resource.id)],
      ['resources.list', () => broker.resources.list()],
      ['logs', () => broker.logs()],
      ['stats', () => broker.stats()],
      ['gc', () => broker.gc()],
      ['on', () => broker.on('lease', () => undefined)],
      ['handle.status', () => handle.status()],
      ['handle.whenActive', () => handle.whenActive()],
      ['handle.release', () => handle.release()],
      ['lease.release', () => lease.release()],
    ];
    for (const [, call] of calls) await expectClosed(call);
  });
});

describe('close() called twice', () => {
  test('a second close() while the first runs resolves only when the first has finished', async () => {
    const g = gate();
    const fake = fakeBlueprint({ name: 'pool', type: 'host', gates: { activateLease: g.hook } });
    const broker: Broker = await realBroker({ blueprints: [fake], closeGrace: { seconds: 5 } });
    const handle = await broker.requestLease({ type: 'host', owner: 'ci' });
    await g.reached();
    const done: string[] = [];
    const first = broker.close().then(() => done.push('first'));
    const second = broker.close().then(() => done.push('second'));
    await sleep(200);
    // The hook still runs: neither close may have finished.
    expect(done).toEqual([]);
    g.open();
    await Promise.all([first, second]);
    expect(done).toEqual(['first', 'second']);
    expect(handle.id).toMatch(/^lease_/);
  });
});

describe('disposing a lease after close (`await using` after an explicit release)', () => {
  test('a lease that release() saw destroyed disposes as a no-op, also after close', async () => {
    const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host' })] });
    const lease = await broker.acquire({ type: 'host', owner: 'job' });
    const handle = await broker.requestLease({ type: 'host', owner: 'job-2' });
    await handle.whenActive();
    await lease.release();
    await handle.release();
    await broker.close();
    await expect(lease[Symbol.asyncDispose]()).resolves.toBeUndefined();
    await expect(handle[Symbol.asyncDispose]()).resolves.toBeUndefined();
  });

  test('a lease still active when the broker closed is not silently dropped: disposing it says the broker is closed', async () => {
    const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host' })] });
    const lease = await broker.acquire({ type: 'host', owner: 'job' });
    // release({ wait: false }) wrote the command but never saw the lease destroyed.
    const other = await broker.acquire({ type: 'host', owner: 'job-2' });
    await other.release({ wait: false });
    await broker.close();
    await expect(lease[Symbol.asyncDispose]()).rejects.toBeInstanceOf(BrokerClosedError);
    await expect(other[Symbol.asyncDispose]()).rejects.toBeInstanceOf(BrokerClosedError);
  });
});
