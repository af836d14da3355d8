import { internals } from '../lib/broker/index.js';
import { createBroker, type Broker } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { RetryLater, ValidationError } from '../lib/errors/index.js';
import { engineErrors, guardBrokers, realBroker, testBroker, track } from './helpers/broker.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

/** The resources each lease ran on, in the order the leases were requested. */
const resourcesOf = async (broker: Broker, type = 'host') => (await broker.leases.list({ type })).map((l) => l.resourceId);

const releaseReasons = async (broker: Broker) =>
  (await broker.logs({ type: 'resource.released' })).map((e) => (e.data as { reason: string }).reason);

/**
 * What a hand-off does to a resource, forced in SQL: promises it to a waiting lease (`lease`),
 * or lets go of the promise (null) as `forgetReservation` does, which wakes nothing.
 */
async function promise(broker: Broker, resource: string, lease: string | null) {
  const { db, store } = internals.get(broker)!;
  await db.query(`UPDATE ${store.s}.resources SET reserved_for = $2 WHERE id = $1`, [resource, lease]);
}

/** Polls a real-clock broker (its own workers) until `done` holds. */
async function eventually(done: () => Promise<boolean>, what: string, ms = 30_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await done()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const allDestroyed = (broker: Broker) => async () => (await broker.resources.list({ status: ['pending', 'active', 'released', 'broken'] })).length === 0;

describe('destroyOnRelease', () => {
  test('real clock, a burst of 12 leases on 3 resources at a time: every resource serves exactly one lease and is destroyed after it', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'runners', limits: { destroyOnRelease: true, maxResources: 3, allocationLimit: () => 3 } });
    await using broker = await realBroker({ blueprints: [pool] });
    const acquired = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const lease = await broker.acquire({ type: 'host', owner: `job/${i}` });
        // Held a moment, so that leases overlap and free resources are there to be (wrongly) reused.
        await new Promise((r) => setTimeout(r, 5 + (i % 3) * 5));
        const resource = lease.resource.id;
        await lease.release();
        return resource;
      }),
    );
    expect(new Set(acquired).size).toBe(12);
    await eventually(allDestroyed(broker), 'every resource destroyed');
    const resources = await broker.resources.list();
    expect(resources).toHaveLength(12);
    expect(new Set(await resourcesOf(broker)).size).toBe(12);
    expect(pool.calls.allocateResource).toBe(12);
    expect(pool.calls.destroyResource).toBe(12);
    expect(await releaseReasons(broker)).toEqual(Array(12).fill('served its lease (destroyOnRelease)'));
    expect(engineErrors(broker)).toEqual([]);
  });

  test('a resource that served its lease takes no second one, even one waiting when it is freed', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'runners', limits: { destroyOnRelease: true, maxResources: 1 } });
    await using broker = await testBroker({ blueprints: [pool] });
    const first = await broker.acquire({ type: 'host' });
    const second = await broker.requestLease({ type: 'host' });
    await broker.runUntilIdle();
    expect(await second.status()).toBe('pending');
    await first.release();
    await broker.runUntilIdle();
    const lease = await second.whenActive();
    expect(lease.resource.id).not.toBe(first.resource.id);
    expect((await broker.resources.get(first.resource.id))?.status).toBe('destroyed');
    await lease.release();
    await broker.runUntilIdle();
    expect(await broker.resources.list({ status: 'active' })).toEqual([]);
  });
});

