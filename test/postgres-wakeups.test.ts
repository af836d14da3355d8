import pg from 'pg';
import { createBroker, type Broker, type BrokerOptions, type Lease, type Logger } from '../lib/index.js';
import { internals } from '../lib/broker/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { startCuttingProxy } from './helpers/cutting-proxy.js';
import { channelFor, decodeHint, encodeHint, Listener, type Hint } from '../lib/store/notifier.js';
import { until } from './helpers/pump.js';
import { canStartPostgres, startPostgres, type ThrowawayPostgres } from './helpers/postgres.js';
import { lockHolder } from './helpers/lock-holder.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

/** A logger that keeps every message, to assert what the broker said about an outage. */
function recordingLogger(): Logger & { messages: string[] } {
  const messages: string[] = [];
  const keep = (_: object, msg?: string) => void messages.push(msg ?? '');
  return { messages, debug: keep, info: keep, warn: keep, error: keep };
}

async function counts(broker: Broker) {
  const { db, store } = internals.get(broker)!;
  const s = store.s;
  const [row] = await db.query(`
    SELECT (SELECT count(*)::int FROM ${s}.leases) AS leases,
           (SELECT count(*)::int FROM ${s}.leases WHERE status <> 'destroyed') AS live_leases,
           (SELECT count(*)::int FROM ${s}.commands WHERE consumed_at IS NULL) AS unconsumed,
           (SELECT count(*)::int FROM ${s}.work_items w WHERE w.object_kind = 'lease') AS lease_work,
           (SELECT count(*)::int FROM ${s}.work_items WHERE claimed_by IS NOT NULL) AS claimed,
           (SELECT count(*)::int FROM ${s}.slot_locks WHERE key NOT LIKE 'slipway:capacity:%') AS slot_locks`);
  return row;
}

/** The counts once no work item is claimed any more: a destroyed lease's pass deletes its work item just after the write release() waits for. Bounded. */
async function quietCounts(broker: Broker) {
  const quiet = Date.now() + 20_000;
  while ((await counts(broker)).claimed > 0 && Date.now() < quiet) await new Promise((r) => setTimeout(r, 50));
  return counts(broker);
}

// Sweeps and rechecks far slower than the test's own deadlines: progress within them
// can only come from LISTEN/NOTIFY.
const SLOW = { sweepInterval: { seconds: 60 }, waitRecheck: { seconds: 60 } } satisfies Partial<BrokerOptions>;

/** A broker's options on `schema`: one exclusive resource, sweeps and rechecks too slow to matter. */
const oneResource = (schema: string): BrokerOptions => ({
  ...SLOW,
  database: { url: tierUrl!, schema },
  blueprints: [fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 } })],
});

/**
 * Requests a lease in broker `a` while `held`, of another broker, has the one resource;
 * once it waits, releases `held`. Resolves with the lease, active, and the ms from the release.
 */
