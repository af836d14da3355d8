/**
 * `ctx.lockOneOf(keys)` (issue 10, point 2): one of N slots on a resource, chosen by the
 * library. The README's blueprint example used to name its slot lock after
 * `ctx.resource.leaseCount`, which names a slot an earlier lease may still hold: after a
 * release, the next lease retried that held slot and stalled. These tests run the example's
 * own pattern on the real clock under createBroker, on both tiers.
 */
import { createBroker, defineBlueprint, type Broker, type Lease } from '../lib/index.js';
import { guardBrokers, realBroker, track } from './helpers/broker.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

const SLOTS = 2;

/** The README example's pattern (examples/readme/blueprint.ts), with two slots per resource and no cloud. */
const slotted = defineBlueprint<Record<string, never>, { built: boolean }, { slot: number }>({
  type: 'host',
  async allocateResource() {
    return { attributes: { built: true } };
  },
  canAcquireLease: (ctx) => ctx.resource.leaseCount < SLOTS,
  async acquireLease(ctx) {
    const slots = Array.from({ length: SLOTS }, (_, i) => `vm:${ctx.resource.id}:slot:${i}`);
    return { attributes: { slot: slots.indexOf(await ctx.lockOneOf(slots)) } };
  },
});

const pool = (name = 'vms') => slotted({ name, config: {}, limits: { maxResources: 1 } });
const slotOf = (lease: Lease) => lease.attributes.slot as number;

async function slotConflicts(broker: Broker): Promise<number> {
  return (await broker.logs({ type: 'lease.slot-lock-failure' })).reduce((n, l) => n + l.count, 0);
}

test('4 leases over 2 slots: each active lease holds its own slot, and a released slot is reused at once', async () => {
  const broker = await realBroker({ blueprints: [pool()] });
  try {
    const a = await broker.acquire({ type: 'host', owner: 'a', timeout: { seconds: 10 } });
    const b = await broker.acquire({ type: 'host', owner: 'b', timeout: { seconds: 10 } });
    expect([slotOf(a), slotOf(b)].sort()).toEqual([0, 1]);
    expect(b.resource.id).toBe(a.resource.id);

    const c = await broker.requestLease({ type: 'host', owner: 'c' });
    const d = await broker.requestLease({ type: 'host', owner: 'd' });
    // Both wait (their first passes are over) before a slot frees.
    for (const lease of [c, d]) {
      const deadline = Date.now() + 10_000;
      while ((await broker.logs({ lease: lease.id, type: 'lease.waiting-for-resources' })).length === 0) {
        if (Date.now() > deadline) throw new Error(`lease ${lease.id} never started waiting`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    // The first lease to go frees slot 0 or 1: the next waiter gets exactly that one.
    const freed = slotOf(a);
    await a.release();
    const cActive = await c.whenActive({ timeout: { seconds: 10 } });
    expect(slotOf(cActive)).toBe(freed);
    expect(await d.status()).toBe('pending');

    const freedToo = slotOf(b);
    await b.release();
    const dActive = await d.whenActive({ timeout: { seconds: 10 } });
    expect(slotOf(dActive)).toBe(freedToo);
    expect([slotOf(cActive), slotOf(dActive)].sort()).toEqual([0, 1]);
    // No lease ever tried a slot that was still held.
    expect(await slotConflicts(broker)).toBe(0);
    await cActive.release();
    await dActive.release();
  } finally {
    await broker.close();
  }
}, 60_000);

test('many acquires at once in one process choose different free slots, with no conflict to retry', async () => {
  const wide = defineBlueprint<Record<string, never>, Record<string, never>, { slot: number }>({
    type: 'host',
    async allocateResource() {},
    async acquireLease(ctx) {
      const slots = Array.from({ length: 8 }, (_, i) => `wide:${ctx.resource.id}:${i}`);
      return { attributes: { slot: slots.indexOf(await ctx.lockOneOf(slots)) } };
    },
  });
  const broker = await realBroker({ blueprints: [wide({ name: 'wide', config: {}, limits: { maxResources: 1, maxLeasesPerResource: 8 } })] });
  try {
    // One resource first, so that all eight race for its slots.
    await (await broker.acquire({ type: 'host' })).release();
    const leases = await Promise.all(Array.from({ length: 8 }, (_, i) => broker.acquire({ type: 'host', owner: `job-${i}`, timeout: { seconds: 20 } })));
    expect(leases.map(slotOf).sort()).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(await slotConflicts(broker)).toBe(0);
    await Promise.all(leases.map((l) => l.release()));
  } finally {
    await broker.close();
  }
}, 60_000);

test('bad keys are the hook\'s failure, with an error naming lockOneOf(keys)', async () => {
  const bad = defineBlueprint<{ keys: unknown }>({
    type: 'host',
    async allocateResource() {},
    async acquireLease(ctx) {
      await ctx.lockOneOf(ctx.blueprint.config.keys as string[]);
    },
  });
  const broker = await realBroker({
    blueprints: [bad({ name: 'empty', config: { keys: [] } }), bad({ name: 'blank', config: { keys: ['a', ''] } })],
  });
  try {
    for (const [name, field] of [
      ['empty', 'lockOneOf(keys)'],
      ['blank', 'lockOneOf(keys)[1]'],
    ]) {
      await expect(broker.acquire({ type: 'host', blueprints: [name!], timeout: { seconds: 10 } })).rejects.toMatchObject({ name: 'LeaseBrokenError' });
      const failures = await broker.logs({ blueprint: name, type: 'hook.failure' });
      expect(failures.map((f) => f.message).join('\n')).toContain(field!);
    }
  } finally {
    await broker.close();
  }
}, 60_000);

describeOnPostgres('lockOneOf across brokers on one database', () => {
  test('two brokers, 2 slots, 6 leases each: an active lease never shares its slot, and every lease is served', async () => {
    const schema = freshSchema('slots');
    const open = () => createBroker({ database: { url: tierUrl!, schema }, blueprints: [pool()], sweepInterval: { milliseconds: 200 } }).then(track);
    const brokers = [await open(), await open()];
    try {
      const held = new Map<number, string>();
      const clashes: string[] = [];
      const job = async (broker: Broker, name: string) => {
        const lease = await broker.acquire({ type: 'host', owner: name, timeout: { seconds: 40 } });
        const slot = slotOf(lease);
        if (held.has(slot)) clashes.push(`${name} got slot ${slot}, held by ${held.get(slot)}`);
        held.set(slot, name);
        await new Promise((r) => setTimeout(r, 50));
        held.delete(slot);
        await lease.release();
      };
      await Promise.all(brokers.flatMap((broker, i) => Array.from({ length: 6 }, (_, j) => job(broker, `b${i}-job${j}`))));
      expect(clashes).toEqual([]);
      const leases = await brokers[0]!.leases.list({ status: 'destroyed' });
      expect(leases.filter((l) => l.owner?.startsWith('b')).length).toBe(12);
    } finally {
      await Promise.all(brokers.map((b) => b.close()));
    }
  }, 90_000);
});