describe('recycling', () => {
  test('maxLeasesPerResourceLifetime: a resource serves at most N leases, then is released with the reason logged', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { maxLeasesPerResourceLifetime: 2 } });
    await using broker = await testBroker({ blueprints: [pool] });
    for (let i = 0; i < 5; i++) {
      const lease = await broker.acquire({ type: 'host' });
      await lease.release();
      await broker.runUntilIdle();
    }
    const used = await resourcesOf(broker);
    expect(used).toEqual([used[0], used[0], used[2], used[2], used[4]]);
    expect(new Set(used).size).toBe(3);
    expect(await releaseReasons(broker)).toEqual([
      'recycled: served 2 leases (maxLeasesPerResourceLifetime 2)',
      'recycled: served 2 leases (maxLeasesPerResourceLifetime 2)',
    ]);
    // The third has served one lease: it stays, idle, for the next.
    expect((await broker.resources.list({ status: 'active' })).map((r) => r.id)).toEqual([used[4]]);
  });

  test('maxResourceAge: an old resource takes no new lease, is never released under an active one, and goes once its lease is gone', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', limits: { maxResourceAge: { hours: 1 } } });
    await using broker = await testBroker({ blueprints: [pool] });
    const held = await broker.acquire({ type: 'host' });
    const old = held.resource.id;
    // Shared resources: before the hour, a second lease shares it.
    const early = await broker.acquire({ type: 'host' });
    expect(early.resource.id).toBe(old);
    await early.release();
    await broker.advance({ minutes: 61 });
    expect(held.status).toBe('active');
    expect((await broker.resources.get(old))?.status).toBe('active');
    // Past the hour, a new lease gets a new resource.
    const late = await broker.acquire({ type: 'host' });
    expect(late.resource.id).not.toBe(old);
    await held.release();
    await broker.runUntilIdle();
    expect((await broker.resources.get(old))?.status).toBe('destroyed');
    expect(await releaseReasons(broker)).toEqual(['recycled: active for longer than PT1H (maxResourceAge)']);
    expect((await broker.resources.get(late.resource.id))?.status).toBe('active');
  });

  test('maxResourceAge: a lease waiting on a full pool whose one resource came of age waits for it to go, without spinning (the model test found this)', async () => {
    // Shared pool of one; the first lease's acquireLease asks to retry in 10 s, so the second
    // lease gets the resource first. An hour later the first lease has expired, the resource
    // is past its age, and the waiting lease must not loop on reclaiming a retired resource.
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', limits: { maxResources: 1, maxResourceAge: { seconds: 30 } }, failures: { acquireLease: { throws: () => new RetryLater('not yet', { seconds: 10 }), times: 1 } } });
    await using broker = await testBroker({ blueprints: [pool] });
    const first = await broker.requestLease({ type: 'host', ttl: { hours: 1 } });
    const second = await broker.requestLease({ type: 'host' });
    await broker.runUntilIdle();
    await broker.advance({ hours: 1 });
    expect(await first.status()).toBe('destroyed');
    // The resource was built for the first lease, which never took it: retired and reserved,
    // it is released as soon as that reservation is gone, not a waitRecheck (30 s) later;
    // the second lease then gets a new one.
    expect(await second.status()).toBe('active');
    expect((await broker.resources.list({ status: 'active' })).map((r) => r.id)).not.toContain('res_0001');
    expect(engineErrors(broker)).toEqual([]);
  });

  test('maxResourceAge: an idle resource is released when it comes of age, with no lease to wake it', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', limits: { maxResourceAge: { minutes: 30 } } });
    await using broker = await testBroker({ blueprints: [pool] });
    const lease = await broker.acquire({ type: 'host' });
    await lease.release();
    await broker.runUntilIdle();
    await broker.advance({ minutes: 29 });
    expect((await broker.resources.get(lease.resource.id))?.status).toBe('active');
    await broker.advance({ minutes: 2 });
    expect((await broker.resources.get(lease.resource.id))?.status).toBe('destroyed');
  });
});

describe('recycling, on the real clock', () => {
  test('a burst of 12 on an exclusive pool of 2 with maxLeasesPerResourceLifetime 3: no resource serves a 4th lease or goes under one, and the spent ones go', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { maxLeasesPerResourceLifetime: 3, maxResources: 2 } });
    await using broker = await realBroker({ blueprints: [pool] });
    const served = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const lease = await broker.acquire({ type: 'host', owner: `job/${i}`, timeout: { seconds: 30 } });
        await new Promise((r) => setTimeout(r, 5));
        // Never released under an active lease.
        const status = (await broker.resources.get(lease.resource.id))?.status;
        await lease.release();
        return { resource: lease.resource.id, status };
      }),
    );
    expect(served.map((s) => s.status)).toEqual(Array(12).fill('active'));
    const perResource = new Map<string, number>();
    for (const { resource } of served) perResource.set(resource, (perResource.get(resource) ?? 0) + 1);
    expect(Math.max(...perResource.values())).toBeLessThanOrEqual(3);
    // 12 leases at most 3 each: at least 4 resources, and every one that served 3 goes.
    expect(perResource.size).toBeGreaterThanOrEqual(4);
    const spent = [...perResource].filter(([, n]) => n === 3).map(([id]) => id);
    await eventually(async () => (await Promise.all(spent.map((id) => broker.resources.get(id)))).every((r) => r?.status === 'destroyed'), 'the spent resources destroyed');
    expect(await releaseReasons(broker)).toEqual(Array(spent.length).fill('recycled: served 3 leases (maxLeasesPerResourceLifetime 3)'));
    expect(engineErrors(broker)).toEqual([]);
  });

  test('a resource that comes of age while reserved for a lease that cannot take it yet goes at once, and the waiting lease gets a new one', async () => {
    // A pool of one: the resource is built for the first lease, whose acquireLease asks to
    // retry in 5 s; it comes of age (1 s) still reserved. Its release must not wait for
    // waitRecheck (30 s) before the second lease's place frees.
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', limits: { maxResources: 1, maxResourceAge: { seconds: 1 } }, failures: { acquireLease: { throws: () => new RetryLater('not yet', { seconds: 5 }), times: 1 } } });
    await using broker = await realBroker({ blueprints: [pool] });
    const first = await broker.requestLease({ type: 'host', ttl: { seconds: 30 } });
    const second = await broker.requestLease({ type: 'host' });
    await eventually(async () => (await broker.resources.list({ status: 'active' })).length === 1, 'the first resource built');
    const old = (await broker.resources.list({ status: 'active' }))[0]!.id;
    const lease = await second.whenActive({ timeout: { seconds: 10 } });
    expect(lease.resource.id).not.toBe(old);
    expect((await broker.resources.get(old))?.status).toBe('destroyed');
    await lease.release();
    await first.release();
    expect(engineErrors(broker)).toEqual([]);
  });

  test('maxResourceAge 1.5 s: a lease outliving it keeps its resource; the next lease gets a new one; each goes when its last lease does, or at its age when idle', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', limits: { maxResourceAge: { milliseconds: 1_500 } } });
    await using broker = await realBroker({ blueprints: [pool] });
    const held = await broker.acquire({ type: 'host' });
    // Long enough that, on a loaded machine, the lease takes the resource built for it before its age.
    await new Promise((r) => setTimeout(r, 1_800));
    expect(held.status).toBe('active');
    expect((await broker.resources.get(held.resource.id))?.status).toBe('active');
    // Shared pool, but past its age the old resource takes no new lease.
    const late = await broker.acquire({ type: 'host' });
    expect(late.resource.id).not.toBe(held.resource.id);
    await held.release();
    await eventually(async () => (await broker.resources.get(held.resource.id))?.status === 'destroyed', 'the old resource destroyed once its lease went');
    // The second one, released before its age, is idle; nothing wakes it but its age.
    await late.release();
    await eventually(allDestroyed(broker), 'the second resource destroyed at its age');
    expect(await releaseReasons(broker)).toEqual(Array(2).fill('recycled: active for longer than PT1.5S (maxResourceAge)'));
    expect(engineErrors(broker)).toEqual([]);
  });
});

