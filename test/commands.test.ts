import { internals } from '../lib/broker/index.js';
import { NotFoundError } from '../lib/index.js';
import { fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';
import { pump, rows } from './helpers/pump.js';

guardBrokers();

const commandsOf = (broker: TestBroker, id: string) =>
  rows(broker, (s) => `SELECT id, command, consumed_at, outcome FROM ${s}.commands WHERE target_id = $1 ORDER BY id`, [id]);

/** An active resource with no lease left on it. */
async function idleResource(broker: TestBroker) {
  const lease = await pump(broker, broker.acquire({ type: 'fake' }));
  await pump(broker, lease.release());
  return lease.resource.id;
}

// Invariant 1: everyone but the object's worker writes a command; the worker consumes each one,
// in order, in the transaction of the change it causes, so its effect happens exactly once.
describe('commands', () => {
  test('commands to one resource are consumed in the order written, each once: reclaim applies, the later ones have no effect', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const id = await idleResource(broker);
    // three commands committed together, before the worker sees any of them
    const { runtime } = internals.get(broker)!;
    await runtime.store.unit(async (u) => {
      await runtime.store.command(u, 'resource', id, 'reclaim', {}, 'test');
      await runtime.store.command(u, 'resource', id, 'release', { reason: 'second' }, 'test');
      await runtime.store.command(u, 'resource', id, 'reclaim', {}, 'test');
    });
    await broker.runUntilIdle();
    const commands = await commandsOf(broker, id);
    expect(commands.map((c) => c.command)).toEqual(['reclaim', 'release', 'reclaim']);
    expect(commands.every((c) => c.consumed_at !== null)).toBe(true);
    expect(commands.map((c) => c.outcome)).toEqual(['applied', 'no effect: resource is already released', 'no effect: resource is already released']);
    // the first command's effect, once: reclaimed (not released by the second), destroyed once
    expect(await broker.logs({ resource: id, type: 'resource.reclaimed' })).toHaveLength(1);
    expect(await broker.logs({ resource: id, type: 'resource.released' })).toHaveLength(0);
    expect(bp.calls.destroyResource).toBe(1);
    expect((await broker.resources.get(id))!.status).toBe('destroyed');
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('release then reclaim through the broker: release applies, reclaim is consumed with no effect; nothing is left unconsumed', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const id = await idleResource(broker);
    const { runtime } = internals.get(broker)!;
    await runtime.store.unit(async (u) => {
      await runtime.store.command(u, 'resource', id, 'release', { reason: 'first' }, 'test');
      await runtime.store.command(u, 'resource', id, 'reclaim', {}, 'test');
    });
    await broker.runUntilIdle();
    const commands = await commandsOf(broker, id);
    expect(commands.map((c) => [c.command, c.outcome])).toEqual([
      ['release', 'applied'],
      ['reclaim', 'no effect: resource is already released'],
    ]);
    const released = await broker.logs({ resource: id, type: 'resource.released' });
    expect(released).toHaveLength(1);
    expect(released[0]!.data).toEqual({ reason: 'first', author: 'test' });
    expect(await broker.logs({ resource: id, type: 'resource.reclaimed' })).toHaveLength(0);
    expect(bp.calls.destroyResource).toBe(1);
    expect(await rows(broker, (s) => `SELECT id FROM ${s}.commands WHERE consumed_at IS NULL`)).toEqual([]);
    await broker.close();
  });

  test('releasing a resource releases its leases first: releaseLease and destroyLease run before destroyResource', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const a = await pump(broker, broker.acquire({ type: 'fake' }));
    const b = await pump(broker, broker.acquire({ type: 'fake' }));
    expect(b.resource.id).toBe(a.resource.id);
    const resourceId = a.resource.id;
    await broker.releaseResource(resourceId, { reason: 'retire', author: 'ops' });
    await broker.runUntilIdle();
    expect((await broker.resources.get(resourceId))!.status).toBe('destroyed');
    for (const lease of [a, b]) {
      const record = (await broker.leases.get(lease.id))!;
      expect(record.status).toBe('destroyed');
      expect(record.brokenReason).toBeNull();
      const [released] = await broker.logs({ lease: lease.id, type: 'lease.released' });
      expect(released!.data.reason).toBe(`resource ${resourceId} was released`);
    }
    // fakeBlueprint history names lease hooks on a resource by the resource id: two leases, each released then destroyed, then the resource
    const order = bp.history.filter((h) => ['releaseLease', 'destroyLease', 'destroyResource'].includes(h.hook)).map((h) => h.hook);
    expect(order).toHaveLength(5);
    expect(order[4]).toBe('destroyResource');
    expect(order.slice(0, 4).sort()).toEqual(['destroyLease', 'destroyLease', 'releaseLease', 'releaseLease']);
    expect(order.indexOf('releaseLease')).toBeLessThan(order.indexOf('destroyLease'));
    // and both leases were destroyed (rows) before the resource's destroy phase began
    const all = await broker.logs();
    const leaseDestroyed = all.filter((l) => l.type === 'lease.destroyed').map((l) => l.id);
    const resourceReleased = all.find((l) => l.type === 'resource.released')!.id;
    const resourceDestroyed = all.find((l) => l.type === 'resource.destroyed')!.id;
    expect(leaseDestroyed).toHaveLength(2);
    for (const id of leaseDestroyed) {
      expect(id).toBeGreaterThan(resourceReleased);
      expect(id).toBeLessThan(resourceDestroyed);
    }
    expect(bp.calls.destroyResource).toBe(1);
    // the resource's own release was logged with its reason and author
    const [released] = await broker.logs({ resource: resourceId, type: 'resource.released' });
    expect(released!.data).toEqual({ reason: 'retire', author: 'ops' });
    await broker.close();
  });

  test('20 concurrent release() calls of one lease: one release, releaseLease and destroyLease once, one lease.released log', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const pumping = setInterval(() => void broker.runUntilIdle().catch(() => undefined), 5);
    const results = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => broker.release(lease.id, { author: `caller-${i}` })));
    clearInterval(pumping);
    expect(results.every((r) => r.status === 'fulfilled')).toBe(true);
    await broker.runUntilIdle();
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    expect(bp.calls.releaseLease).toBe(1);
    expect(bp.calls.destroyLease).toBe(1);
    expect(await broker.logs({ lease: lease.id, type: 'lease.released' })).toHaveLength(1);
    expect(await broker.logs({ lease: lease.id, type: 'lease.destroyed' })).toHaveLength(1);
    const commands = await commandsOf(broker, lease.id);
    expect(commands.length).toBeGreaterThanOrEqual(1);
    expect(commands.length).toBeLessThanOrEqual(20);
    expect(commands.every((c) => c.consumed_at !== null)).toBe(true);
    expect(commands.filter((c) => c.outcome === 'applied')).toHaveLength(1);
    expect(commands[0]!.outcome).toBe('applied');
    for (const c of commands.slice(1)) expect(c.outcome).toMatch(/^no effect: lease is already (released|destroyed)$/);
    // the resource stays (a lease release does not release its resource)
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('active');
    expect(bp.calls.destroyResource).toBe(0);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('reclaim of a leased resource is rejected: consumed as rejected, command.rejected logged, the resource and its lease stay active', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const id = lease.resource.id;
    await broker.reclaimResource(id, { author: 'gc' });
    await broker.runUntilIdle();
    const commands = await commandsOf(broker, id);
    expect(commands).toHaveLength(1);
    expect(commands[0]!.consumed_at).not.toBeNull();
    expect(commands[0]!.outcome).toBe('rejected: resource is in use');
    const rejected = await broker.logs({ resource: id, type: 'command.rejected' });
    expect(rejected).toHaveLength(1);
    expect(rejected[0]!.data).toEqual({ command: 'reclaim', reason: 'resource is in use' });
    expect((await broker.resources.get(id))!.status).toBe('active');
    expect((await broker.leases.get(lease.id))!.status).toBe('active');
    expect(bp.calls.destroyResource).toBe(0);
    expect(bp.calls.releaseLease).toBe(0);
    // once idle, a reclaim is applied
    await pump(broker, lease.release());
    await broker.reclaimResource(id);
    await broker.runUntilIdle();
    expect((await broker.resources.get(id))!.status).toBe('destroyed');
    expect((await commandsOf(broker, id)).map((c) => c.outcome)).toEqual(['rejected: resource is in use', 'applied']);
    await broker.close();
  });

  test('commands to an unknown id reject with NotFoundError and write nothing', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' })] });
    await expect(broker.release('lease_nope')).rejects.toBeInstanceOf(NotFoundError);
    await expect(broker.releaseResource('res_nope')).rejects.toBeInstanceOf(NotFoundError);
    await expect(broker.reclaimResource('res_nope')).rejects.toBeInstanceOf(NotFoundError);
    await expect(broker.breakResource('res_nope', 'why')).rejects.toBeInstanceOf(NotFoundError);
    // a lease id is not a resource id, and the other way round
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    await expect(broker.releaseResource(lease.id)).rejects.toBeInstanceOf(NotFoundError);
    await expect(broker.release(lease.resource.id)).rejects.toBeInstanceOf(NotFoundError);
    expect(await rows(broker, (s) => `SELECT id FROM ${s}.commands`)).toEqual([]);
    expect(await rows(broker, (s) => `SELECT * FROM ${s}.work_items WHERE object_id LIKE '%nope%'`)).toEqual([]);
    await broker.close();
  });
});
