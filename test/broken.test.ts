import { LeaseBrokenError, RetryLater } from '../lib/index.js';
import { fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';

guardBrokers();

/** Every status a lease or resource passed through, from the broker's events. */
function statusTrail(broker: TestBroker) {
  const trail = new Map<string, string[]>();
  const add = (e: { id: string; to: string }) => trail.set(e.id, [...(trail.get(e.id) ?? []), e.to]);
  broker.on('lease', add);
  broker.on('resource', add);
  return (id: string) => trail.get(id) ?? [];
}

// DESIGN "Blueprint contract": any error other than RetryLater breaks the object with its cause recorded.
// Invariants 2 (the hook runs outside any transaction, its outcome is recorded after) and 3 (the cause is a row).
describe('a hook that throws breaks its object', () => {
  test('activateResource throws an Error: the resource breaks, its log has hook.failure with hook name and message', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { activateResource: { throws: new Error('disk on fire'), times: 1 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const trail = statusTrail(broker);
    const handle = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    // a failed build: the lease backs off (backoff.initial, 1 s) before it allocates again
    expect(await broker.resources.list()).toHaveLength(1);
    await broker.advance({ seconds: 1 });
    const resources = await broker.resources.list();
    // the first resource broke, a second one (failure was once) serves the lease
    expect(resources).toHaveLength(2);
    const first = resources.find((r) => r.brokenReason !== null);
    const second = resources.find((r) => r.brokenReason === null);
    expect(trail(first!.id)).toContain('broken');
    expect(first!.brokenReason).toMatch(/disk on fire/);
    expect(second!.status).toBe('active');
    const failures = await broker.logs({ resource: first!.id, type: 'hook.failure' });
    expect(failures).toHaveLength(1);
    expect(failures[0]!.data).toMatchObject({ hook: 'activateResource', retry: false });
    expect(String(failures[0]!.data.error)).toMatch(/disk on fire/);
    expect(failures[0]!.message).toMatch(/activateResource/);
    expect(failures[0]!.message).toMatch(/disk on fire/);
    expect(await broker.logs({ resource: first!.id, type: 'resource.broken' })).toHaveLength(1);
    // the healthy resource has no failure in its log
    expect(await broker.logs({ resource: second!.id, type: 'hook.failure' })).toHaveLength(0);
    expect(await handle.status()).toBe('active');
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test.each([
    ['a string', 'plain string thrown', /plain string thrown/],
    ['an object with a code', { code: 'E_QUOTA', detail: 'quota' }, /E_QUOTA/],
    ['a TypeError', new TypeError('undefined is not a function'), /undefined is not a function/],
  ])('allocateResource throws %s: the resource breaks with it in its log', async (_what, thrown, pattern) => {
    const bp = fakeBlueprint({ name: 'f', failures: { allocateResource: { throws: thrown, times: 1 } } });
    const broker = await testBroker({ blueprints: [bp] });
    await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    await broker.advance({ seconds: 1 }); // the lease's backoff after a failed build
    const resources = await broker.resources.list();
    expect(resources).toHaveLength(2);
    const first = resources.find((r) => r.brokenReason !== null);
    expect(first!.brokenReason).toMatch(pattern);
    const [failure] = await broker.logs({ resource: first!.id, type: 'hook.failure' });
    expect(failure!.data.hook).toBe('allocateResource');
    expect(String(failure!.data.error)).toMatch(pattern);
    if (typeof thrown === 'object' && thrown && 'code' in thrown) expect(failure!.data.code).toBe('E_QUOTA');
    // a broken resource is destroyed (deletion lane driven to its end)
    expect(first!.status).toBe('destroyed');
    expect(bp.calls.destroyResource).toBeGreaterThanOrEqual(1);
    await broker.close();
  });

  test('a lease hook (activateLease) throws: the lease breaks, the error is in the lease log, acquire() rejects with LeaseBrokenError and the cause', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { activateLease: { throws: new Error('cannot mount workspace') } } });
    const broker = await testBroker({ blueprints: [bp] });
    const trail = statusTrail(broker);
    const acquiring = broker.acquire({ type: 'fake' });
    const rejection = expect(acquiring).rejects.toBeInstanceOf(LeaseBrokenError);
    await broker.runUntilIdle();
    await rejection;
    const error = (await acquiring.catch((e) => e)) as LeaseBrokenError;
    expect(error.code).toBe('LEASE_BROKEN');
    expect(error.message).toMatch(/cannot mount workspace/);
    expect(String(error.cause)).toMatch(/cannot mount workspace/);
    const [lease] = await broker.leases.list();
    expect(error.leaseId).toBe(lease!.id);
    expect(trail(lease!.id)).toContain('broken');
    expect(lease!.brokenReason).toMatch(/cannot mount workspace/);
    const failures = await broker.logs({ lease: lease!.id, type: 'hook.failure' });
    expect(failures).toHaveLength(1);
    expect(failures[0]!.data).toMatchObject({ hook: 'activateLease' });
    expect(failures[0]!.message).toMatch(/activateLease failed: .*cannot mount workspace/);
    // the resource itself is fine
    const [resource] = await broker.resources.list();
    expect(resource!.status).toBe('active');
    await broker.close();
  });

  test('acquireLease throws: the lease breaks (not the resource) and acquire() rejects with the cause', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { acquireLease: { throws: new Error('no seat') } } });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake' }).catch((e) => e);
    await broker.runUntilIdle();
    const error = await acquiring;
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect(error.message).toMatch(/no seat/);
    const [lease] = await broker.leases.list();
    expect(lease!.brokenReason).toMatch(/no seat/);
    const [failure] = await broker.logs({ lease: lease!.id, type: 'hook.failure' });
    expect(failure!.data.hook).toBe('acquireLease');
    await broker.close();
  });
});