describe('draining a blueprint', () => {
  test('idle resources go now, leased ones when their lease ends; waiting leases go to another blueprint of the type; resume serves again', async () => {
    const red = fakeBlueprint({ type: 'host', name: 'red', exclusive: true, limits: { maxResources: 2 } });
    const blue = fakeBlueprint({ type: 'host', name: 'blue', exclusive: true, enabled: true, limits: { maxResources: 1 } });
    await using broker = await testBroker({ blueprints: [red, blue] });
    const a = await broker.acquire({ type: 'host', blueprints: ['red'] });
    const b = await broker.acquire({ type: 'host', blueprints: ['red'] });
    await b.release();
    await broker.runUntilIdle();
    expect(await broker.resources.list({ status: 'active', blueprint: 'red' })).toHaveLength(2);

    const drained = await broker.drainBlueprint('red', { author: 'ops' });
    expect(drained).toEqual({ blueprint: 'red', draining: true, changed: true, idleResources: [b.resource.id] });
    await broker.runUntilIdle();
    expect((await broker.resources.get(b.resource.id))?.status).toBe('destroyed');
    expect((await broker.resources.get(a.resource.id))?.status).toBe('active');
    expect(a.status).toBe('active');
    expect((await broker.stats()).blueprints.red.draining).toBe(true);
    expect((await broker.stats()).blueprints.blue.draining).toBe(false);

    // A lease that may use either goes to blue; one that may use only red waits, saying why.
    const either = await broker.acquire({ type: 'host' });
    expect(either.resource.blueprint).toBe('blue');
    const onlyRed = await broker.requestLease({ type: 'host', blueprints: ['red'] });
    await broker.runUntilIdle();
    expect(await onlyRed.status()).toBe('pending');
    const [wait] = await broker.logs({ lease: onlyRed.id, type: 'lease.waiting-for-resources' });
    expect(wait.message).toContain('red is draining');

    await a.release();
    await broker.runUntilIdle();
    expect((await broker.resources.get(a.resource.id))?.status).toBe('destroyed');
    expect(await releaseReasons(broker)).toEqual(['blueprint red is draining', 'blueprint red is draining']);
    expect(red.calls.allocateResource).toBe(2);

    // Draining again changes nothing; resume wakes the waiting lease at once.
    expect((await broker.drainBlueprint('red')).changed).toBe(false);
    expect(await broker.resumeBlueprint('red', { author: 'ops' })).toEqual({ blueprint: 'red', draining: false, changed: true, idleResources: [] });
    await broker.runUntilIdle();
    expect(await onlyRed.status()).toBe('active');
    expect((await broker.logs({ blueprint: 'red', type: 'blueprint.draining' })).map((e) => e.message)).toEqual([
      'Blueprint red drains (by ops): it serves no new lease; 1 idle resource to release now, leased ones when their leases end.',
    ]);
    expect((await broker.logs({ blueprint: 'red', type: 'blueprint.resumed' })).map((e) => e.message)).toEqual(['Blueprint red resumed by ops: it serves leases again.']);
    await either.release();
    await (await onlyRed.whenActive()).release();
  });

  test('real clock: a drain empties an idle pool on its own, and a lease requested meanwhile waits until resume', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true });
    await using broker = await realBroker({ blueprints: [pool] });
    const leases = await Promise.all([1, 2, 3].map(() => broker.acquire({ type: 'host' })));
    for (const lease of leases) await lease.release();
    await eventually(async () => (await broker.resources.list({ status: 'active' })).length === 3 && (await broker.leases.list({ status: 'destroyed' })).length === 3, 'three idle resources');
    await broker.drainBlueprint('hosts');
    await eventually(allDestroyed(broker), 'the drained pool emptied');
    const waiting = await broker.requestLease({ type: 'host', ttl: { minutes: 5 } });
    await new Promise((r) => setTimeout(r, 300));
    expect(await waiting.status()).toBe('pending');
    expect(pool.calls.allocateResource).toBe(3);
    await broker.resumeBlueprint('hosts');
    const lease = await waiting.whenActive();
    expect(lease.resource.blueprint).toBe('hosts');
    await lease.release();
    expect(engineErrors(broker)).toEqual([]);
  });

  test('an unknown or malformed blueprint name is a ValidationError, and nothing is written', async () => {
    await using broker = await testBroker({ blueprints: [fakeBlueprint({ type: 'host', name: 'hosts' })] });
    await expect(broker.drainBlueprint('nope')).rejects.toThrow(ValidationError);
    await expect(broker.drainBlueprint('nope')).rejects.toThrow(/unknown blueprint "nope"/);
    await expect(broker.drainBlueprint('bad name!' as string)).rejects.toThrow(/blueprint: must be a blueprint name/);
    await expect(broker.resumeBlueprint('hosts', { who: 'x' } as never)).rejects.toThrow(ValidationError);
    expect(await broker.logs({ type: 'blueprint.draining' })).toEqual([]);
    expect((await broker.stats()).blueprints.hosts.draining).toBe(false);
  });
});

