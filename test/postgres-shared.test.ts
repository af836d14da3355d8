import { createBroker, type Broker } from '../lib/index.js';
import { internals } from '../lib/broker/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

// Invariants 1 and 5 on a real server: two brokers, one database, one capped pool.
describeOnPostgres('two brokers sharing one Postgres', () => {
  test('maxResources holds across brokers (slot-lock cap, invariant 5) and every lease ends destroyed', async () => {
    const blueprint = () => fakeBlueprint({ name: 'pool', exclusive: true, limits: { maxResources: 3 }, delays: { allocateResource: 5, activateResource: 10 } });
    const schema = freshSchema();
    const options = { database: { url: tierUrl!, schema }, blueprints: [blueprint()], sweepInterval: { milliseconds: 100 } };
    const brokers: Broker[] = [track(await createBroker(options)), track(await createBroker({ ...options, blueprints: [blueprint()] }))];
    const db = internals.get(brokers[0])!.db;
    let maxLive = 0;
    const sample = setInterval(async () => {
      const [row] = await db.query(`SELECT count(*)::int AS n FROM ${schema}.resources WHERE status <> 'destroyed'`).catch(() => [{ n: 0 }]);
      maxLive = Math.max(maxLive, Number(row.n));
    }, 20);
    const flows = Array.from({ length: 24 }, (_, i) => brokers[i % 2].acquire({ type: 'fake', attributes: { i } }).then((lease) => lease.release()));
    await Promise.all(flows);
    clearInterval(sample);
    const leases = await db.query(`SELECT status, count(*)::int AS n FROM ${schema}.leases GROUP BY status`);
    expect(leases).toEqual([{ status: 'destroyed', n: 24 }]);
    const created = await db.query(`SELECT count(*)::int AS n FROM ${schema}.resources`);
    expect(Number(created[0].n)).toBeLessThanOrEqual(3);
    expect(maxLive).toBeLessThanOrEqual(3);
    const locks = await db.query(`SELECT key FROM ${schema}.slot_locks WHERE key NOT LIKE 'slipway:capacity:%'`);
    expect(locks).toEqual([]);
    const unconsumed = await db.query(`SELECT count(*)::int AS n FROM ${schema}.commands WHERE consumed_at IS NULL`);
    expect(Number(unconsumed[0].n)).toBe(0);
    for (const b of brokers) await b.close();
  }, 120_000);
});