async function wokenByRelease(a: Broker, held: Lease) {
  const waiting = await a.requestLease({ type: 'fake' });
  // A's lease has run its pass and parked: it waits for the resource the other broker holds.
  const deadline = Date.now() + 10_000;
  while ((await a.logs({ lease: waiting.id, type: 'lease.waiting-for-resources' })).length === 0) {
    if (Date.now() > deadline) throw new Error('the lease never started waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
  const released = Date.now();
  await held.release();
  const lease = await waiting.whenActive({ timeout: { seconds: 10 } });
  return { lease, ms: Date.now() - released };
}

describeOnPostgres('wake-ups across brokers (LISTEN/NOTIFY)', () => {
  test('a waiting acquire() in broker A is woken when broker B frees the resource, not by a poll', async () => {
    const schema = freshSchema();
    const b = track(await createBroker(oneResource(schema)));
    const held = await b.acquire({ type: 'fake', timeout: { seconds: 20 } });
    const a = track(await createBroker(oneResource(schema)));
    const { lease, ms } = await wokenByRelease(a, held);
    expect(lease.resource.id).toBe(held.resource.id);
    // Far below the 60 s sweep and recheck: the NOTIFY of B's release woke A.
    expect(ms).toBeLessThan(3_000);
    await lease.release();
    await a.close();
    await b.close();
  }, 60_000);
});

/** A plain LISTEN client on a schema's channel (no broker): every NOTIFY sent there, decoded. */
async function overhear(schema: string) {
  const client = new pg.Client({ connectionString: tierUrl! });
  const heard: Hint[] = [];
  client.on('notification', (m) => heard.push(decodeHint(m.payload)!));
  await client.connect();
  await client.query(`LISTEN "${channelFor(schema)}"`);
  const notPresence = (from: string) => heard.filter((h) => h.from === from && (h.work || h.leases === null || h.leases.length > 0));
  return { heard, notPresence, close: () => client.end() };
}

describeOnPostgres('a hint is sent only when another broker listens', () => {
  test('alone, a broker sends only its presence; one that appears is caught up at once and then hears every hint; once it is gone, hints stop', async () => {
    const schema = freshSchema('presence');
    const channel = channelFor(schema);
    const observer = await overhear(schema);
    const received: Hint[] = [];
    // Every one is stopped at the end, also when an assertion fails midway: a Listener left
    // connected keeps jest from exiting.
    const started: Listener[] = [];
    const listener = (self: string, onHint: (h: Hint) => void) => {
      const made = new Listener({ url: tierUrl!, channel, applicationName: 'slipway-test', self, presenceMs: 200, onHint, onConnected: () => undefined, onLost: () => undefined });
      started.push(made);
      return made;
    };
    const toA: Hint[] = [];
    const a = listener('a', (h) => toA.push(h));
    try {
      await a.start();
      await until('a says it listens', () => observer.heard.some((h) => h.from === 'a'));
      // Past its first presence period with nobody heard: a is alone, and keeps its hints.
      await new Promise((r) => setTimeout(r, 400));
      a.send({ from: 'a', work: true, leases: ['lease-1'] });
      await new Promise((r) => setTimeout(r, 300));
      expect(observer.notPresence('a')).toEqual([]);

      const b = listener('b', (h) => received.push(h));
      await b.start();
      // b's presence reaches a, which sends b a catch-up: look at everything (covers lease-1, kept before).
      await until('b caught up', () => received.some((h) => h.from === 'a' && h.work && h.leases === null));
      // And b, hearing a for the first time, catches a up in turn: what b kept before a answered is covered.
      await until('a caught up', () => toA.some((h) => h.from === 'b' && h.work && h.leases === null));
      // Each catch-up is addressed to the broker just heard: a third one takes both as presence.
      expect(observer.heard.filter((h) => h.work && h.leases === null).map((h) => [h.from, h.to])).toEqual(expect.arrayContaining([['a', ['b']], ['b', ['a']]]));
      const toC: Hint[] = [];
      const c = listener('c', (h) => toC.push(h));
      await c.start();
      await until('a and b catch c up', () => toC.filter((h) => h.to?.includes('c')).length >= 2);
      await new Promise((r) => setTimeout(r, 300));
      // c's catch-ups of a and b reached neither's handler... and theirs for c reached only c.
      expect(received.filter((h) => h.from === 'c' && h.to && !h.to.includes('b'))).toEqual([]);
      expect(toC.every((h) => !h.to || h.to.includes('c'))).toBe(true);
      expect(received.some((h) => h.from === 'a' && h.to?.includes('c'))).toBe(false);
      await c.stop();
      a.send({ from: 'a', work: false, leases: ['lease-2'] });
      await until('b hears lease-2', () => received.some((h) => h.leases?.includes('lease-2') ?? false));
      // Presence-only hints never reach a broker's handler.
      expect(received.every((h) => h.work || h.leases === null || h.leases.length > 0)).toBe(true);
      // b goes on saying it listens while it has nothing else to send (bounded: timers run late under load).
      const fromB = observer.heard.filter((h) => h.from === 'b').length;
      await until('b says it listens again', () => observer.heard.filter((h) => h.from === 'b').length > fromB);

      await b.stop();
      await new Promise((r) => setTimeout(r, 800));
      const before = observer.notPresence('a').length;
      a.send({ from: 'a', work: true, leases: ['lease-3'] });
      await new Promise((r) => setTimeout(r, 300));
      expect(observer.notPresence('a').length).toBe(before);
    } finally {
      for (const made of started) await made.stop();
      await observer.close();
    }
  }, 30_000);

  test('brokers on the real clock: one alone sends no NOTIFY for its lease cycles; a second one that starts later is woken by its release at once', async () => {
    const schema = freshSchema('alone');
    const observer = await overhear(schema);
    try {
      const b = track(await createBroker(oneResource(schema)));
      await until('the broker says it listens', () => observer.heard.length > 0);
      const self = observer.heard[0]!.from;
      // A second after it started, with nobody heard, b is alone.
      await new Promise((r) => setTimeout(r, 1_500));
      const before = observer.notPresence(self).length;
      for (let i = 0; i < 3; i++) await (await b.acquire({ type: 'fake' })).release();
      const held = await b.acquire({ type: 'fake', timeout: { seconds: 20 } });
      await new Promise((r) => setTimeout(r, 300));
      expect(observer.notPresence(self).length).toBe(before);

      const a = track(await createBroker(oneResource(schema)));
      const { lease, ms } = await wokenByRelease(a, held);
      // Far below the 60 s sweep and recheck: b heard a and told it of the release.
      expect(ms).toBeLessThan(3_000);
      expect(observer.notPresence(self).length).toBeGreaterThan(before);
      await lease.release();
      await a.close();
      await b.close();
    } finally {
      await observer.close();
    }
  }, 60_000);

  test('a broker heard while it connects, before it can send, still gets its catch-up', async () => {
    // A notification can arrive in the same packet as the answer to LISTEN, before the
    // listener has its connection to send on. Its catch-up for the broker just heard was
    // dropped then, and never sent again: that broker was marked heard.
    const schema = freshSchema('connecting');
    const channel = channelFor(schema);
    const observer = await overhear(schema);
    const flood = new pg.Client({ connectionString: tierUrl! });
    await flood.connect();
    let flooding = true;
    const flooded = (async () => {
      // Another broker, 'a', saying it listens many times a second.
      while (flooding) await flood.query('SELECT pg_notify($1, $2)', [channel, encodeHint({ from: 'a', work: false, leases: [] })]);
    })();
    const started: Listener[] = [];
    try {
      for (let i = 0; i < 30; i++) {
        const self = `b${i}`;
        const b = new Listener({ url: tierUrl!, channel, applicationName: 'slipway-test', self, presenceMs: 60_000, onHint: () => undefined, onConnected: () => undefined, onLost: () => undefined });
        started.push(b);
        await b.start();
        await until(`${self} catches a up`, () => observer.heard.some((h) => h.from === self && h.work && h.leases === null && (h.to?.includes('a') ?? false)), 5_000);
        await b.stop();
      }
    } finally {
      flooding = false;
      await flooded;
      await flood.end();
      for (const made of started) await made.stop();
      await observer.close();
    }
  }, 120_000);
});

describeOnPostgres('a hand-off and the best waiter', () => {
  test("the hand-off waits for the best waiter's work item when a statement holds it, instead of reserving the resource for the next one", async () => {
    // The best waiter's work item is locked for the length of a statement whenever its
    // worker claims it or ends a pass. The hand-off skipped it then (SKIP LOCKED) and
    // reserved the freed resource for the lease ranked after it, which jumped the queue;
    // the skipped one waited for its recheck. An outside transaction holds the lock longer.
    const schema = freshSchema('handoff');
    const broker = track(await createBroker({ ...SLOW, database: { url: tierUrl!, schema }, blueprints: [fakeBlueprint({ name: 'one', exclusive: true, limits: { maxResources: 1 } })] }));
    const held = await broker.acquire({ type: 'fake', timeout: { seconds: 20 } });
    const first = await broker.requestLease({ type: 'fake', owner: 'first' });
    const second = await broker.requestLease({ type: 'fake', owner: 'second' });
    for (const lease of [first, second]) {
      const deadline = Date.now() + 10_000;
      while ((await broker.logs({ lease: lease.id, type: 'lease.waiting-for-resources' })).length === 0) {
        if (Date.now() > deadline) throw new Error('the lease never started waiting');
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    const outside = await lockHolder(tierUrl!, 'handoff-lock');
    let waited = false;
    try {
      await outside.query(`SELECT 1 FROM "${schema}".work_items WHERE object_kind = 'lease' AND object_id = $1 FOR UPDATE`, [first.id]);
      const releasing = held.release();
      // The hand-off waits for the lock, and the release with it; a skipping hand-off would
      // not wait, and the release would end with the lock still held.
      const deadline = Date.now() + 5_000;
      waited = false;
      while (!waited && Date.now() < deadline) {
        waited = (await outside.waiters()) > 0;
        if (!waited) await new Promise((r) => setTimeout(r, 20));
      }
      await outside.commit();
      await releasing;
    } finally {
      await outside.end();
    }
    // The freed resource went to the best waiter, not to the one after it.
    const next = await first.whenActive({ timeout: { seconds: 10 } });
    expect(next.resource.id).toBe(held.resource.id);
    expect(await second.status()).toBe('pending');
    expect(waited).toBe(true);
    await next.release();
    await (await second.whenActive({ timeout: { seconds: 10 } })).release();
    await broker.close();
  }, 60_000);
});

describeOnPostgres('connections that die as a command is written', () => {
  test('a release written while the pooled connections die one after another is written again until it lands, not lost after two tries', async () => {
    // What a server restart does to a pool: every idle connection looks alive until it is
    // used, then dies with the write's outcome unknown. CI saw release() fail this way
    // (CommitOutcomeUnknownError) when the write was tried only twice.
    const schema = freshSchema('cut');
    const holder = track(await createBroker({ database: { url: tierUrl!, schema }, blueprints: [fakeBlueprint({ name: 'one' })], sweepInterval: { milliseconds: 200 } }));
    const lease = await holder.acquire({ type: 'fake', timeout: { seconds: 30 } });
    const proxy = await startCuttingProxy(tierUrl!);
    try {
      const operator = track(await createBroker({ database: { url: proxy.url, schema, poolSize: 4 }, workers: false }));
      // Four reads at once leave four idle connections in the operator's pool.
      await Promise.all([0, 1, 2, 3].map(() => operator.leases.get(lease.id)));
      expect(proxy.cutOpenConnections()).toBeGreaterThanOrEqual(4);
      await operator.release(lease.id, { author: 'operator' });
      expect(proxy.cut()).toBeGreaterThanOrEqual(3);
      const deadline = Date.now() + 20_000;
      while ((await holder.leases.get(lease.id))!.status !== 'destroyed') {
        if (Date.now() > deadline) throw new Error('the released lease was never destroyed');
        await new Promise((r) => setTimeout(r, 20));
      }
      // Written more than once, consumed once: the later copies found the lease released.
      const released = await holder.logs({ lease: lease.id, type: 'lease.released' });
      expect(released).toHaveLength(1);
      await operator.close();
    } finally {
      await proxy.close();
    }
    await holder.close();
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
    expect(await quietCounts(a)).toEqual({ leases: N, live_leases: 0, unconsumed: 0, lease_work: 0, claimed: 0, slot_locks: 0 });
    // What the brokers said: the outage was noticed and recovered from, on the pool and on LISTEN.
    const said = loggers.flatMap((l) => l.messages);
    expect(said).toEqual(expect.arrayContaining(['slipway: the database is unreachable; retrying', 'slipway: the database answers again']));
    expect(said.some((m) => m.startsWith('slipway: LISTEN connection lost'))).toBe(true);
    expect(said).toContain('slipway: LISTEN connection is back');
    await a.close();
    await b.close();
  }, 180_000);

  test('a hook in flight across the restart finishes once, never resumed, and its outcome is recorded when the server is back', async () => {
    const schema = freshSchema();
    const loggers = [recordingLogger(), recordingLogger()];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    // The same blueprint in both brokers; whichever claims the resource runs its activateResource, which waits for the gate.
    const blueprints = [0, 1].map(() => fakeBlueprint({ name: 'gated', gates: { activateResource: () => gate } }));
    const [a, b] = await Promise.all(
      [0, 1].map(async (i) =>
        track(
          await createBroker({
            database: { url: pg.url, schema, reconnectTimeout: { seconds: 60 } },
            blueprints: [blueprints[i]],
            // Far longer than the outage: the claim must stay with the broker whose hook is running.
            claimTtl: { seconds: 10 },
            sweepInterval: { milliseconds: 200 },
            logger: loggers[i],
          }),
        ),
      ),
    );
    const calls = () => blueprints.flatMap((bp) => bp.history).filter((h) => h.hook === 'activateResource');
    const acquiring = a.acquire({ type: 'fake', timeout: { minutes: 1 } });
    acquiring.catch(() => undefined);
    const deadline = Date.now() + 20_000;
    while (calls().length === 0) {
      if (Date.now() > deadline) throw new Error('activateResource never started');
      await new Promise((r) => setTimeout(r, 10));
    }
    const resource = calls()[0].id;
    const s = `"${schema}"`;
    // Provably in flight: the intent is recorded (phase activate) and the resource is not active.
    const [before] = await internals.get(a)!.db.query(`SELECT status, phase FROM ${s}.resources WHERE id = $1`, [resource]);
    expect(before).toEqual({ status: 'pending', phase: 'activate' });

    let openedWhileDown = false;
    await pg.restart(1_500, () => {
      // The server has exited: the hook returns now and its outcome has nowhere to go for 1.5 s.
      openedWhileDown = true;
      open();
    });
    expect(openedWhileDown).toBe(true);

    const lease = await acquiring;
    expect(lease.resource.id).toBe(resource);
    expect(calls()).toEqual([{ hook: 'activateResource', id: resource, resume: false }]);
    const { db } = internals.get(b)!;
    const [after] = await db.query(`SELECT status, phase FROM ${s}.resources WHERE id = $1`, [resource]);
    expect(after).toEqual({ status: 'active', phase: null });
    const logged = (await db.query(`SELECT type FROM ${s}.logs WHERE resource_id = $1 AND type IN ('resource.activated', 'resource.resume') ORDER BY id`, [resource])).map((r) => r.type);
    expect(logged).toEqual(['resource.activated']);
    // The brokers saw the outage (on their pool) and its end.
    expect(loggers.flatMap((l) => l.messages)).toEqual(expect.arrayContaining(['slipway: the database is unreachable; retrying', 'slipway: the database answers again']));
    expect(blueprints.reduce((n, bp) => n + bp.calls.activateLease, 0)).toBe(1);
    await lease.release();
    expect(await quietCounts(a)).toMatchObject({ leases: 1, live_leases: 0, unconsumed: 0, lease_work: 0, slot_locks: 0 });
    await a.close();
    await b.close();
  }, 90_000);
});