describeOnPostgres('draining across brokers', () => {
  test('a drain written by one broker is obeyed by another: its idle resource is released and it builds none', async () => {
    const schema = freshSchema('drain');
    const pool = () => fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true });
    await using worker = track(await createBroker({ database: { url: tierUrl!, schema, poolSize: 4 }, blueprints: [pool()] }));
    const lease = await worker.acquire({ type: 'host' });
    await lease.release();
    await eventually(async () => (await worker.leases.list({ status: 'destroyed' })).length === 1, 'the lease destroyed');
    // An operator's broker, with no blueprints and no workers, as the CLI opens one.
    await using operator = track(await createBroker({ database: { url: tierUrl!, schema, poolSize: 2 }, workers: false }));
    const result = await operator.drainBlueprint('hosts', { author: 'ops' });
    expect(result.idleResources).toEqual([lease.resource.id]);
    await eventually(allDestroyed(worker), 'the idle resource released by the worker broker');
    const waiting = await worker.requestLease({ type: 'host' });
    await new Promise((r) => setTimeout(r, 300));
    expect(await waiting.status()).toBe('pending');
    expect((await operator.stats()).blueprints.hosts.draining).toBe(true);
    await operator.resumeBlueprint('hosts');
    await (await waiting.whenActive()).release();
  });
});

