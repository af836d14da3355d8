import { createBroker, type Broker, type BrokerOptions, type Logger } from '../lib/index.js';
import { internals } from '../lib/broker.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { canStartPostgres, startPostgres, type ThrowawayPostgres } from './helpers/postgres.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

/** A logger that keeps every message, to assert what the broker said about an outage. */
function recordingLogger(): Logger & { messages: string[] } {
  const messages: string[] = [];
  const keep = (_: object, msg?: string) => void messages.push(msg ?? '');
  return { messages, debug: keep, info: keep, warn: keep, error: keep };
}

async function counts(broker: Broker) {
  const { db, runtime } = internals.get(broker)!;
  const s = runtime.store.s;
  const [row] = await db.query(`
    SELECT (SELECT count(*)::int FROM ${s}.leases) AS leases,
           (SELECT count(*)::int FROM ${s}.leases WHERE status <> 'destroyed') AS live_leases,
           (SELECT count(*)::int FROM ${s}.commands WHERE consumed_at IS NULL) AS unconsumed,
           (SELECT count(*)::int FROM ${s}.work_items w WHERE w.object_kind = 'lease') AS lease_work,
           (SELECT count(*)::int FROM ${s}.work_items WHERE claimed_by IS NOT NULL) AS claimed,
           (SELECT count(*)::int FROM ${s}.slot_locks WHERE key NOT LIKE 'slipway:capacity:%') AS slot_locks`);
  return row;
}

// Sweeps and rechecks far slower than the test's own deadlines: progress within them
// can only come from LISTEN/NOTIFY.
const SLOW = { sweepInterval: { seconds: 60 }, waitRecheck: { seconds: 60 } } satisfies Partial<BrokerOptions>;

describeOnPostgres('wake-ups across brokers (LISTEN/NOTIFY)', () => {
  test('a waiting acquire() in broker A is woken when broker B frees the resource, not by a poll', async () => {
    const schema = freshSchema();
    const options = (): BrokerOptions => ({
      ...SLOW,
      database: { url: tierUrl!, schema },
      blueprints: [fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 } })],
    });
    const b = track(await createBroker(options()));
    const held = await b.acquire({ type: 'fake', timeout: { seconds: 20 } });
    const a = track(await createBroker(options()));
    const waiting = await a.requestLease({ type: 'fake' });
    // A's lease has run its pass and parked: it waits for the resource B holds.
    const deadline = Date.now() + 10_000;
    while ((await a.logs({ lease: waiting.id, type: 'lease.waiting-for-resources' })).length === 0) {
      if (Date.now() > deadline) throw new Error('the lease never started waiting');
      await new Promise((r) => setTimeout(r, 20));
    }
    const released = Date.now();
    await held.release();
    const lease = await waiting.whenActive({ timeout: { seconds: 10 } });
    expect(lease.resource.id).toBe(held.resource.id);
    // Far below the 60 s sweep and recheck: the NOTIFY of B's release woke A.
    expect(Date.now() - released).toBeLessThan(3_000);
    await lease.release();
    await a.close();
    await b.close();
  }, 60_000);
});

// A server restart in the middle of a run: this test needs a cluster of its own to restart.
(canStartPostgres() ? describeOnPostgres : describe.skip)('a database outage in the middle of a run', () => {
  let pg: ThrowawayPostgres;
  beforeAll(async () => {
    pg = await startPostgres({ own: true });
  }, 60_000);
  afterAll(async () => pg?.stop());

  test('the server restarts while hooks run: brokers reconnect, hooks in flight finish, nothing is lost, work resumes', async () => {
    const schema = freshSchema();
    const loggers = [recordingLogger(), recordingLogger()];
    const blueprints = [0, 1].map(() =>
      fakeBlueprint({ name: 'slow', exclusive: true, limits: { maxResources: 3 }, delays: { allocateResource: 50, activateResource: 400, activateLease: 100, destroyLease: 50 } }),
    );
    const brokers = [0, 1].map(async (i) =>
      track(
        await createBroker({
          ...SLOW,
          database: { url: pg.url, schema, reconnectTimeout: { seconds: 60 } },
          blueprints: [blueprints[i]],
          claimTtl: { seconds: 5 },
          logger: loggers[i],
        }),
      ),
    );
    const [a, b] = await Promise.all(brokers);
    const N = 16;
    let restarted = false;
    const done: string[] = [];
    const flows = Array.from({ length: N }, async (_, i) => {
      const broker = i % 2 ? b : a;
      const lease = await broker.acquire({ type: 'fake', attributes: { i }, timeout: { minutes: 1 } });
      await new Promise((r) => setTimeout(r, 50));
      await lease.release();
      done.push(`${i}${restarted ? '+' : '-'}`);
    });
    // Restart once some leases are done and others are still in their hooks.
    const deadline = Date.now() + 30_000;
    while (done.length < 3) {
      if (Date.now() > deadline) throw new Error('the run never got going');
      await new Promise((r) => setTimeout(r, 20));
    }
    const inHooks = () => blueprints.reduce((n, bp) => n + bp.calls.activateResource + bp.calls.activateLease, 0);
    const hooksBefore = inHooks();
    await pg.restart(1_500);
    restarted = true;
    await Promise.all(flows);

    expect(done).toHaveLength(N);
    expect(done.some((d) => d.endsWith('+'))).toBe(true); // flows finished after the restart, not only before it
    expect(inHooks()).toBeGreaterThan(hooksBefore);
    // Resource passes may still be finishing (idle bookkeeping); wait for quiet, bounded.
    const quiet = Date.now() + 20_000;
    while ((await counts(a)).claimed > 0 && Date.now() < quiet) await new Promise((r) => setTimeout(r, 50));
    expect(await counts(a)).toEqual({ leases: N, live_leases: 0, unconsumed: 0, lease_work: 0, claimed: 0, slot_locks: 0 });
    // What the brokers said: the outage was noticed and recovered from, on the pool and on LISTEN.
    const said = loggers.flatMap((l) => l.messages);
    expect(said).toEqual(expect.arrayContaining(['slipway: the database is unreachable; retrying', 'slipway: the database answers again']));
    expect(said.some((m) => m.startsWith('slipway: LISTEN connection lost'))).toBe(true);
    expect(said).toContain('slipway: LISTEN connection is back');
    await a.close();
    await b.close();
  }, 180_000);
});
