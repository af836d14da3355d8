import { internals } from '../lib/broker/index.js';
import { IllegalTransitionError, LEASE_TRANSITIONS, RESOURCE_TRANSITIONS, isLegalTransition } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker } from './helpers/broker.js';

guardBrokers();

// DESIGN "Lifecycles": the only legal transitions, and no forced write.
describe('transition tables', () => {
  test('match the lifecycles of DESIGN.md exactly', () => {
    expect(LEASE_TRANSITIONS).toEqual({
      pending: ['acquired', 'broken', 'released'],
      acquired: ['active', 'pending', 'broken', 'released'],
      active: ['released', 'broken'],
      released: ['destroyed'],
      broken: ['destroyed'],
      destroyed: [],
    });
    expect(RESOURCE_TRANSITIONS).toEqual({
      pending: ['active', 'broken', 'released'],
      active: ['released', 'broken'],
      released: ['destroyed'],
      broken: ['destroyed'],
      destroyed: [],
    });
    expect(isLegalTransition('lease', 'destroyed', 'pending')).toBe(false);
    expect(isLegalTransition('resource', 'released', 'active')).toBe(false);
  });

  test('the database refuses a status outside the set', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' })] });
    const { db, store } = internals.get(broker)!;
    await expect(db.query(`INSERT INTO ${store.s}.resources (id, type, blueprint, status, created_at, status_changed_at) VALUES ('x', 'fake', 'f', 'deleting', now(), now())`)).rejects.toThrow(/check/i);
    await broker.close();
  });

  test('a compare-and-set on a stale status is refused, never forced (GARM lesson 1)', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' })] });
    const lease = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await lease.status()).toBe('active');
    const { store } = internals.get(broker)!.runtime;
    // A writer that still believes the lease is pending:
    await expect(store.unit((u) => store.casLease(u, lease.id, 'pending', 'acquired'))).rejects.toThrow(IllegalTransitionError);
    // The same refusal as one statement on its own (how a worker consumes a release): it says
    // why, with the status it found, rather than failing on the read that finds it.
    await expect(store.single((u) => store.casLease(u, lease.id, 'acquired', 'released'))).rejects.toThrow(/acquired → released refused: status is active/);
    // A transition the table forbids is refused before any SQL runs:
    await expect(store.unit((u) => store.casLease(u, lease.id, 'active', 'pending'))).rejects.toThrow(/not a legal transition/);
    expect(await lease.status()).toBe('active');
    await lease.release();
    await broker.runUntilIdle();
    expect(await lease.status()).toBe('destroyed');
    await broker.close();
  });

  test('every status change is logged old → new and is legal', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' })] });
    const handles = await Promise.all([1, 2, 3].map(() => broker.requestLease({ type: 'fake' })));
    await broker.runUntilIdle();
    for (const h of handles) await h.release({ wait: false });
    await broker.runUntilIdle();
    const changes = await broker.logs({ type: 'status.changed' });
    for (const h of handles) {
      const path = changes.filter((c) => c.lease === h.id).map((c) => `${c.data.from}>${c.data.to}`);
      expect(path).toEqual(['pending>acquired', 'acquired>active', 'active>released', 'released>destroyed']);
    }
    for (const c of changes) expect(isLegalTransition(c.data.kind as 'lease', c.data.from as string, c.data.to as string)).toBe(true);
    await broker.close();
  });
});
