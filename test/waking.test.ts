import { internals } from '../lib/broker/index.js';
import type { WorkDone } from '../lib/engine/runtime.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, realBroker, testBroker } from './helpers/broker.js';
import { tier } from './helpers/tier.js';
import { releaseWrittenUnwoken, untilWaiting } from './helpers/waiting-lease.js';

guardBrokers();

// Invariant 7: a freed or newly shareable resource wakes the next waiting lease at once,
// never only at the periodic recheck. The manual clock never moves here, so a lease
// served only by the recheck would stay pending.
describe('waking waiting leases', () => {
  test('two leases at once on a shared blueprint with maxResources 1: both active without the clock moving', async () => {
    for (let round = 0; round < 3; round++) {
      const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'shared', limits: { maxResources: 1 } })] });
      const a = await broker.requestLease({ type: 'fake' });
      const b = await broker.requestLease({ type: 'fake' });
      await broker.runUntilIdle();
      expect([await a.status(), await b.status()]).toEqual(['active', 'active']);
      await broker.close();
    }
  });

  test('exclusive resource: releasing the holder hands the resource to the oldest waiter, not to a newcomer', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 } })] });
    const first = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    const waiting = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await waiting.status()).toBe('pending');
    await first.release({ wait: false });
    const newcomer = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await waiting.status()).toBe('active');
    expect(await newcomer.status()).toBe('pending');
    await broker.close();
  });

  test('priority goes first among waiting leases', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 } })] });
    const holder = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    const low = await broker.requestLease({ type: 'fake', priority: 0 });
    const high = await broker.requestLease({ type: 'fake', priority: 5 });
    await broker.runUntilIdle();
    await holder.release({ wait: false });
    await broker.runUntilIdle();
    expect(await high.status()).toBe('active');
    expect(await low.status()).toBe('pending');
    await broker.close();
  });

  test('requestLease returns once the lease is recorded, while the blueprint\'s acquireLease hook still runs', async () => {
    let hold: Promise<void> | null = null;
    let open = () => {};
    const bp = fakeBlueprint({ name: 'slow', gates: { acquireLease: () => hold ?? Promise.resolve() } });
    const broker = await testBroker({ blueprints: [bp] });
    await (await broker.acquire({ type: 'fake' })).release(); // an idle active resource
    hold = new Promise<void>((resolve) => (open = resolve));
    const handle = await broker.requestLease({ type: 'fake' });
    expect(await handle.status()).toBe('pending'); // recorded; its hook is blocked
    open();
    const lease = await handle.whenActive();
    expect(lease.status).toBe('active');
    await lease.release();
    await broker.close();
  });

  test('acquire() on an idle active resource writes the lease once, already acquired: its hooks run before the row exists', async () => {
    const seen: number[] = [];
    let broker: Awaited<ReturnType<typeof testBroker>> | undefined;
    const bp = fakeBlueprint({ name: 'quick', gates: { acquireLease: async () => void seen.push((await broker!.leases.list()).filter((l) => l.status !== 'destroyed').length) } });
    broker = await testBroker({ blueprints: [bp] });
    await (await broker.acquire({ type: 'fake' })).release();
    seen.length = 0;
    const lease = await broker.acquire({ type: 'fake' });
    expect(seen).toEqual([0]); // the hook ran with no lease row yet: the fast path
    const changes = (await broker.logs({ lease: lease.id, type: 'status.changed' })).map((l) => `${(l.data as { from: string }).from}>${(l.data as { to: string }).to}`);
    expect(changes).toEqual(['pending>acquired', 'acquired>active']);
    // With an acquire timeout the hooks are not run inline (they could not honour it).
    seen.length = 0;
    const timed = await broker.acquire({ type: 'fake', timeout: { minutes: 1 } });
    expect(seen).toEqual([2]); // the lease above, and this one, recorded pending first
    await lease.release();
    await timed.release();
    await broker.close();
  });

  test.each([
    ['a worker\'s destroy pass (every per-lease hook)', [] as const],
    ['the holder\'s inline release (no releaseLease or destroyLease)', ['releaseLease', 'destroyLease'] as const],
  ])('with createBroker on the real clock, the broker that destroys the holder in %s runs the waiter\'s pass itself: no claim of the queue hands it over', async (_, without) => {
    const bp = fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 }, without: [...without] });
    const broker = await realBroker({ blueprints: [bp] });
    const work: WorkDone[] = [];
    const stop = internals.get(broker)!.events.on('work.done', (w: WorkDone) => void work.push(w));
    try {
      for (let round = 0; round < 3; round++) {
        const holder = await broker.acquire({ type: 'fake' });
        const waiter = await broker.requestLease({ type: 'fake' });
        // Its first pass over: it waits for the only resource, its work item unclaimed.
        await untilWaiting(broker, waiter.id, 10_000);
        work.length = 0;
        await holder.release();
        const lease = await waiter.whenActive({ timeout: { seconds: 10 } });
        // The waiter's pass ran, and no claim of the queue found anything to claim on the way.
        expect(work.some((w) => w.unit === 'pass' && w.kind === 'lease' && w.id === waiter.id)).toBe(true);
        expect(work.filter((w) => w.unit === 'claim').reduce((n, w) => n + (w.unit === 'claim' ? w.claimed : 0), 0)).toBe(0);
        await lease.release();
      }
    } finally {
      stop();
    }
    await broker.close();
  }, 60_000);

  test('on the real clock, a waiter with a command waiting when the hand-off claims it: the pass the hand-off runs consumes it (a release), and the lease is never activated', async () => {
    // A hand-off that wakes a waiter leaves its commands to its pass: a command that pass
    // missed would let the lease be activated although another process released it.
    const bp = fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 } });
    const broker = await realBroker({ blueprints: [bp], sweepInterval: { seconds: 60 }, waitRecheck: { seconds: 60 } });
    const holder = await broker.acquire({ type: 'fake' });
    const waiter = await broker.requestLease({ type: 'fake' });
    await untilWaiting(broker, waiter.id, 10_000);
    await releaseWrittenUnwoken(broker, waiter.id);
    await holder.release();
    const deadline = Date.now() + 10_000;
    while ((await broker.leases.get(waiter.id))!.status !== 'destroyed') {
      if (Date.now() > deadline) throw new Error(`the waiter is ${(await broker.leases.get(waiter.id))!.status}, not destroyed`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const statuses = (await broker.logs({ lease: waiter.id, type: 'status.changed' })).map((l) => (l.data as { to: string }).to);
    expect(statuses).not.toContain('active');
    expect(bp.calls.activateLease).toBe(1);
    await broker.close();
  }, 60_000);

  test(`with every per-lease hook, on the real clock: the holder's release, the destroy and its hand-off to the waiter are statements that commit by themselves, with no transaction${tier === 'embedded' ? ", and the waiter's pass reads nothing first" : ''}`, async () => {
    // Claim and release are one statement, and the destroy hands the resource on in its own
    // statement: three round trips of BEGIN and COMMIT fewer each, and no window between.
    const bp = fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 } });
    const broker = await realBroker({ blueprints: [bp], sweepInterval: { seconds: 60 } });
    const { db, store } = internals.get(broker)!;
    const transaction = db.transaction.bind(db);
    let transactions = 0;
    db.transaction = (work) => {
      transactions++;
      return transaction(work);
    };
    // Embedded, the waiter's pass starts from the rows of the statement that handed it the
    // resource: no read of the lease first. On a server it reads the lease (see Store.destroyLease).
    const read = store.lease.bind(store);
    const reads: string[] = [];
    store.lease = (id, sql) => {
      reads.push(id);
      return read(id, sql);
    };
    for (let round = 0; round < 3; round++) {
      const holder = await broker.acquire({ type: 'fake' });
      const waiter = await broker.requestLease({ type: 'fake' });
      await untilWaiting(broker, waiter.id, 10_000);
      transactions = 0;
      reads.length = 0;
      await holder.release();
      const lease = await waiter.whenActive({ timeout: { seconds: 10 } });
      expect(transactions).toBe(0);
      if (tier === 'embedded') expect(reads).not.toContain(waiter.id);
      else expect(reads).toContain(waiter.id);
      expect(lease.resource.id).toBe(holder.resource.id);
      expect(bp.calls.releaseLease).toBe(2 * round + 1);
      await lease.release();
    }
    await broker.close();
  }, 60_000);
});
