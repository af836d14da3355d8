import { LeaseBrokenError } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';
import { gate, pump, until } from './helpers/pump.js';

guardBrokers();

// DESIGN "Blueprint contract": canEverAllocate. The allocator's candidates are the blueprints
// that are enabled, serve the lease's type, are allowed by spec.blueprints, and say yes to canEverAllocate.
describe('candidate blueprints', () => {
  test('a disabled blueprint, one of another type and one whose canEverAllocate says no are skipped', async () => {
    const disabled = fakeBlueprint({ name: 'off', enabled: false });
    const never = fakeBlueprint({ name: 'never', answers: { canEverAllocate: () => false } });
    const otherType = fakeBlueprint({ name: 'other', type: 'other' });
    const good = fakeBlueprint({ name: 'good' });
    const broker = await testBroker({ blueprints: [disabled, never, otherType, good] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    expect(lease.resource.blueprint).toBe('good');
    // a disabled blueprint is not even asked
    expect(disabled.calls.canEverAllocate).toBe(0);
    expect(disabled.calls.allocateResource).toBe(0);
    expect(never.calls.canEverAllocate).toBeGreaterThanOrEqual(1);
    expect(never.calls.canAllocate).toBe(0);
    expect(never.calls.allocateResource).toBe(0);
    expect(otherType.calls.canEverAllocate).toBe(0);
    expect(good.calls.allocateResource).toBe(1);
    expect((await broker.resources.list()).map((r) => r.blueprint)).toEqual(['good']);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('spec.blueprints chooses among two blueprints of a type', async () => {
    const a = fakeBlueprint({ name: 'a' });
    const b = fakeBlueprint({ name: 'b' });
    const broker = await testBroker({ blueprints: [a, b] });
    const onB = await pump(broker, broker.acquire({ type: 'fake', blueprints: ['b'] }));
    expect(onB.resource.blueprint).toBe('b');
    expect(a.calls.canEverAllocate).toBe(0);
    expect(a.calls.allocateResource).toBe(0);
    expect(b.calls.allocateResource).toBe(1);
    const onA = await pump(broker, broker.acquire({ type: 'fake', blueprints: ['a'] }));
    // b's active resource is not offered to a lease that allows only a
    expect(onA.resource.blueprint).toBe('a');
    expect(onA.resource.id).not.toBe(onB.resource.id);
    expect(a.calls.allocateResource).toBe(1);
    await broker.close();
  });

  test('canEverAllocate sees the lease attributes: only the blueprint that says yes serves it', async () => {
    const linux = fakeBlueprint({ name: 'linux', answers: { canEverAllocate: (l) => l.os === 'linux' } });
    const mac = fakeBlueprint({ name: 'mac', answers: { canEverAllocate: (l) => l.os === 'mac' } });
    const broker = await testBroker({ blueprints: [linux, mac] });
    const lease = await pump(broker, broker.acquire({ type: 'fake', attributes: { os: 'mac' } }));
    expect(lease.resource.blueprint).toBe('mac');
    expect(linux.calls.allocateResource).toBe(0);
    expect(linux.calls.canAllocate).toBe(0);
    await broker.close();
  });
});

describe('no candidate', () => {
  test('the lease breaks at once; acquire() rejects with LeaseBrokenError naming the type and the blueprints considered', async () => {
    const off = fakeBlueprint({ name: 'off-bp', enabled: false });
    const never = fakeBlueprint({ name: 'never-bp', answers: { canEverAllocate: () => false } });
    const broker = await testBroker({ blueprints: [off, never] });
    const acquiring = broker.acquire({ type: 'fake' });
    const error = await pump(broker, acquiring).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LeaseBrokenError);
    const message = (error as Error).message;
    expect(message).toContain('no blueprint can ever serve a lease of type "fake"');
    expect(message).toContain('considered: off-bp, never-bp');
    expect(message).toContain('off-bp is disabled');
    expect(message).toContain('never-bp: canEverAllocate said no');
    expect(String((error as Error).cause)).toContain('type "fake"');
    // at once: no clock movement was needed, nothing was built, nothing waits
    const [lease] = await broker.leases.list();
    expect(lease!.brokenReason).toContain('considered: off-bp, never-bp');
    expect(lease!.status).toBe('destroyed');
    expect(await broker.resources.list()).toEqual([]);
    expect(never.calls.canAllocate).toBe(0);
    expect(await broker.logs({ lease: lease!.id, type: 'lease.waiting-for-resources' })).toHaveLength(0);
    expect(await broker.logs({ lease: lease!.id, type: 'lease.broken' })).toHaveLength(1);
    await broker.close();
  });
});

describe('allocator order', () => {
  test('1. an idle active resource is acquired before any allocation is considered', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const first = await pump(broker, broker.acquire({ type: 'fake' }));
    await pump(broker, first.release());
    expect(bp.calls.canAllocate).toBe(1);
    const second = await pump(broker, broker.acquire({ type: 'fake' }));
    expect(second.resource.id).toBe(first.resource.id);
    expect(bp.calls.allocateResource).toBe(1);
    // the allocate branch was never entered
    expect(bp.calls.canAllocate).toBe(1);
    expect(await broker.resources.list()).toHaveLength(1);
    await broker.close();
  });

  test('2. a new resource only when canAllocate says yes; otherwise the lease waits (one log row) and allocates once it does', async () => {
    let capacity = false;
    const bp = fakeBlueprint({ name: 'f', answers: { canAllocate: () => capacity } });
    const broker = await testBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('pending');
    expect(await broker.resources.list()).toEqual([]);
    expect(bp.calls.allocateResource).toBe(0);
    // Invariant 5: waiting never writes a new row per poll
    for (let i = 0; i < 4; i++) await broker.advance({ seconds: 31 });
    const waits = await broker.logs({ lease: handle.id, type: 'lease.waiting-for-resources' });
    expect(waits).toHaveLength(1);
    expect(waits[0]!.count).toBeGreaterThanOrEqual(5);
    expect(waits[0]!.data.reasons).toContain('f has no capacity now');
    expect(bp.calls.canAllocate).toBeGreaterThanOrEqual(5);
    capacity = true;
    await broker.advance({ seconds: 31 });
    expect(await handle.status()).toBe('active');
    expect(bp.calls.allocateResource).toBe(1);
    await broker.close();
  });

  test('2. maxResources stops allocation: a second exclusive lease waits, it does not build a second resource', async () => {
    const bp = fakeBlueprint({ name: 'f', exclusive: true, limits: { maxResources: 1 } });
    const broker = await testBroker({ blueprints: [bp] });
    const first = await pump(broker, broker.acquire({ type: 'fake' }));
    const second = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    await broker.advance({ minutes: 5 });
    expect(await second.status()).toBe('pending');
    expect(bp.calls.allocateResource).toBe(1);
    expect(await broker.resources.list()).toHaveLength(1);
    const [wait] = await broker.logs({ lease: second.id, type: 'lease.waiting-for-resources' });
    expect(wait!.data.reasons).toContain('f is full: none of its resources has room for another lease (at most 1 lease each: maxLeasesPerResource), and it may build no more than 1 resource (maxResources)');
    // Invariant 7: freed capacity serves the waiter at once, no clock movement
    await first.release({ wait: false });
    await broker.runUntilIdle();
    expect(await second.status()).toBe('active');
    expect(bp.calls.allocateResource).toBe(1);
    await broker.close();
  });

  test('3. at maxResources, an idle resource that cannot take the lease is reclaimed, destroyed, and a new one built for it', async () => {
    const bp = fakeBlueprint({
      name: 'f',
      limits: { maxResources: 1 },
      answers: { canAcquireLease: (lease, resource) => (resource.builtFor as { os?: string } | undefined)?.os === lease.os },
    });
    const broker = await testBroker({ blueprints: [bp] });
    const linux = await pump(broker, broker.acquire({ type: 'fake', attributes: { os: 'linux' } }));
    const oldId = linux.resource.id;
    await pump(broker, linux.release());
    expect((await broker.resources.get(oldId))!.status).toBe('active');
    const mac = await pump(broker, broker.acquire({ type: 'fake', attributes: { os: 'mac' } }));
    expect(mac.resource.id).not.toBe(oldId);
    expect(mac.resource.attributes).toEqual({ builtFor: { os: 'mac' } });
    expect((await broker.resources.get(oldId))!.status).toBe('destroyed');
    expect(bp.calls.allocateResource).toBe(2);
    expect(bp.calls.destroyResource).toBe(1);
    expect(bp.history.filter((h) => h.hook === 'destroyResource').map((h) => h.id)).toEqual([oldId]);
    // the old one was destroyed before the new one was allocated (the cap is never exceeded)
    const destroyedAt = bp.history.findIndex((h) => h.hook === 'destroyResource');
    const allocatedAt = bp.history.findLastIndex((h) => h.hook === 'allocateResource');
    expect(destroyedAt).toBeLessThan(allocatedAt);
    const reclaim = await broker.logs({ type: 'lease.reclaim' });
    expect(reclaim).toHaveLength(1);
    expect(reclaim[0]!.lease).toBe(mac.id);
    expect(reclaim[0]!.resource).toBe(oldId);
    expect(await broker.logs({ resource: oldId, type: 'resource.reclaimed' })).toHaveLength(1);
    await broker.close();
  });

  test('3. reclaimIdleAfter: an idle resource is not reclaimed before it has been idle that long', async () => {
    const bp = fakeBlueprint({
      name: 'f',
      limits: { maxResources: 1, reclaimIdleAfter: { minutes: 10 } },
      answers: { canAcquireLease: (lease, resource) => (resource.builtFor as { os?: string } | undefined)?.os === lease.os },
    });
    const broker = await testBroker({ blueprints: [bp] });
    const linux = await pump(broker, broker.acquire({ type: 'fake', attributes: { os: 'linux' } }));
    const oldId = linux.resource.id;
    await pump(broker, linux.release());
    const mac = await broker.requestLease({ type: 'fake', attributes: { os: 'mac' } });
    await broker.runUntilIdle();
    for (let i = 0; i < 9; i++) await broker.advance({ minutes: 1 });
    await broker.advance({ seconds: 59 });
    expect(await mac.status()).toBe('pending');
    expect((await broker.resources.get(oldId))!.status).toBe('active');
    expect(bp.calls.destroyResource).toBe(0);
    expect(await broker.logs({ type: 'lease.reclaim' })).toHaveLength(0);
    // past 10 minutes idle (the next recheck of the waiting lease): reclaimed
    await broker.advance({ seconds: 31 });
    await broker.runUntilIdle();
    expect((await broker.resources.get(oldId))!.status).toBe('destroyed');
    expect(await mac.status()).toBe('active');
    expect(await broker.logs({ type: 'lease.reclaim' })).toHaveLength(1);
    await broker.close();
  });

  test('4. otherwise the lease waits: a leased resource is never reclaimed, and no row is written per recheck', async () => {
    const bp = fakeBlueprint({ name: 'f', exclusive: true, limits: { maxResources: 1 } });
    const broker = await testBroker({ blueprints: [bp] });
    const first = await pump(broker, broker.acquire({ type: 'fake' }));
    const second = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    for (let i = 0; i < 5; i++) await broker.advance({ minutes: 1 });
    expect(await second.status()).toBe('pending');
    expect(bp.calls.allocateResource).toBe(1);
    expect(bp.calls.destroyResource).toBe(0);
    expect(await broker.logs({ type: 'lease.reclaim' })).toHaveLength(0);
    expect((await broker.resources.get(first.resource.id))!.status).toBe('active');
    const waits = await broker.logs({ lease: second.id, type: 'lease.waiting-for-resources' });
    expect(waits).toHaveLength(1);
    expect(waits[0]!.count).toBeGreaterThanOrEqual(5);
    await first.release({ wait: false });
    await second.release({ wait: false });
    await broker.runUntilIdle();
    await broker.close();
  });
});

// Invariant 5 ("supplemental blueprints grow before they share")
describe('supplemental', () => {
  test('with limits.supplemental a second lease grows the pool instead of sharing a leased resource', async () => {
    const bp = fakeBlueprint({ name: 'f', limits: { supplemental: true } });
    const broker = await testBroker({ blueprints: [bp] });
    const a = await pump(broker, broker.acquire({ type: 'fake' }));
    const b = await pump(broker, broker.acquire({ type: 'fake' }));
    expect(b.resource.id).not.toBe(a.resource.id);
    expect(bp.calls.allocateResource).toBe(2);
    expect(await broker.resources.list({ status: 'active' })).toHaveLength(2);
    await broker.close();
  });

  test('without it, a second lease shares the leased (non-exclusive) resource', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const a = await pump(broker, broker.acquire({ type: 'fake' }));
    const b = await pump(broker, broker.acquire({ type: 'fake' }));
    expect(b.resource.id).toBe(a.resource.id);
    expect(bp.calls.allocateResource).toBe(1);
    expect(bp.calls.canAllocate).toBe(1);
    expect(await broker.leases.list({ resource: a.resource.id, status: 'active' })).toHaveLength(2);
    await broker.close();
  });
});

// Invariant 5: a pending lease drives at most one allocation at a time.
describe('one allocation in flight per pending lease', () => {
  test('while allocateResource is held, rechecks of the lease build no second resource, even with room in the allocation limit', async () => {
    const held = gate();
    // The 30 minutes the clock moves below stay within the hook's timeout.
    const bp = fakeBlueprint({ name: 'f', gates: { allocateResource: held.wait }, limits: { allocationLimit: () => 10 }, timeouts: { allocateResource: { hours: 2 } } });
    const broker = await testBroker({ blueprints: [bp], waitRecheck: { seconds: 1 } });
    const handle = await broker.requestLease({ type: 'fake' });
    // the hook blocks, so runUntilIdle would never return: let the workers run on real time and move the clock by hand
    await until('the allocation to start', () => bp.calls.allocateResource >= 1);
    expect(bp.calls.allocateResource).toBe(1);
    // Each move of the clock makes the lease's recheck due; wait (bounded) for it to run, as a
    // loaded machine may take longer than any fixed pause, and rechecks must not merge.
    const waits = async () => (await broker.logs({ lease: handle.id, type: 'lease.waiting-for-resources' }))[0]?.count ?? 0;
    for (let i = 0; i < 6; i++) {
      const before = await waits();
      broker.clock.advance({ minutes: 5 });
      await until('a recheck of the lease', async () => (await waits()) > before);
    }
    const pending = await broker.resources.list({ status: 'pending' });
    expect(pending).toHaveLength(1);
    expect(await broker.resources.list()).toHaveLength(1);
    expect(bp.calls.allocateResource).toBe(1);
    expect(bp.calls.canAllocate).toBe(1);
    expect(await handle.status()).toBe('pending');
    // the lease did look again (its rechecks ran) and waited for its one allocation
    const [wait] = await broker.logs({ lease: handle.id, type: 'lease.waiting-for-resources' });
    expect(wait!.count).toBeGreaterThanOrEqual(3);
    expect(wait!.data.reasons).toEqual([`waiting for resource ${pending[0]!.id} to activate`]);
    held.open();
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('active');
    expect(await broker.resources.list()).toHaveLength(1);
    expect(bp.calls.allocateResource).toBe(1);
    await broker.close();
  });
});

// Invariant 5 (bounded mess): a blueprint that refuses the very resource it built for a
// lease must not make the allocator reclaim and rebuild it forever.
describe('no reclaim churn', () => {
  test('maxResources 1 and a canAcquireLease that always refuses: one resource is built, the lease waits', async () => {
    const bp = fakeBlueprint({ name: 'refuser', limits: { maxResources: 1 }, answers: { canAcquireLease: () => false } });
    const broker = await testBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    await broker.advance({ seconds: 31 });
    await broker.advance({ seconds: 31 });
    expect(bp.calls.allocateResource).toBe(1);
    expect(await handle.status()).toBe('pending');
    await broker.close();
  });
});
