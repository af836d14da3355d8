import pg from 'pg';
import { createBroker, type Broker } from '../lib/index.js';
import { internals } from '../lib/broker/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { until } from './helpers/pump.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

/*
 * Invariant 4, the other half: a claim carries an expiry that a live worker's heartbeat keeps
 * ahead during a long hook, so a hook that runs many times longer than claimTtl is neither
 * taken over nor run twice.
 *
 * Real time, not the injected clock: the heartbeat is a timer of the engine (every claimTtl / 3)
 * and the other broker's sweep is another; what is tested is that the one outruns the expiry the
 * other one checks, so both must run on the wall clock.
 */

// A claim lifetime a loaded CI machine does not stall through (a 300 ms one lapsed there once
// before the first heartbeat), and a hook five lifetimes long.
const CLAIM_TTL_MS = 1_000;
const HOOK_MS = 5_000;
// Longer than two claim lifetimes: a heartbeat that waits for the lock lets every claim lapse.
const LOCK_MS = 2_500;

describeOnPostgres('heartbeats during a hook longer than claimTtl (Postgres)', () => {
  test(`activateResource runs ${HOOK_MS} ms with claimTtl ${CLAIM_TTL_MS} ms on one of two brokers: called once, never resumed, the claim never lapses nor changes hands, the outcome is recorded`, async () => {
    const schema = freshSchema();
    const blueprints = [0, 1].map(() => fakeBlueprint({ name: 'slow', delays: { activateResource: HOOK_MS } }));
    const brokers: Broker[] = [];
    for (const blueprint of blueprints) {
      brokers.push(
        track(
          await createBroker({
            database: { url: tierUrl!, schema, poolSize: 3 },
            blueprints: [blueprint],
            claimTtl: { milliseconds: CLAIM_TTL_MS },
            // Each broker looks for due work (an expired claim included) every 50 ms: a lapse would be taken over at once.
            sweepInterval: { milliseconds: 50 },
          }),
        ),
      );
    }
    const workerIds = brokers.map((b) => internals.get(b)!.runtime.workerId);
    const observer = new pg.Client({ connectionString: tierUrl!, application_name: 'heartbeat-observer' });
    await observer.connect();
    try {
      const handle = await brokers[0].requestLease({ type: 'fake' });
      const hookCalls = () => blueprints.reduce((n, b) => n + b.calls.activateResource, 0);
      const deadline = Date.now() + 10_000;
      while (hookCalls() === 0) {
        if (Date.now() > deadline) throw new Error('activateResource never started');
        await new Promise((r) => setTimeout(r, 10));
      }
      const hookStartedAt = Date.now();
      const runner = blueprints[0].calls.activateResource === 1 ? 0 : 1;

      // While the hook runs: the resource's work item, on the server's own clock, every ~25 ms.
      const samples: Array<{ claimed_by: string | null; lapsed: boolean; left_ms: number }> = [];
      while (Date.now() - hookStartedAt < HOOK_MS - 100) {
        const { rows } = await observer.query(
          `SELECT w.claimed_by, w.claim_expires_at <= clock_timestamp() AS lapsed,
                  (extract(epoch FROM w.claim_expires_at - clock_timestamp()) * 1000)::int AS left_ms
           FROM "${schema}".work_items w JOIN "${schema}".resources r ON w.object_kind = 'resource' AND w.object_id = r.id
           WHERE r.status = 'pending'`,
        );
        if (rows.length === 1) samples.push(rows[0]);
        await new Promise((r) => setTimeout(r, 25));
      }
      // The hook outlived many claim lifetimes, and was watched for most of them.
      expect(samples.length).toBeGreaterThan(30);
      const bad = samples.filter((s) => s.claimed_by !== workerIds[runner] || s.lapsed);
      expect({ of: samples.length, bad: bad.length, first: bad.slice(0, 3) }).toEqual({ of: samples.length, bad: 0, first: [] });

      const lease = await handle.whenActive({ timeout: { seconds: 10 } });
      expect(Date.now() - hookStartedAt).toBeGreaterThanOrEqual(HOOK_MS - 50);
      expect(hookCalls()).toBe(1);
      expect(blueprints.flatMap((b) => b.history).filter((h) => h.resume)).toEqual([]);
      const resource = lease.resource.id;
      const logs = (await brokers[0].logs({ resource })).map((l) => l.type);
      expect(logs.filter((t) => t === 'resource.resume')).toEqual([]);
      expect(logs.filter((t) => t === 'resource.activated')).toEqual(['resource.activated']);
      expect((await brokers[1].resources.get(resource))!.status).toBe('active');

      await lease.release();
      for (const b of brokers) await b.close();
    } finally {
      await observer.end();
    }
  }, 30_000);

  test(`a work item another transaction holds locked for ${LOCK_MS} ms does not hold up the heartbeat of the others: their claims never lapse`, async () => {
    const schema = freshSchema();
    // One resource, two leases on it, each in an activateLease as long as the lock and more.
    const blueprint = fakeBlueprint({ name: 'slow', delays: { activateLease: LOCK_MS + 2_000 } });
    const broker = track(await createBroker({ database: { url: tierUrl!, schema, poolSize: 4 }, blueprints: [blueprint], claimTtl: { milliseconds: CLAIM_TTL_MS } }));
    const workerId = internals.get(broker)!.runtime.workerId;
    const locker = new pg.Client({ connectionString: tierUrl!, application_name: 'heartbeat-locker' });
    const observer = new pg.Client({ connectionString: tierUrl!, application_name: 'heartbeat-observer' });
    await locker.connect();
    await observer.connect();
    try {
      const [held, other] = await Promise.all([broker.requestLease({ type: 'fake' }), broker.requestLease({ type: 'fake' })]);
      await until('activateLease to start for both leases', () => blueprint.calls.activateLease >= 2);
      // Another transaction writes the first lease's work item and stays open (a wake or a
      // hand-off waiting in a lock queue, as under load). The heartbeat used to wait for it.
      await locker.query('BEGIN');
      await locker.query(`SELECT 1 FROM "${schema}".work_items WHERE object_kind = 'lease' AND object_id = $1 FOR UPDATE`, [held.id]);
      const lockedAt = Date.now();
      const samples: Array<{ claimed_by: string | null; lapsed: boolean }> = [];
      while (Date.now() - lockedAt < LOCK_MS) {
        const { rows } = await observer.query(
          `SELECT claimed_by, claim_expires_at <= clock_timestamp() AS lapsed FROM "${schema}".work_items WHERE object_kind = 'lease' AND object_id = $1`,
          [other.id],
        );
        samples.push(rows[0] ?? { claimed_by: null, lapsed: true });
        await new Promise((r) => setTimeout(r, 25));
      }
      await locker.query('COMMIT');
      expect(samples.length).toBeGreaterThan(30);
      const bad = samples.filter((s) => s.claimed_by !== workerId || s.lapsed);
      expect({ of: samples.length, bad: bad.length, first: bad.slice(0, 3) }).toEqual({ of: samples.length, bad: 0, first: [] });

      // Both leases go active, each activated once.
      await Promise.all([held, other].map((h) => h.whenActive({ timeout: { seconds: 20 } })));
      expect(blueprint.calls.activateLease).toBe(2);
      await Promise.all([held, other].map((h) => h.release()));
      await broker.close();
    } finally {
      await locker.end();
      await observer.end();
    }
  }, 60_000);
});