describe('warm pools (minIdle)', () => {
  const idleCount = async (broker: Broker) => (await broker.stats()).blueprints.hosts!.idle;

  test('the pool is built before any lease, a lease takes a warm resource at once, and the pool is refilled', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { minIdle: 2, maxResources: 5 } });
    await using broker = await testBroker({ blueprints: [pool] });
    await broker.runUntilIdle();
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ idle: 2, warmTarget: 2, live: 2 });
    const warm = (await broker.resources.list({ status: 'active' })).map((r) => r.id);
    expect((await broker.logs({ type: 'resource.allocating' })).map((e) => e.message)).toEqual(Array(2).fill('Allocating a new resource for the warm pool (minIdle).'));

    const lease = await broker.acquire({ type: 'host' });
    expect(warm).toContain(lease.resource.id);
    await broker.runUntilIdle();
    expect(await idleCount(broker)).toBe(2);
    // One more built, for the pool and not for the lease (the refill may start before acquire() returns).
    expect(pool.calls.allocateResource).toBe(3);
    expect((await broker.logs({ type: 'resource.allocating' })).map((e) => e.message)).toEqual(Array(3).fill('Allocating a new resource for the warm pool (minIdle).'));
    await lease.release();
    await broker.runUntilIdle();
    // Three idle now: more than minIdle is fine (no idle expiry here).
    expect(await idleCount(broker)).toBe(3);
  });

  test('never past maxResources; and with idleExpiry, only the idle resources beyond minIdle expire', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { minIdle: 2, maxResources: 3, idleExpiry: { minutes: 1 } } });
    await using broker = await testBroker({ blueprints: [pool] });
    const leases = await Promise.all([1, 2, 3].map(() => broker.acquire({ type: 'host' })));
    await broker.runUntilIdle();
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ live: 3, idle: 0 });
    for (const lease of leases) await lease.release();
    await broker.runUntilIdle();
    expect(await idleCount(broker)).toBe(3);
    await broker.advance({ minutes: 2 });
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ live: 2, idle: 2 });
    await broker.advance({ minutes: 10 });
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ live: 2, idle: 2 });
    expect(pool.calls.allocateResource).toBe(3);
  });

  test('an idle resource promised to a lease when its expiry comes is not spun on: it looks again an idle period later, and goes once let go of', async () => {
    // The promise forced in SQL, as in the test above. The worker used to try the release,
    // be refused by its guard (reserved), and pass again at once, for as long as the
    // reservation lasted: with the manual clock, runUntilIdle never returned.
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { idleExpiry: { minutes: 1 } } });
    await using broker = await testBroker({ blueprints: [pool] });
    await (await broker.acquire({ type: 'host' })).release();
    await broker.runUntilIdle();
    const [resource] = (await broker.resources.list({ status: 'active' })).map((r) => r.id);
    await promise(broker, resource!, 'lease_promised');
    await broker.advance({ minutes: 2 });
    expect((await broker.resources.get(resource))?.status).toBe('active');
    await promise(broker, resource!, null);
    await broker.advance({ minutes: 2 });
    expect((await broker.resources.get(resource))?.status).toBe('destroyed');
    expect(engineErrors(broker)).toEqual([]);
  }, 20_000);

  test('a resource kept for the warm pool is looked at again: one promised to a lease when its expiry came, and let go of after, still expires', async () => {
    // What a hand-off does to the engine, forced in SQL: it reserves a freed resource for a
    // waiting lease, and the lease, over its quota, lets go of it in its next pass. Here the
    // reservation lasts over the resource's idle expiry, as it did on a loaded machine
    // across four processes (test/multi-process-policies.test.ts).
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { minIdle: 1, maxResources: 3, idleExpiry: { minutes: 1 } } });
    await using broker = await testBroker({ blueprints: [pool] });
    await broker.runUntilIdle();
    const [first] = (await broker.resources.list({ status: 'active' })).map((r) => r.id);
    await promise(broker, first!, 'lease_promised');
    // The promised one is no spare: the pool builds a second (at its sweep), which finds one spare (itself) at its expiry and is kept.
    await eventually(async () => (await broker.stats()).blueprints.hosts!.live === 2, 'a second warm resource');
    await broker.advance({ minutes: 2 });
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ live: 2, idle: 2 });
    // The lease lets go, as forgetReservation does: nothing wakes the resource.
    await promise(broker, first!, null);
    await broker.advance({ minutes: 5 });
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ live: 1, idle: 1 });
    expect(engineErrors(broker)).toEqual([]);
  });

  test('real clock: a resource kept for the warm pool, then a promised one let go of, shrinks the pool back to minIdle', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { minIdle: 1, maxResources: 3, idleExpiry: { milliseconds: 500 } } });
    await using broker = await realBroker({ blueprints: [pool], sweepInterval: { milliseconds: 100 } });
    await eventually(async () => (await idleCount(broker)) === 1, 'the warm pool built');
    const [first] = (await broker.resources.list({ status: 'active' })).map((r) => r.id);
    await promise(broker, first!, 'lease_promised');
    await eventually(async () => (await broker.stats()).blueprints.hosts!.live === 2, 'a second warm resource');
    // Past the second one's expiry: it finds itself the only spare, and is kept.
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ live: 2, idle: 2 });
    await promise(broker, first!, null);
    await eventually(async () => (await broker.stats()).blueprints.hosts!.live === 1, 'the pool back at minIdle', 10_000);
    expect(await idleCount(broker)).toBe(1);
    expect(engineErrors(broker)).toEqual([]);
  });

  test('real clock: an idle resource promised to a lease past its expiry waits an idle period between looks, and goes once let go of', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { idleExpiry: { seconds: 1 } } });
    await using broker = await realBroker({ blueprints: [pool] });
    const { db, store } = internals.get(broker)!;
    await (await broker.acquire({ type: 'host' })).release();
    const [resource] = (await broker.resources.list({ status: 'active' })).map((r) => r.id);
    await promise(broker, resource!, 'lease_promised');
    await new Promise((r) => setTimeout(r, 1_500));
    // Each look sets the next one (the work item's run_at) an idle period ahead: over 1.2 s,
    // two or three looks. A worker passing again at once would set a new one every pass.
    const looks = new Set<number>();
    for (const end = Date.now() + 1_200; Date.now() < end; await new Promise((r) => setTimeout(r, 20))) {
      const [item] = await db.query(`SELECT run_at FROM ${store.s}.work_items WHERE object_kind = 'resource' AND object_id = $1`, [resource]);
      looks.add(new Date(item.run_at).getTime());
    }
    expect(looks.size).toBeLessThanOrEqual(3);
    expect((await broker.resources.get(resource!))?.status).toBe('active');
    await promise(broker, resource!, null);
    await eventually(async () => (await broker.resources.get(resource!))?.status === 'destroyed', 'the resource to go', 10_000);
    expect(engineErrors(broker)).toEqual([]);
  });

  test('a draining blueprint builds no warm resource, and its warm ones go', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', limits: { minIdle: 2 } });
    await using broker = await testBroker({ blueprints: [pool] });
    await broker.runUntilIdle();
    expect(await idleCount(broker)).toBe(2);
    await broker.drainBlueprint('hosts');
    await broker.runUntilIdle();
    expect((await broker.stats()).blueprints.hosts).toMatchObject({ live: 0, idle: 0, draining: true });
    await broker.resumeBlueprint('hosts');
    await broker.runUntilIdle();
    expect(await idleCount(broker)).toBe(2);
  });

  test('real clock: a burst of leases is served from the warm pool, which refills on its own', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, delays: { allocateResource: 200 }, limits: { minIdle: 4, maxResources: 8, allocationLimit: () => 4 } });
    await using broker = await realBroker({ blueprints: [pool] });
    await eventually(async () => (await idleCount(broker)) === 4, 'the warm pool built');
    const warm = new Set((await broker.resources.list({ status: 'active' })).map((r) => r.id));
    const started = Date.now();
    const leases = await Promise.all([1, 2, 3, 4].map(() => broker.acquire({ type: 'host' })));
    // Served from the pool: no 200 ms build in the way.
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(leases.every((l) => warm.has(l.resource.id))).toBe(true);
    await eventually(async () => (await idleCount(broker)) === 4, 'the warm pool refilled');
    expect((await broker.stats()).blueprints.hosts.live).toBe(8);
    for (const lease of leases) await lease.release();
    expect(engineErrors(broker)).toEqual([]);
  });
});

