import { internals } from '../lib/broker/index.js';
import {
  createBroker,
  defineBlueprint,
  LEASE_TRANSITIONS,
  LeaseTimeoutError,
  RESOURCE_TRANSITIONS,
  type Broker,
  type JsonObject,
} from '../lib/index.js';
import { fakeBlueprint, type FakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker, track } from './helpers/broker.js';
import { gate, pump, rows } from './helpers/pump.js';
import { freshSchema, tier, tierUrl } from './helpers/tier.js';

guardBrokers();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(done: () => boolean | Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/**
 * GARM's record went `pending_delete → deleting → pending_delete` and then refused `deleted`.
 * This reads every `status.changed` row and checks, per object: each step is in
 * LEASE_TRANSITIONS / RESOURCE_TRANSITIONS, each step starts where the one before ended
 * (from `pending`, where every object starts), and the last one is the status in the
 * database now. Returns each object's path, `pending>active>...`.
 */
async function legalPaths(broker: Broker): Promise<Map<string, string>> {
  const problems: string[] = [];
  const paths = new Map<string, { kind: 'lease' | 'resource'; path: string[] }>();
  for (const lease of await broker.leases.list()) paths.set(lease.id, { kind: 'lease', path: ['pending'] });
  for (const resource of await broker.resources.list()) paths.set(resource.id, { kind: 'resource', path: ['pending'] });
  for (const change of await broker.logs({ type: 'status.changed' })) {
    const kind = change.data.kind as 'lease' | 'resource';
    const id = (kind === 'lease' ? change.lease : change.resource)!;
    const entry = paths.get(id);
    if (!entry) {
      problems.push(`${kind} ${id}: a status change of an object that does not exist`);
      continue;
    }
    const [from, to] = [String(change.data.from), String(change.data.to)];
    const table: Record<string, readonly string[]> = kind === 'lease' ? LEASE_TRANSITIONS : RESOURCE_TRANSITIONS;
    const was = entry.path[entry.path.length - 1];
    if (from !== was) problems.push(`${kind} ${id}: ${from} → ${to} logged while it was ${was} (${entry.path.join('>')})`);
    if (!table[from]?.includes(to)) problems.push(`${kind} ${id}: ${from} → ${to} is not a legal transition (${entry.path.join('>')})`);
    entry.path.push(to);
  }
  for (const [id, { kind, path }] of paths) {
    const now = kind === 'lease' ? (await broker.leases.get(id))?.status : (await broker.resources.get(id))?.status;
    if (now !== path[path.length - 1]) problems.push(`${kind} ${id}: the database says ${now}, its log ends at ${path[path.length - 1]}`);
  }
  expect(problems).toEqual([]);
  return new Map([...paths].map(([id, { path }]) => [id, path.join('>')]));
}

/** Converged: every command consumed, no claim held, nothing left in a transitional state, no engine error. */
async function expectConverged(broker: TestBroker) {
  expect(await rows(broker, (s) => `SELECT id, command, target_id FROM ${s}.commands WHERE consumed_at IS NULL`)).toEqual([]);
  expect(await rows(broker, (s) => `SELECT object_kind, object_id FROM ${s}.work_items WHERE claimed_by IS NOT NULL`)).toEqual([]);
  expect(await rows(broker, (s) => `SELECT id, status FROM ${s}.resources WHERE status NOT IN ('active', 'destroyed')`)).toEqual([]);
  expect(await rows(broker, (s) => `SELECT id, status FROM ${s}.leases WHERE status NOT IN ('active', 'destroyed')`)).toEqual([]);
  expect(engineErrors(broker)).toEqual([]);
}

const outcomes = async (broker: TestBroker, id: string) =>
  (await rows(broker, (s) => `SELECT outcome FROM ${s}.commands WHERE target_id = $1 ORDER BY id`, [id])).map((c) => c.outcome as string);

// LESSONS, GARM #854: "the provider worker force-wrote `deleting` and called the cloud's slow
// delete ... another path force-wrote `pending_delete` again (a backward move)". In slipway the
// other paths can only write commands, which the single writer consumes after its hook.
describe('a release races a slow destroy', () => {
  test('releases, a break and a reclaim written while a slow destroyResource runs have no effect: it ends destroyed, destroyResource ran once', async () => {
    const slow = gate();
    const bp = fakeBlueprint({ name: 'f', gates: { destroyResource: slow.wait } });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const id = lease.resource.id;
    await pump(broker, lease.release());
    await broker.releaseResource(id, { author: 'scale-down' });
    const idle = broker.runUntilIdle();
    await slow.reached;
    // while the slow delete runs, every other path writes the record again
    await Promise.all([
      broker.releaseResource(id, { author: 'runner-finished' }),
      broker.releaseResource(id, { author: 'gc' }),
      broker.breakResource(id, 'the provider lost it', { author: 'provider' }),
      broker.reclaimResource(id, { author: 'autoscaler' }),
    ]);
    expect((await broker.resources.get(id))!.status).toBe('released');
    slow.open();
    await idle;
    await broker.runUntilIdle();

    const paths = await legalPaths(broker);
    expect(paths.get(id)).toBe('pending>active>released>destroyed');
    expect(paths.get(lease.id)).toBe('pending>acquired>active>released>destroyed');
    expect(bp.calls.destroyResource).toBe(1);
    const [applied, ...late] = await outcomes(broker, id);
    expect(applied).toBe('applied');
    expect(late).toHaveLength(4);
    for (const outcome of late) expect(outcome).toMatch(/^no effect: resource is already (released|destroyed)$/);
    expect(await broker.logs({ resource: id, type: 'resource.broken' })).toEqual([]);
    expect(await broker.logs({ resource: id, type: 'resource.released' })).toHaveLength(1);
    await expectConverged(broker);
    await broker.close();
  });

  test('while a slow destroyLease runs, the lease is released again, its ttl passes and its resource breaks: one release, one destroy, then the resource goes', async () => {
    const slow = gate();
    const bp = fakeBlueprint({ name: 'f', gates: { destroyLease: slow.wait } });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake', ttl: { minutes: 1 } }));
    const resourceId = lease.resource.id;
    await broker.release(lease.id, { author: 'runner-finished' });
    const idle = broker.runUntilIdle();
    await slow.reached;
    await Promise.all([broker.release(lease.id, { author: 'holder' }), broker.release(lease.id, { author: 'gc' }), broker.breakResource(resourceId, 'the VM is gone', { author: 'provider' })]);
    // the expiry path: the lease's ttl passes while it is being destroyed
    broker.clock.advance({ minutes: 2 });
    await waitFor(async () => (await broker.resources.get(resourceId))!.status === 'broken', 'the resource to break');
    expect((await broker.leases.get(lease.id))!.status).toBe('released');
    slow.open();
    await idle;
    await broker.runUntilIdle();

    const paths = await legalPaths(broker);
    expect(paths.get(lease.id)).toBe('pending>acquired>active>released>destroyed');
    expect(paths.get(resourceId)).toBe('pending>active>broken>destroyed');
    expect([bp.calls.releaseLease, bp.calls.destroyLease, bp.calls.destroyResource]).toEqual([1, 1, 1]);
    expect(await broker.logs({ lease: lease.id, type: 'lease.released' })).toHaveLength(1);
    expect(await broker.logs({ lease: lease.id, type: 'lease.expired' })).toEqual([]);
    expect(await broker.logs({ lease: lease.id, type: 'lease.broken' })).toEqual([]);
    const [applied, ...late] = await outcomes(broker, lease.id);
    expect(applied).toBe('applied');
    expect(late).toHaveLength(2);
    for (const outcome of late) expect(outcome).toMatch(/^no effect: lease is already (released|destroyed)$/);
    await expectConverged(broker);
    await broker.close();
  });
});

/** A blueprint whose `hook` waits for `slow` on its first call; destroyResource records what it was asked to tear down. */
function slowVms(hook: 'allocateResource' | 'activateResource' | 'activateLease', slow: ReturnType<typeof gate>) {
  const torn: Array<{ id: string; attributes: JsonObject }> = [];
  let held = false;
  const hold = async (name: string) => {
    if (name !== hook || held) return;
    held = true;
    await slow.wait();
  };
  const bp = defineBlueprint({
    type: 'vm',
    async allocateResource(ctx) {
      await hold('allocateResource');
      return { attributes: { vm: `vm-of-${ctx.resource.id}` } };
    },
    async activateResource() {
      await hold('activateResource');
      return { attributes: { booted: true } };
    },
    async activateLease() {
      await hold('activateLease');
      return { attributes: { workspace: '/w/1' } };
    },
    async destroyResource(ctx) {
      torn.push({ id: ctx.resource.id, attributes: ctx.resource.attributes });
    },
  })({ name: 'vms' });
  return { bp, torn };
}

// GARM #854: "the event for that write waited on the lock and was dropped"; the status a long
// call wrote afterwards won. Here the command is a row, and the long hook's late result must not
// bring back to life what was asked to go while it ran.
describe('a status update arrives after a long hook', () => {
  test.each([
    ['released', 'activateResource'],
    ['broken', 'activateResource'],
    ['broken', 'allocateResource'],
  ] as const)('a resource %s by command while its %s runs never becomes active; its teardown gets what the hook built; the waiting lease gets another resource', async (how, hook) => {
    const slow = gate();
    const { bp, torn } = slowVms(hook, slow);
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'vm' });
    const idle = broker.runUntilIdle();
    await slow.reached;
    const [resource] = await broker.resources.list();
    expect(resource!.status).toBe('pending');
    if (how === 'released') await broker.releaseResource(resource!.id, { author: 'operator' });
    else await broker.breakResource(resource!.id, 'the host stopped answering', { author: 'monitor' });
    slow.open();
    await idle;
    const lease = await pump(broker, acquiring);
    await broker.runUntilIdle();

    expect(lease.resource.id).not.toBe(resource!.id);
    const paths = await legalPaths(broker);
    expect(paths.get(resource!.id)).toBe(`pending>${how}>destroyed`);
    expect(paths.get(lease.id)).toBe('pending>acquired>active');
    expect(paths.get(lease.resource.id)).toBe('pending>active');
    // what the late hook built is recorded for its teardown, and torn down once
    const built = hook === 'activateResource' ? { vm: `vm-of-${resource!.id}`, booted: true } : { vm: `vm-of-${resource!.id}` };
    expect(torn).toEqual([{ id: resource!.id, attributes: built }]);
    expect(await broker.logs({ resource: resource!.id, type: 'resource.activated' })).toEqual([]);
    await expectConverged(broker);
    await broker.close();
  });

  test('a resource broken while a lease\'s activateLease runs: the lease never goes active on it, it is requeued and served by another, and the broken one is destroyed', async () => {
    const slow = gate();
    const { bp, torn } = slowVms('activateLease', slow);
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'vm' });
    const idle = broker.runUntilIdle();
    await slow.reached;
    const [resource] = await broker.resources.list();
    expect(resource!.status).toBe('active');
    await broker.breakResource(resource!.id, 'the host died', { author: 'monitor' });
    await waitFor(async () => (await broker.resources.get(resource!.id))!.status === 'broken', 'the resource to break');
    slow.open();
    await idle;
    const lease = await pump(broker, acquiring);
    await broker.runUntilIdle();

    expect(lease.resource.id).not.toBe(resource!.id);
    const paths = await legalPaths(broker);
    expect(paths.get(lease.id)).toBe('pending>acquired>pending>acquired>active');
    expect(paths.get(resource!.id)).toBe('pending>active>broken>destroyed');
    expect(await broker.logs({ lease: lease.id, type: 'lease.requeued' })).toHaveLength(1);
    // the broken resource did not wait behind a lease that left it: it was torn down
    expect(torn.map((t) => t.id)).toEqual([resource!.id]);
    await expectConverged(broker);
    await broker.close();
  });

  test('a lease given up by acquire({ timeout }) while its activateLease runs never becomes active; the late result is dropped', async () => {
    const slow = gate();
    const { bp } = slowVms('activateLease', slow);
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'vm', timeout: { seconds: 10 } }).catch((e: unknown) => e);
    const idle = broker.runUntilIdle();
    await slow.reached;
    // acquire() gives up: it rejects and writes a release command, while the hook still runs
    broker.clock.advance({ seconds: 10 });
    expect(await acquiring).toBeInstanceOf(LeaseTimeoutError);
    const [lease] = await broker.leases.list();
    await waitFor(async () => (await outcomes(broker, lease!.id)).length === 1, 'the release command of acquire()');
    slow.open();
    await idle;
    await broker.runUntilIdle();

    const paths = await legalPaths(broker);
    expect(paths.get(lease!.id)).toBe('pending>acquired>released>destroyed');
    expect(await broker.logs({ lease: lease!.id, type: 'lease.activated' })).toEqual([]);
    expect((await broker.leases.get(lease!.id))!.attributes).not.toHaveProperty('workspace');
    expect(await outcomes(broker, lease!.id)).toEqual(['applied']);
    await expectConverged(broker);
    await broker.close();
  });
});

