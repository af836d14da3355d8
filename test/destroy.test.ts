import { fakeBlueprint } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';
import { pump } from './helpers/pump.js';

guardBrokers();

// LESSONS "a destroy phase, re-driven until it succeeds"; DESIGN lifecycles: released → destroyed, every state has a driver.
describe('the destroy phase', () => {
  test('after release: releaseLease, then destroyLease; the resource is destroyed (destroyResource) only after its lease', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    await pump(broker, lease.release());
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    const hooks = () => bp.history.map((h) => h.hook).filter((h) => ['releaseLease', 'destroyLease', 'destroyResource'].includes(h));
    expect(hooks()).toEqual(['releaseLease', 'destroyLease']);
    // the lease's release leaves the resource up
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('active');
    await broker.releaseResource(lease.resource.id);
    await broker.runUntilIdle();
    expect(hooks()).toEqual(['releaseLease', 'destroyLease', 'destroyResource']);
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('destroyed');
    await broker.close();
  });

  // Invariant 3 and LESSONS "re-driven until it succeeds": retries are rows scheduled on the clock, never dropped.
  test('a failing destroyResource is retried with exponential backoff on the manual clock (1s, 2s, 4s) and ends destroyed', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { destroyResource: { throws: new Error('boom'), times: 3 } } });
    const broker = await testBroker({ blueprints: [bp] }); // backoff 1 s to 5 min
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const id = lease.resource.id;
    await pump(broker, lease.release());
    await broker.releaseResource(id);
    await broker.runUntilIdle();
    expect(bp.calls.destroyResource).toBe(1);
    // [ms to move the clock, calls expected after]: a retry only when the clock passes 1 s, then 2 s, then 4 s later
    const steps: Array<[number, number]> = [
      [999, 1], [1, 2],
      [1999, 2], [1, 3],
      [3999, 3], [1, 4],
    ];
    for (const [ms, calls] of steps) {
      await broker.advance({ milliseconds: ms });
      expect(bp.calls.destroyResource).toBe(calls);
    }
    expect((await broker.resources.get(id))!.status).toBe('destroyed');
    const failures = await broker.logs({ resource: id, type: 'hook.failure' });
    expect(failures.map((f) => [f.data.hook, f.data.retry, f.data.attempt])).toEqual([
      ['destroyResource', true, 1],
      ['destroyResource', true, 2],
      ['destroyResource', true, 3],
    ]);
    expect(failures.every((f) => String(f.data.error).includes('boom'))).toBe(true);
    // nothing more happens: destroyed is terminal
    await broker.advance({ hours: 1 });
    expect(bp.calls.destroyResource).toBe(4);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('the backoff is capped by backoff.max (1s, 2s, then 2s, 2s), and a failing destroyLease is retried the same way', async () => {
    const bp = fakeBlueprint({
      name: 'f',
      failures: { destroyResource: { throws: new Error('still there'), times: 4 }, destroyLease: { throws: new Error('busy'), times: 2 } },
    });
    const broker = await testBroker({ blueprints: [bp], backoff: { initial: { seconds: 1 }, max: { seconds: 2 } } });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const id = lease.resource.id;
    await broker.releaseResource(id);
    await broker.runUntilIdle();
    // the lease goes first: destroyLease fails, retried at +1 s, +2 s; the resource waits for it
    expect(bp.calls.destroyLease).toBe(1);
    expect(bp.calls.destroyResource).toBe(0);
    await broker.advance({ milliseconds: 1000 });
    expect(bp.calls.destroyLease).toBe(2);
    await broker.advance({ milliseconds: 1999 });
    expect(bp.calls.destroyLease).toBe(2);
    await broker.advance({ milliseconds: 1 });
    expect(bp.calls.destroyLease).toBe(3);
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    expect(bp.calls.destroyResource).toBe(1);
    const steps: Array<[number, number]> = [
      [999, 1], [1, 2],
      [1999, 2], [1, 3],
      [1999, 3], [1, 4], // capped at 2 s, not 4 s
      [1999, 4], [1, 5],
    ];
    for (const [ms, calls] of steps) {
      await broker.advance({ milliseconds: ms });
      expect(bp.calls.destroyResource).toBe(calls);
    }
    expect((await broker.resources.get(id))!.status).toBe('destroyed');
    await broker.close();
  });

  // Invariant 6: the deletion lane is counted apart from live capacity, with its age.
  test('while destroy is stuck, stats() shows the resource in the deletion lane with a growing age, and it is not capacity', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { destroyResource: { throws: new Error('boom') } } });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const stuck = lease.resource.id;
    await pump(broker, lease.release());
    await broker.releaseResource(stuck);
    await broker.runUntilIdle();
    let s = (await broker.stats()).blueprints.f!;
    expect(s.resources.released).toBe(1);
    expect(s.deletionLane).toBe(1);
    expect(s.destroying).toBe(1);
    expect(s.live).toBe(0);
    expect(s.allocating).toBe(0);
    const age0 = s.oldestAgeMs.destroying!;
    expect(age0).toBe(0);
    await broker.advance({ seconds: 30 });
    s = (await broker.stats()).blueprints.f!;
    expect(s.oldestAgeMs.destroying).toBe(30_000);
    expect(s.oldestAgeMs.released).toBe(30_000);
    await broker.advance({ minutes: 10 });
    s = (await broker.stats()).blueprints.f!;
    expect(s.oldestAgeMs.destroying).toBe(630_000);
    expect(s.deletionLane).toBe(1);
    // never dropped: retried each time the clock passed its next retry (at 30 s and at 10 min 30 s)
    expect(bp.calls.destroyResource).toBe(3);
    // a new lease is not served by the stuck resource: a new one is built
    const next = await pump(broker, broker.acquire({ type: 'fake' }));
    expect(next.resource.id).not.toBe(stuck);
    s = (await broker.stats()).blueprints.f!;
    expect(s.live).toBe(1);
    expect(s.resources.active).toBe(1);
    expect(s.deletionLane).toBe(1);
    expect((await broker.resources.get(stuck))!.status).toBe('released');
    // once the hook works again, the next retry finishes it
    bp.fail('destroyResource', undefined);
    await broker.advance({ minutes: 5 });
    s = (await broker.stats()).blueprints.f!;
    expect(s.deletionLane).toBe(0);
    expect(s.destroying).toBe(0);
    expect(s.oldestAgeMs.destroying).toBeUndefined();
    expect((await broker.resources.get(stuck))!.status).toBe('destroyed');
    await broker.close();
  });
});
