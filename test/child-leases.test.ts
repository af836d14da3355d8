import { createBroker, LeaseBrokenError } from '../lib/index.js';
import { fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker, track } from './helpers/broker.js';
import { testDatabase } from './helpers/tier.js';

guardBrokers();

type Event = { kind: 'lease' | 'resource'; id: string; to: string };

function recordEvents(broker: TestBroker): Event[] {
  const events: Event[] = [];
  broker.on('lease', (e) => events.push({ kind: 'lease', id: e.id, to: e.to }));
  broker.on('resource', (e) => events.push({ kind: 'resource', id: e.id, to: e.to }));
  return events;
}

const indexOf = (events: Event[], id: string, to: string) => events.findIndex((e) => e.id === id && e.to === to);

async function setup(hostOptions: Parameters<typeof fakeBlueprint>[0] = {}) {
  const host = fakeBlueprint({ name: 'hosts', type: 'host', ...hostOptions });
  const wc = fakeBlueprint({ name: 'wcs', type: 'working-copy', child: { type: 'host', attributes: { arch: 'x86' } } });
  const broker = await testBroker({ blueprints: [host, wc] });
  return { host, wc, broker, events: recordEvents(broker) };
}

// DESIGN "Blueprint contract": ctx.acquireLease(spec) takes a child lease during allocateResource;
// the resource is built (and activates) only once its child is active, and allocateResource is idempotent per
// resource id: it is called again, with resume, after the child activates (invariants 3 and 4: the wait is rows, not a
// promise held in memory).
describe('child leases', () => {
  test('acquiring a working copy takes a child host lease owned by the working-copy resource', async () => {
    const { host, wc, broker } = await setup();
    const acquiring = broker.acquire({ type: 'working-copy' });
    await broker.runUntilIdle();
    const lease = await acquiring;
    expect(lease.resource.type).toBe('working-copy');
    const wcResourceId = lease.resource.id;

    const children = (await broker.leases.list({ type: 'host' }));
    expect(children).toHaveLength(1);
    const child = children[0]!;
    expect(child.owner).toBe(`resource:${wcResourceId}`);
    expect(child.parentResourceId).toBe(wcResourceId);
    expect(child.attributes).toEqual({ arch: 'x86' });
    expect(child.status).toBe('active');
    expect(await broker.leases.list({ owner: `resource:${wcResourceId}` })).toHaveLength(1);
    const hostResource = (await broker.resources.get(child.resourceId!))!;
    expect(hostResource.type).toBe('host');
    expect(hostResource.blueprint).toBe(host.name);
    expect(hostResource.status).toBe('active');
    // the top-level lease has no parent
    expect((await broker.leases.get(lease.id))!.parentResourceId).toBeNull();
    expect(wc.calls.activateResource).toBe(1);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('the working copy activates only once its child is active (child activation gated)', async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const { host, wc, broker, events } = await setup({ gates: { activateResource: () => gate } });
    const acquiring = broker.acquire({ type: 'working-copy' });
    const pump = setInterval(() => void broker.runUntilIdle().catch(() => undefined), 20);
    try {
      while (host.calls.activateResource === 0) await new Promise((r) => setTimeout(r, 10));
      // give the workers time to (wrongly) move the working copy on
      await new Promise((r) => setTimeout(r, 300));
      const [wcResource] = await broker.resources.list({ type: 'working-copy' });
      expect(wcResource!.status).toBe('pending');
      expect(wc.calls.activateResource).toBe(0);
      const [child] = await broker.leases.list({ type: 'host' });
      expect(child!.status).not.toBe('active');
      expect((await broker.leases.list({ type: 'working-copy' }))[0]!.status).toBe('pending');

      open();
      const lease = await acquiring;
      const childActive = indexOf(events, child!.id, 'active');
      const wcActive = indexOf(events, lease.resource.id, 'active');
      expect(childActive).toBeGreaterThanOrEqual(0);
      expect(wcActive).toBeGreaterThan(childActive);
      expect(indexOf(events, lease.id, 'active')).toBeGreaterThan(wcActive);
    } finally {
      clearInterval(pump);
    }
    await broker.runUntilIdle();
    await broker.close();
  });

  test('allocateResource is called again with resume: true after the child activates', async () => {
    const { wc, broker } = await setup();
    const acquiring = broker.acquire({ type: 'working-copy' });
    await broker.runUntilIdle();
    const lease = await acquiring;
    const allocations = wc.history.filter((h) => h.hook === 'allocateResource');
    expect(allocations).toEqual([
      { hook: 'allocateResource', id: lease.resource.id, resume: false },
      { hook: 'allocateResource', id: lease.resource.id, resume: true },
    ]);
    // the second call found the same child again (by key): still one child lease
    expect(await broker.leases.list({ type: 'host' })).toHaveLength(1);
    // activation comes after the second allocation call
    const hooks = wc.history.map((h) => h.hook);
    expect(hooks.lastIndexOf('allocateResource')).toBeLessThan(hooks.indexOf('activateResource'));
    await broker.close();
  });

  test('releasing the working-copy resource releases and destroys its child lease', async () => {
    const { host, broker, events } = await setup();
    const acquiring = broker.acquire({ type: 'working-copy' });
    await broker.runUntilIdle();
    const lease = await acquiring;
    const [child] = await broker.leases.list({ type: 'host' });

    // releasing only the working-copy lease leaves the resource, and so its child, alive
    await broker.release(lease.id);
    await broker.runUntilIdle();
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('active');
    expect((await broker.leases.get(child!.id))!.status).toBe('active');

    await broker.releaseResource(lease.resource.id, { reason: 'done with it' });
    await broker.runUntilIdle();
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('destroyed');
    const after = (await broker.leases.get(child!.id))!;
    expect(after.status).toBe('destroyed');
    expect(indexOf(events, child!.id, 'released')).toBeGreaterThan(indexOf(events, lease.resource.id, 'destroyed'));
    const [released] = await broker.logs({ lease: child!.id, type: 'lease.released' });
    expect(released!.data.reason).toMatch(new RegExp(`owner ${lease.resource.id}`));
    expect(released!.data.author).toBe(`resource:${lease.resource.id}`);
    expect(host.calls.destroyLease).toBe(1);
    // the host itself is not the working copy's to destroy: it is idle and may serve another lease
    expect((await broker.resources.get(child!.resourceId!))!.status).toBe('active');
    await broker.close();
  });

  test('releasing the working-copy resource while its lease is active releases the lease, then the resource and its child', async () => {
    const { broker } = await setup();
    const acquiring = broker.acquire({ type: 'working-copy' });
    await broker.runUntilIdle();
    const lease = await acquiring;
    const [child] = await broker.leases.list({ type: 'host' });
    await broker.releaseResource(lease.resource.id);
    await broker.runUntilIdle();
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('destroyed');
    expect((await broker.leases.get(child!.id))!.status).toBe('destroyed');
    await broker.close();
  });
});

// Issue 9, bug 10: the suites only ever nested a child one level down (working copy → host),
// so a cycle (A's resource takes a B, whose resource takes an A) stayed pending forever, unseen.
describe('a cycle of child leases, real clock', () => {
  test('the top lease breaks with "child lease cycle: A → B → A", and every object of the chain settles', async () => {
    const a = fakeBlueprint({ name: 'A', type: 'a', child: { type: 'b' } });
    const b = fakeBlueprint({ name: 'B', type: 'b', child: { type: 'a' } });
    const broker = track(await createBroker({ database: testDatabase(), blueprints: [a, b] }));
    const error = await broker.acquire({ type: 'a', owner: 'ci', timeout: { seconds: 20 } }).catch((e) => e);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect(error.message).toMatch(/child lease cycle: A → B → A/);
    const deadline = Date.now() + 15_000;
    const live = async () => {
      const leases = await broker.leases.list({ status: ['pending', 'acquired', 'active', 'released', 'broken'] });
      const resources = await broker.resources.list({ status: ['pending', 'active', 'released', 'broken'] });
      return leases.length + resources.length;
    };
    while ((await live()) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(await live()).toBe(0);
    // B's resource asked for an A once, and never again: the chain was refused, not retried.
    expect(b.calls.allocateResource).toBe(1);
    const failures = await broker.logs({ type: 'hook.failure' });
    expect(failures.some((l) => String(l.data.error).includes('child lease cycle: A → B → A'))).toBe(true);
    await broker.close();
  });

  test('a child of the same type through another blueprint is no cycle', async () => {
    const metal = fakeBlueprint({ name: 'metal', type: 'host' });
    const vm = fakeBlueprint({ name: 'vm', type: 'host', child: { type: 'host' } });
    const broker = track(await createBroker({ database: testDatabase(), blueprints: [metal, vm] }));
    // The vm's child host may come from metal: allowed (the parent chain holds vm only).
    const lease = await broker.acquire({ type: 'host', blueprints: ['vm'], owner: 'ci', timeout: { seconds: 20 } });
    expect(lease.resource.blueprint).toBe('vm');
    await lease.release();
    await broker.close();
  });
});