const capacityHolders = async (broker: TestBroker, blueprint: string) =>
  (await rows(broker, (s) => `SELECT holder_id FROM ${s}.slot_locks WHERE key LIKE $1 ORDER BY holder_id`, [`slipway:capacity:${blueprint}:%`])).map((r) => r.holder_id as string);

// LESSONS, GARM: "because the autoscaler counted every record, two such phantoms pinned a quiet
// scale set in scale-down: jobs queued on an empty pool". Invariants 5 and 6.
describe('records in the deletion lane while capacity is computed', () => {
  test('two resources stuck in destroy are not capacity and do not pin the allocation limit: new leases get new resources at once', async () => {
    const bp = fakeBlueprint({ name: 'f', exclusive: true, failures: { destroyResource: { throws: new Error('cloud API answered 503') } } });
    const broker = await testBroker({ blueprints: [bp], waitRecheck: { hours: 1 } });
    const [a, b] = await pump(broker, Promise.all([broker.acquire({ type: 'fake' }), broker.acquire({ type: 'fake' })]));
    const phantoms = [a!.resource.id, b!.resource.id];
    expect(new Set(phantoms).size).toBe(2);
    for (const lease of [a!, b!]) await pump(broker, lease.release());
    for (const id of phantoms) await broker.releaseResource(id);
    await broker.runUntilIdle();
    let stats = (await broker.stats()).blueprints.f!;
    expect(stats).toMatchObject({ live: 0, allocating: 0, deletionLane: 2, destroying: 2 });

    // with nothing live, the allocation limit is max(1, ceil(25% × 0)) = 1: the phantoms take none of it
    const [c, d] = await pump(broker, Promise.all([broker.acquire({ type: 'fake' }), broker.acquire({ type: 'fake' })]));
    expect(phantoms).not.toContain(c!.resource.id);
    expect(phantoms).not.toContain(d!.resource.id);
    expect(c!.resource.id).not.toBe(d!.resource.id);
    stats = (await broker.stats()).blueprints.f!;
    expect(stats).toMatchObject({ live: 2, allocating: 0, deletionLane: 2, destroying: 2 });
    expect(stats.resources).toMatchObject({ active: 2, released: 2 });

    bp.fail('destroyResource', undefined);
    await broker.advance({ minutes: 5 });
    const paths = await legalPaths(broker);
    for (const id of phantoms) expect(paths.get(id)).toBe('pending>active>released>destroyed');
    expect((await broker.stats()).blueprints.f).toMatchObject({ live: 2, deletionLane: 0, destroying: 0 });
    await expectConverged(broker);
    await broker.close();
  });

  test('under maxResources, a resource being destroyed holds its capacity slot only until it is destroyed; the waiting lease is then served at once', async () => {
    const bp = fakeBlueprint({ name: 'f', limits: { maxResources: 1 }, failures: { destroyResource: { throws: new Error('still deleting'), times: 2 } } });
    const broker = await testBroker({ blueprints: [bp], waitRecheck: { hours: 1 } });
    const first = await pump(broker, broker.acquire({ type: 'fake' }));
    const phantom = first.resource.id;
    await pump(broker, first.release());
    await broker.releaseResource(phantom);
    await broker.runUntilIdle(); // destroyResource fails: retried after 1 s, then 2 s
    const waiting = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await waiting.status()).toBe('pending');
    const [wait] = await broker.logs({ lease: waiting.id, type: 'lease.waiting-for-resources' });
    expect(wait!.message).toMatch(/f may build no more than 1 resource \(maxResources\), and none of them takes this lease now/);
    expect(wait!.message).not.toMatch(new RegExp(phantom));
    const stats = await broker.stats();
    expect(stats.blueprints.f).toMatchObject({ live: 0, allocating: 0, deletionLane: 1, destroying: 1 });
    expect(stats.types.fake!.waiting).toBe(1);
    expect(await capacityHolders(broker, 'f')).toEqual([phantom]);

    await broker.advance({ seconds: 1 });
    expect(await waiting.status()).toBe('pending');
    // the destroy that succeeds frees the slot and wakes the waiting lease: no recheck (1 h) needed
    await broker.advance({ seconds: 2 });
    expect((await broker.resources.get(phantom))!.status).toBe('destroyed');
    expect(await waiting.status()).toBe('active');
    const served = (await broker.leases.get(waiting.id))!.resourceId!;
    expect(served).not.toBe(phantom);
    expect(await capacityHolders(broker, 'f')).toEqual([served]);
    expect(await broker.logs({ lease: waiting.id, type: 'lease.waiting-for-resources' })).toHaveLength(1);

    const paths = await legalPaths(broker);
    expect(paths.get(phantom)).toBe('pending>active>released>destroyed');
    expect(paths.get(waiting.id)).toBe('pending>acquired>active');
    await expectConverged(broker);
    await broker.close();
  });
});