// DESIGN "Blueprint contract": RetryLater is not a failure; the hook is called again after its duration (manual clock).
describe('RetryLater', () => {
  test('allocateResource throws RetryLater(1 minute): nothing breaks, the hook is called again only once the clock passes the minute', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { allocateResource: { throws: new RetryLater('host busy', { minutes: 1 }), times: 1 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const trail = statusTrail(broker);
    const handle = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(bp.calls.allocateResource).toBe(1);
    const [resource] = await broker.resources.list();
    expect(resource!.status).toBe('pending');
    expect(await broker.logs({ type: 'hook.failure' })).toHaveLength(0);
    const [retry] = await broker.logs({ resource: resource!.id, type: 'hook.retry-later' });
    expect(retry!.data).toMatchObject({ hook: 'allocateResource', reason: 'host busy' });
    expect(retry!.data.retryAt).toBe(broker.clock.now().plus({ minutes: 1 }).toISO());

    await broker.advance({ seconds: 59 });
    expect(bp.calls.allocateResource).toBe(1);
    expect(await handle.status()).toBe('pending');

    await broker.advance({ seconds: 1 });
    expect(bp.calls.allocateResource).toBe(2);
    expect((await broker.resources.get(resource!.id))!.status).toBe('active');
    expect(await handle.status()).toBe('active');
    expect(trail(resource!.id)).not.toContain('broken');
    expect(await broker.resources.list()).toHaveLength(1);
    await broker.close();
  });

  test('activateLease throws RetryLater: the lease stays acquired and activates after the delay', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { activateLease: { throws: new RetryLater('warming up', { seconds: 30 }), times: 2 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('acquired');
    expect(bp.calls.activateLease).toBe(1);
    await broker.advance({ seconds: 30 });
    expect(bp.calls.activateLease).toBe(2);
    expect(await handle.status()).toBe('acquired');
    await broker.advance({ seconds: 30 });
    expect(bp.calls.activateLease).toBe(3);
    expect(await handle.status()).toBe('active');
    expect(await broker.logs({ type: 'hook.failure' })).toHaveLength(0);
    expect(await broker.logs({ lease: handle.id, type: 'hook.retry-later' })).toHaveLength(2);
    await broker.close();
  });
});

// DESIGN "Lifecycles": a broken resource breaks its leases (with the cause); leases still waiting re-allocate.
// Invariant 1: breakResource writes a command; the resource's worker makes the change.
describe('breaking a resource', () => {
  test('breakResource(id, reason) on an active resource breaks its active leases with the cause', async () => {
    // maxResources 1: both leases share the one resource
    const bp = fakeBlueprint({ name: 'f', limits: { maxResources: 1 } });
    const broker = await testBroker({ blueprints: [bp] });
    const trail = statusTrail(broker);
    const a = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    const b = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await a.status()).toBe('active');
    expect(await b.status()).toBe('active');
    const leases = await broker.leases.list();
    const resourceId = leases[0]!.resourceId!;
    expect(leases.every((l) => l.resourceId === resourceId)).toBe(true);

    await broker.breakResource(resourceId, 'kernel panic');
    // invariant 1: only a command was written; the resource is still active until its worker runs
    expect((await broker.resources.get(resourceId))!.status).toBe('active');
    await broker.runUntilIdle();

    const resource = (await broker.resources.get(resourceId))!;
    expect(trail(resourceId)).toContain('broken');
    expect(resource.brokenReason).toBe('kernel panic');
    for (const l of [a, b]) {
      const lease = (await broker.leases.get(l.id))!;
      expect(trail(l.id)).toEqual(expect.arrayContaining(['active', 'broken', 'destroyed']));
      expect(trail(l.id).indexOf('broken')).toBeGreaterThan(trail(l.id).indexOf('active'));
      expect(lease.brokenReason).toMatch(/kernel panic/);
      expect(lease.brokenReason).toMatch(new RegExp(resourceId));
      const [broke] = await broker.logs({ lease: l.id, type: 'lease.broken' });
      expect(broke!.message).toMatch(/kernel panic/);
    }
    expect(resource.status).toBe('destroyed');
    await broker.close();
  });

  test('a lease waiting on a resource that breaks during activation goes back to allocation and gets a new resource', async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let firstActivation = true;
    const bp = fakeBlueprint({
      name: 'f',
      gates: {
        activateResource: async () => {
          if (firstActivation) {
            firstActivation = false;
            await gate;
          }
        },
      },
    });
    const broker = await testBroker({ blueprints: [bp] });
    const trail = statusTrail(broker);
    const acquiring = broker.acquire({ type: 'fake' });
    const pump = setInterval(() => void broker.runUntilIdle().catch(() => undefined), 20);
    try {
      while (bp.calls.activateResource === 0) await new Promise((r) => setTimeout(r, 10));
      const [first] = await broker.resources.list();
      expect(first!.status).toBe('pending');
      const [waiting] = await broker.leases.list();
      expect(waiting!.status).toBe('pending');
      // the activation in flight now fails
      bp.fail('activateResource', { throws: new Error('vm never booted'), times: 1 });
      open();
      // a failed build: after the lease's 1 s backoff it allocates a new resource
      while ((await broker.logs({ type: 'lease.allocation-failure' })).length === 0) await new Promise((r) => setTimeout(r, 10));
      broker.clock.advance({ seconds: 1 });
      const lease = await acquiring;
      expect(lease.resource.id).not.toBe(first!.id);
      expect(trail(first!.id)).toContain('broken');
      expect((await broker.resources.get(first!.id))!.brokenReason).toMatch(/vm never booted/);
      expect(trail(lease.id)).not.toContain('broken');
      expect((await broker.leases.get(lease.id))!.brokenReason).toBeNull();
      expect(bp.calls.allocateResource).toBe(2);
      expect(await broker.logs({ lease: lease.id, type: 'resource.allocating' })).toHaveLength(2);
    } finally {
      clearInterval(pump);
    }
    await broker.runUntilIdle();
    await broker.close();
  });

  test('acquire() rejects with LeaseBrokenError carrying the cause when its pending lease breaks (no blueprint can ever serve it)', async () => {
    const bp = fakeBlueprint({ name: 'f', answers: { canEverAllocate: () => false } });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake' }).catch((e) => e);
    await broker.runUntilIdle();
    const error = await acquiring;
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect(error.message).toMatch(/canEverAllocate said no/);
    expect(String(error.cause)).toMatch(/no blueprint can ever serve/);
    await broker.close();
  });
});
