import { createBroker } from '../lib/index.js';
import { internals } from '../lib/broker/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker, track } from './helpers/broker.js';
import { gate } from './helpers/pump.js';
import { freshSchema, tier, tierUrl } from './helpers/tier.js';

guardBrokers();

// Invariant 2: no lock or transaction is held across a blueprint call.
describe('no transaction across a hook', () => {
  test('embedded: while activateResource hangs, the single database session stays free for other work', async () => {
    const g = gate();
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'slow', gates: { activateResource: g.wait } })] });
    const first = await broker.requestLease({ type: 'fake' });
    void broker.runUntilIdle().catch(() => undefined);
    await g.reached;
    // PGlite has one session: if the worker held a transaction, each of these would block.
    const started = Date.now();
    const second = await broker.requestLease({ type: 'fake' });
    await broker.stats();
    await broker.release(second.id);
    expect(Date.now() - started).toBeLessThan(5_000);
    g.open();
    await broker.runUntilIdle();
    expect(await first.status()).toBe('active');
    await broker.close();
  });

  (tier === 'postgres' ? test : test.skip)('postgres: while a hook hangs, no connection of the broker is idle in a transaction or holds a lock', async () => {
    const g = gate();
    const schema = freshSchema();
    const app = `slipway-${schema}`.slice(0, 63);
    const broker = track(await createBroker({ database: { url: tierUrl!, schema, applicationName: app }, blueprints: [fakeBlueprint({ name: 'slow', gates: { allocateResource: g.wait } })] }));
    const handle = await broker.requestLease({ type: 'fake' });
    await g.reached;
    const db = internals.get(broker)!.db;
    // Let the lease's own pass finish (it waits for the resource); then the only work in flight is the hanging hook.
    for (let i = 0; i < 200; i++) {
      const busy = await db.query(`SELECT 1 FROM ${schema}.work_items WHERE object_kind = 'lease' AND claimed_by IS NOT NULL`);
      if (busy.length === 0) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    // Only this broker's connections (application_name): other test files share the server.
    const inTxRows = await db.query(`SELECT query, state FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'`, [app]);
    expect(inTxRows).toEqual([]);
    const locks = await db.query(
      `SELECT locktype, mode FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE a.application_name = $1 AND l.pid <> pg_backend_pid() AND l.locktype IN ('advisory', 'tuple', 'transactionid')`,
      [app],
    );
    expect(locks).toEqual([]);
    const connections = await db.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1`, [app]);
    expect(Number(connections[0].n)).toBeGreaterThanOrEqual(2); // the pool in use, plus the LISTEN connection
    g.open();
    await handle.whenActive({ timeout: { seconds: 30 } });
    await handle.release();
    await broker.close();
  }, 60_000);
});