// LESSONS, Drydock: "release raced from the web UI, the CLI, the requester, the GC: release code
// ran twice"; GARM: two paths wrote the same record. Invariant 1: one writer, commands for the rest.
describe('two writers release the same object at once', () => {
  const writersAre = tier === 'postgres' ? 'two brokers on one database' : 'concurrent calls on one broker';
  test(`${writersAre}: the lease and its resource are each released once, their hooks run once, and both end destroyed`, async () => {
    const blueprint = () => fakeBlueprint({ name: 'f', delays: { releaseLease: 20, destroyLease: 20, destroyResource: 20 } });
    const bps: FakeBlueprint[] = [blueprint(), blueprint()];
    const options = { sweepInterval: { milliseconds: 50 } };
    let writers: Broker[];
    if (tier === 'postgres') {
      const database = { url: tierUrl!, schema: freshSchema() };
      writers = [track(await createBroker({ ...options, database, blueprints: [bps[0]!] })), track(await createBroker({ ...options, database, blueprints: [bps[1]!] }))];
    } else {
      const broker = track(await createBroker({ ...options, blueprints: [bps[0]!] }));
      writers = [broker, broker];
    }
    const [w0] = writers as [Broker, Broker];
    const lease = await w0.acquire({ type: 'fake' });
    const resourceId = lease.resource.id;
    await Promise.all(
      writers.flatMap((w, k) =>
        Array.from({ length: 10 }, (_, i) => [w.release(lease.id, { author: `writer-${k}-${i}` }), w.releaseResource(resourceId, { author: `writer-${k}-${i}` })]).flat(),
      ),
    );
    const { db, store } = internals.get(w0)!;
    const s = store.s;
    await waitFor(async () => {
      const [left] = await db.query(
        `SELECT (SELECT count(*)::int FROM ${s}.commands WHERE consumed_at IS NULL) + (SELECT count(*)::int FROM ${s}.work_items) + (SELECT count(*)::int FROM ${s}.leases WHERE status <> 'destroyed') + (SELECT count(*)::int FROM ${s}.resources WHERE status <> 'destroyed') AS n`,
      );
      return Number(left.n) === 0;
    }, 'the lease and the resource to be destroyed and every command consumed');

    const paths = await legalPaths(w0);
    expect(paths.get(lease.id)).toBe('pending>acquired>active>released>destroyed');
    expect(paths.get(resourceId)).toBe('pending>active>released>destroyed');
    const calls = (hook: 'releaseLease' | 'destroyLease' | 'destroyResource') => bps[0]!.calls[hook] + bps[1]!.calls[hook];
    expect([calls('releaseLease'), calls('destroyLease'), calls('destroyResource')]).toEqual([1, 1, 1]);
    expect(await w0.logs({ lease: lease.id, type: 'lease.released' })).toHaveLength(1);
    expect(await w0.logs({ resource: resourceId, type: 'resource.released' })).toHaveLength(1);
    for (const id of [lease.id, resourceId]) {
      const commands = await db.query(`SELECT outcome FROM ${s}.commands WHERE target_id = $1 ORDER BY id`, [id]);
      expect(commands.filter((c) => c.outcome === 'applied')).toHaveLength(1);
      for (const c of commands) expect(c.outcome).toMatch(/^(applied|no effect: (lease|resource) is already (released|destroyed))$/);
    }
    for (const w of new Set(writers)) expect(engineErrors(w)).toEqual([]);
    for (const w of new Set(writers)) await w.close();
  });
});