describeOnPostgres('warm pools across brokers', () => {
  test('two brokers with minIdle 3 on one database keep 3 idle resources, not 6', async () => {
    const schema = freshSchema('warm');
    const open = async () => track(await createBroker({ database: { url: tierUrl!, schema, poolSize: 4 }, blueprints: [fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { minIdle: 3 } })] }));
    const [a, b] = await Promise.all([open(), open()]);
    try {
      await eventually(async () => (await a.stats()).blueprints.hosts!.idle >= 3, 'the warm pool built');
      await new Promise((r) => setTimeout(r, 500));
      expect((await a.stats()).blueprints.hosts).toMatchObject({ idle: 3, live: 3 });
      const lease = await b.acquire({ type: 'host' });
      await eventually(async () => (await a.stats()).blueprints.hosts!.idle === 3, 'refilled');
      expect((await a.stats()).blueprints.hosts!.live).toBe(4);
      await lease.release();
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('priority aging', () => {
  /**
   * One exclusive resource; a low-priority lease waits while, every second, a lease of
   * priority 5 arrives and the holder releases. Returns after how many cycles the low one
   * was served (null: not within `cycles`).
   */
  async function starve(priorityAging: { every: string } | undefined, cycles: number): Promise<number | null> {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { maxResources: 1 } });
    await using broker = await testBroker({ blueprints: [pool], ...(priorityAging ? { priorityAging } : {}) });
    let holder = await broker.acquire({ type: 'host', priority: 5 });
    const low = await broker.requestLease({ type: 'host', priority: 0 });
    let next = await broker.requestLease({ type: 'host', priority: 5 });
    for (let cycle = 1; cycle <= cycles; cycle++) {
      await broker.advance({ seconds: 1 });
      const arriving = await broker.requestLease({ type: 'host', priority: 5 });
      await holder.release();
      await broker.runUntilIdle();
      if ((await low.status()) === 'active') {
        await (await low.whenActive()).release();
        return cycle;
      }
      holder = await next.whenActive();
      next = arriving;
    }
    return null;
  }

  test('strict by default: a stream of higher-priority leases keeps a low one waiting', async () => {
    expect(await starve(undefined, 12)).toBeNull();
  });

  test("with priorityAging every 1s, the low lease's rank passes the stream's within a few cycles", async () => {
    const served = await starve({ every: 'PT1S' }, 12);
    expect(served).not.toBeNull();
    // Rank 0 + 1 per second waited passes 5 (a newcomer waits a second before its turn: rank 6) at about 7 s.
    expect(served!).toBeLessThanOrEqual(9);
  });

  test('real clock, every 1 s: a low lease is served while a stream of priority-5 leases goes on, after some of them', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, limits: { maxResources: 1 } });
    await using broker = await realBroker({ blueprints: [pool], priorityAging: { every: { seconds: 1 } } });
    let holder = await broker.acquire({ type: 'host', priority: 5 });
    const low = await broker.requestLease({ type: 'host', priority: 0 });
    let servedBefore = 0;
    const deadline = Date.now() + 20_000;
    for (;;) {
      // One newcomer of priority 5 a cycle, waiting beside the low lease when the holder releases.
      const next = await broker.requestLease({ type: 'host', priority: 5 });
      await new Promise((r) => setTimeout(r, 50));
      await holder.release();
      await eventually(async () => (await low.status()) === 'active' || (await next.status()) === 'active', 'the freed resource taken');
      if ((await low.status()) === 'active') {
        await next.release();
        break;
      }
      servedBefore++;
      holder = await next.whenActive();
      if (Date.now() > deadline) throw new Error(`the low lease still waits after ${servedBefore} leases of priority 5 were served`);
    }
    // Strict at first (rank 0 against 5); served once it has waited about 6 s.
    expect(servedBefore).toBeGreaterThan(0);
    await (await low.whenActive()).release();
    expect(engineErrors(broker)).toEqual([]);
  });

  test('bad priorityAging values are ValidationErrors naming the field', async () => {
    for (const [value, message] of [
      [{ every: '1m' }, /priorityAging\.every: is not a valid duration/],
      [{ every: { milliseconds: 10 } }, /priorityAging\.every: must be at least 1 second/],
      [{}, /priorityAging\.every: is required/],
      [{ every: 'PT1M', step: 2 }, /priorityAging\.step: is not a priorityAging option/],
      ['PT1M', /priorityAging: must be \{ every \}/],
    ] as const) {
      await expect(createBroker({ priorityAging: value as never, workers: false })).rejects.toThrow(message);
    }
  });
});

