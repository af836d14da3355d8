import { fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';
import { pump, settle } from './helpers/pump.js';

guardBrokers();

/**
 * Samples the number of allocating (pending) resources of a blueprint on real time while a hook
 * blocks: until `reached()` holds (the limit was filled; bounded, since a loaded machine may take
 * seconds to start the first allocation), then for `ms` more, in which the count must not grow.
 */
async function samplePending(broker: TestBroker, blueprint: string, ms: number, reached: () => boolean = () => true) {
  const seen: number[] = [];
  const sample = async () => {
    const [listed, stats] = [await broker.resources.list({ status: 'pending', blueprint }), await broker.stats()];
    seen.push(listed.length, stats.blueprints[blueprint]!.allocating);
    await settle(20);
  };
  const bound = Date.now() + 60_000;
  while (!reached()) {
    if (Date.now() > bound) throw new Error(`samplePending: the limit was not reached in 60 s (seen ${JSON.stringify(seen.slice(-10))})`);
    await sample();
  }
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) await sample();
  return seen;
}

/** activateResource blocks while `hold` is set: `open()` lets every held call through. */
function holdable() {
  let release: (() => void) | null = null;
  let promise: Promise<void> | null = null;
  return {
    hold() {
      promise = new Promise((r) => (release = r));
    },
    open() {
      release?.();
      promise = null;
    },
    wait: () => promise ?? Promise.resolve(),
  };
}

// Invariant 5: per blueprint, resources still allocating never exceed max(1, ceil(25% × active)).
describe('allocation rate limit', () => {
  test('with 40 active resources and no maximum, 20 more leases allocate at most 10 at once', async () => {
    const activation = holdable();
    const bp = fakeBlueprint({ name: 'burst', exclusive: true, gates: { activateResource: activation.wait } });
    // enough workers that blocked activations do not starve the lease workers
    await using broker = await testBroker({ blueprints: [bp], workers: { concurrency: 64 } });
    const held = await pump(broker, Promise.all(Array.from({ length: 40 }, (_, i) => broker.acquire({ type: 'fake', attributes: { i } }))), 60_000);
    expect(new Set(held.map((l) => l.resource.id)).size).toBe(40);
    expect((await broker.stats()).blueprints.burst!.resources.active).toBe(40);
    expect(bp.calls.allocateResource).toBe(40);

    activation.hold();
    const more = await Promise.all(Array.from({ length: 20 }, (_, i) => broker.requestLease({ type: 'fake', attributes: { more: i } })));
    // let the 20 leases run their allocators several times (rechecks) while activation is held
    const seen = await samplePending(broker, 'burst', 1500, () => bp.calls.allocateResource >= 50);
    broker.clock.advance({ minutes: 1 });
    seen.push(...(await samplePending(broker, 'burst', 800)));
    expect(Math.max(...seen)).toBe(10); // = max(1, ceil(0.25 × 40)); reached, never exceeded
    expect(bp.calls.allocateResource).toBe(50);
    const stats = (await broker.stats()).blueprints.burst!;
    expect(stats.allocating).toBe(10);
    expect(stats.live).toBe(50);
    expect((await broker.stats()).types.fake!.waiting).toBe(20);

    activation.open();
    await pump(broker, Promise.all(more.map((h) => h.whenActive())), 60_000);
    expect(bp.calls.allocateResource).toBe(60);
    expect(await broker.resources.list({ status: 'active' })).toHaveLength(60);
    expect(engineErrors(broker)).toEqual([]);
  });

  test('with no active resource, one allocation at a time: max(1, ...)', async () => {
    const activation = holdable();
    activation.hold();
    const bp = fakeBlueprint({ name: 'cold', exclusive: true, gates: { activateResource: activation.wait } });
    await using broker = await testBroker({ blueprints: [bp], workers: { concurrency: 16 } });
    const handles = await Promise.all(Array.from({ length: 5 }, () => broker.requestLease({ type: 'fake' })));
    const seen = await samplePending(broker, 'cold', 1000, () => bp.calls.allocateResource >= 1);
    expect(Math.max(...seen)).toBe(1);
    expect(bp.calls.allocateResource).toBe(1);
    activation.open();
    await pump(broker, Promise.all(handles.map((h) => h.whenActive())), 60_000);
    expect(await broker.resources.list({ status: 'active' })).toHaveLength(5);
  });

  test('limits.allocationLimit is honoured (3 at once, whatever the active count)', async () => {
    const activation = holdable();
    activation.hold();
    const seenActive: number[] = [];
    const bp = fakeBlueprint({
      name: 'custom',
      exclusive: true,
      gates: { activateResource: activation.wait },
      limits: { allocationLimit: (active) => (seenActive.push(active), 3) },
    });
    await using broker = await testBroker({ blueprints: [bp], workers: { concurrency: 16 } });
    const handles = await Promise.all(Array.from({ length: 8 }, () => broker.requestLease({ type: 'fake' })));
    const seen = await samplePending(broker, 'custom', 1200, () => bp.calls.allocateResource >= 3);
    expect(Math.max(...seen)).toBe(3);
    expect(bp.calls.allocateResource).toBe(3);
    expect(seenActive.every((a) => a === 0)).toBe(true);
    activation.open();
    await pump(broker, Promise.all(handles.map((h) => h.whenActive())), 60_000);
    expect(bp.calls.allocateResource).toBe(8);
  });
});
