import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker } from './helpers/broker.js';

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
});