describe('quotas across pools', () => {
  test('at most N leases per owner prefix across two blueprints; the one over quota waits, saying why, and is served when a place frees', async () => {
    const red = fakeBlueprint({ type: 'host', name: 'red', exclusive: true });
    const blue = fakeBlueprint({ type: 'host', name: 'blue', exclusive: true });
    await using broker = await testBroker({ blueprints: [red, blue], quotas: [{ owner: 'tenant-a/*', maxLeases: 2 }] });
    const a1 = await broker.acquire({ type: 'host', owner: 'tenant-a/1', blueprints: ['red'] });
    const a2 = await broker.acquire({ type: 'host', owner: 'tenant-a/2', blueprints: ['blue'] });
    const a3 = await broker.requestLease({ type: 'host', owner: 'tenant-a/3' });
    // Another tenant is not held back.
    const b1 = await broker.acquire({ type: 'host', owner: 'tenant-b/1' });
    await broker.runUntilIdle();
    expect(await a3.status()).toBe('pending');
    const [wait] = await broker.logs({ lease: a3.id, type: 'lease.waiting-for-resources' });
    expect(wait.message).toContain('over quota owner tenant-a/*: 2 of 2 leases hold a resource');
    await a1.release();
    await broker.runUntilIdle();
    expect(await a3.status()).toBe('active');
    for (const l of [a2, b1, await a3.whenActive()]) await l.release();
  });

  test('a quota by type counts every owner, and a lease of another type is not held back', async () => {
    const hosts = fakeBlueprint({ type: 'host', name: 'hosts' });
    const vms = fakeBlueprint({ type: 'vm', name: 'vms' });
    await using broker = await testBroker({ blueprints: [hosts, vms], quotas: [{ type: 'host', maxLeases: 1 }] });
    const first = await broker.acquire({ type: 'host', owner: 'x' });
    const second = await broker.requestLease({ type: 'host', owner: 'y' });
    const vm = await broker.acquire({ type: 'vm', owner: 'y' });
    await broker.runUntilIdle();
    expect(await second.status()).toBe('pending');
    await first.release();
    await broker.runUntilIdle();
    expect(await second.status()).toBe('active');
    await vm.release();
    await (await second.whenActive()).release();
  });

  test('real clock, a burst of 12 leases of one tenant with a quota of 3: never more than 3 hold a resource, and all are served', async () => {
    const pool = fakeBlueprint({ type: 'host', name: 'hosts', exclusive: true, delays: { activateLease: 5 } });
    await using broker = await realBroker({ blueprints: [pool], quotas: [{ owner: 'tenant-a/*', maxLeases: 3 }] });
    let holding = 0;
    let most = 0;
    const sampler = setInterval(() => {
      void broker.leases.list({ status: ['acquired', 'active', 'released', 'broken'], type: 'host' }).then((rows) => (most = Math.max(most, rows.length)), () => undefined);
    }, 5);
    try {
      await Promise.all(
        Array.from({ length: 12 }, async (_, i) => {
          const lease = await broker.acquire({ type: 'host', owner: `tenant-a/${i}`, timeout: { seconds: 60 } });
          holding++;
          most = Math.max(most, holding);
          await new Promise((r) => setTimeout(r, 20));
          holding--;
          await lease.release();
        }),
      );
    } finally {
      clearInterval(sampler);
    }
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(3);
    expect(engineErrors(broker)).toEqual([]);
  });

  test('bad quotas are ValidationErrors naming the field, before anything opens', async () => {
    for (const [quotas, message] of [
      [[{ maxLeases: 3 }], /quotas\[0\]: needs a match key/],
      [[{ owner: 'a/*', maxLeases: 0 }], /quotas\[0\]\.maxLeases: must be an integer from 1/],
      [[{ owner: 'a*', maxLeases: 1 }], /quotas\[0\]\.owner: "a\*": \* may only end a prefix/],
      [[{ type: '', maxLeases: 1 }], /quotas\[0\]\.type: must be a non-empty string/],
      [[{ type: 'host', maxLeases: 1, per: 'owner' }], /quotas\[0\]\.per: is not a quota option/],
      [[{ type: 'host', maxLeases: 1 }, { type: 'host', maxLeases: 2 }], /quotas\[1\]: matches the same leases as quotas\[0\]/],
      [{ type: 'host' }, /quotas: must be an array/],
    ] as const) {
      await expect(createBroker({ quotas: quotas as never, workers: false })).rejects.toThrow(message);
    }
  });
});

describeOnPostgres('quotas across brokers', () => {
  test('two brokers with the same quota hold at most N leases together under a burst', async () => {
    const schema = freshSchema('quota');
    const open = async () =>
      track(await createBroker({ database: { url: tierUrl!, schema, poolSize: 4 }, blueprints: [fakeBlueprint({ type: 'host', name: 'hosts' })], quotas: [{ owner: 'tenant-a/*', maxLeases: 2 }] }));
    const [a, b] = await Promise.all([open(), open()]);
    let holding = 0;
    let most = 0;
    try {
      await Promise.all(
        Array.from({ length: 10 }, async (_, i) => {
          const broker = i % 2 ? a : b;
          const lease = await broker.acquire({ type: 'host', owner: `tenant-a/${i}`, timeout: { seconds: 60 } });
          most = Math.max(most, ++holding);
          await new Promise((r) => setTimeout(r, 30));
          holding--;
          await lease.release();
        }),
      );
      expect(most).toBeGreaterThan(0);
      expect(most).toBeLessThanOrEqual(2);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });
});

describe('bad limits', () => {
  const cases: Array<[string, object, RegExp]> = [
    ['negative age', { maxResourceAge: { minutes: -1 } }, /limits\.maxResourceAge: must not be negative/],
    ['zero age', { maxResourceAge: 0 }, /limits\.maxResourceAge: must be longer than zero/],
    ['not a duration', { maxResourceAge: 'soon' }, /limits\.maxResourceAge: is not a valid duration/],
    ['zero lifetime', { maxLeasesPerResourceLifetime: 0 }, /limits\.maxLeasesPerResourceLifetime: must be an integer from 1/],
    ['fractional lifetime', { maxLeasesPerResourceLifetime: 1.5 }, /limits\.maxLeasesPerResourceLifetime: must be an integer from 1/],
    ['destroyOnRelease not a boolean', { destroyOnRelease: 'yes' }, /limits\.destroyOnRelease: must be a boolean/],
    ['destroyOnRelease with a lifetime of 3', { destroyOnRelease: true, maxLeasesPerResourceLifetime: 3 }, /limits\.maxLeasesPerResourceLifetime: must be 1 or left out with destroyOnRelease/],
    ['negative minIdle', { minIdle: -1 }, /limits\.minIdle: must be an integer from 0/],
    ['fractional minIdle', { minIdle: 0.5 }, /limits\.minIdle: must be an integer from 0/],
    ['minIdle above maxResources', { minIdle: 4, maxResources: 3 }, /limits\.minIdle: must not exceed limits\.maxResources \(4 > 3\)/],
  ];
  test.each(cases)('%s', (_, limits, message) => {
    expect(() => fakeBlueprint({ type: 'host', name: 'hosts', limits: limits as never })).toThrow(ValidationError);
    expect(() => fakeBlueprint({ type: 'host', name: 'hosts', limits: limits as never })).toThrow(message);
  });
});
