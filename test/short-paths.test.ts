import { defineBlueprint, type Broker } from '../lib/index.js';
import { internals } from '../lib/broker/index.js';
import { LEASE_TRANSITIONS, type LeaseStatus } from '../lib/model/states.js';
import { guardBrokers, realBroker } from './helpers/broker.js';
import { releaseWrittenUnwoken } from './helpers/waiting-lease.js';

guardBrokers();

// A phase with no hook needs no write of its own: on a blueprint without activateLease a
// lease is created active, and without releaseLease and destroyLease a release and the
// destroy are one statement (the holder's run inline, a command consumed by the worker).
// All on createBroker and the real clock, as users run it.

/** A host pool with only the hooks of the plain shape: allocateResource, acquireLease (a slot lock), destroyResource. */
function plainHosts(name = 'plain', limits: { maxResources?: number } = {}) {
  const calls: string[] = [];
  const implementation = defineBlueprint({
    type: 'host',
    async allocateResource() {
      calls.push('allocateResource');
    },
    async acquireLease(ctx) {
      calls.push('acquireLease');
      ctx.lockSlots([`host:${ctx.resource.id}`]);
    },
    async destroyResource() {
      calls.push('destroyResource');
    },
  });
  return { blueprint: implementation({ name, limits: { maxLeasesPerResource: 1, ...limits } }), calls };
}

/** A host pool whose only lease hook is releaseLease, which records its calls. */
function withReleaseHook() {
  const calls: string[] = [];
  const blueprint = defineBlueprint({
    type: 'host',
    async allocateResource() {},
    async releaseLease(ctx) {
      calls.push(`releaseLease ${ctx.lease.id}`);
    },
  })({ name: 'hooked' });
  return { blueprint, calls };
}

async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(value)})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * The lease's status changes as its log tells them, each checked against the transition
 * table; a status reached in the same write as the one before it is joined to it with
 * `+` (one statement stamps its rows with one time), a later write with `>`.
 */
async function statusPath(broker: Broker, lease: string): Promise<string> {
  const [queued] = await broker.logs({ lease, type: 'lease.queued' });
  const changes = await broker.logs({ lease, type: 'status.changed' });
  let path = 'pending';
  let last = queued.at.toMillis();
  for (const entry of changes) {
    const { from, to } = entry.data as { from: LeaseStatus; to: LeaseStatus };
    expect(LEASE_TRANSITIONS[from]).toContain(to);
    expect(path.endsWith(from)).toBe(true);
    path += `${entry.at.toMillis() === last ? '+' : '>'}${to}`;
    last = entry.at.toMillis();
  }
  return path;
}

async function releaseCommands(broker: Broker, lease: string) {
  const { db, store } = internals.get(broker)!;
  return db.query(`SELECT author, data->>'reason' AS reason, outcome, consumed_at IS NOT NULL AS consumed FROM ${store.s}.commands WHERE target_id = $1 AND command = 'release' ORDER BY id`, [lease]);
}

describe('the shorter paths of a blueprint without lease hooks, on the real clock', () => {
  test('acquire() on a warm resource creates the lease active; lease.release() ends it inline; the log shows every step', async () => {
    const hosts = plainHosts();
    const broker = await realBroker({ blueprints: [hosts.blueprint] });
    const first = await broker.acquire({ type: 'host', owner: 'warm-up' });
    await first.release();
    const lease = await broker.acquire({ type: 'host', owner: 'ci' });
    expect(lease.resource.id).toBe(first.resource.id);
    expect((await broker.leases.get(lease.id))!.status).toBe('active');
    const events: string[] = [];
    broker.on('lease', (e) => void (e.id === lease.id && events.push(`${e.from}->${e.to}`)));
    await lease.release();
    expect(lease.signal.aborted).toBe(true);
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    // Created active in the statement that took the resource; released and destroyed in one statement.
    expect(await statusPath(broker, lease.id)).toBe('pending+acquired+active>released+destroyed');
    expect(events).toEqual(['active->released', 'released->destroyed']);
    expect((await broker.logs({ lease: lease.id })).map((l) => l.type).filter((t) => t !== 'status.changed')).toEqual([
      'lease.queued',
      'lease.acquired',
      'lease.activated',
      'lease.released',
      'lease.destroyed',
    ]);
    // The holder's release is a command too, written already consumed: nothing waits for a worker.
    expect(await releaseCommands(broker, lease.id)).toEqual([{ author: 'holder', reason: 'released', outcome: 'applied', consumed: true }]);
    expect(hosts.calls.filter((c) => c === 'allocateResource')).toHaveLength(1);
    await broker.close();
  });

  test('a lease created active still expires on time: its worker is due at the expiry, with no pass before', async () => {
    const broker = await realBroker({ blueprints: [plainHosts().blueprint] });
    await (await broker.acquire({ type: 'host' })).release();
    const lease = await broker.acquire({ type: 'host', ttl: { seconds: 2 } });
    expect(lease.expiresAt).not.toBeNull();
    await until(async () => lease.signal.aborted, (a) => a, 'the signal to abort at the expiry');
    expect(lease.signal.reason.why).toBe('expired');
    const destroyed = await until(async () => (await broker.leases.get(lease.id))!, (l) => l.status === 'destroyed', 'the expired lease to be destroyed', 10_000);
    // Destroyed by its worker within a few seconds of the expiry, not at a sweep much later.
    expect(destroyed.statusChangedAt.toMillis() - lease.expiresAt!.toMillis()).toBeLessThan(3_000);
    expect((await broker.logs({ lease: lease.id, type: 'lease.expired' })).length).toBe(1);
    await broker.close();
  });

  test('a release written as a command (broker.release) is consumed by the statement that destroys the lease', async () => {
    const broker = await realBroker({ blueprints: [plainHosts().blueprint] });
    await (await broker.acquire({ type: 'host' })).release();
    const lease = await broker.acquire({ type: 'host' });
    await broker.release(lease.id, { reason: 'operator says so', author: 'ops' });
    await until(async () => (await broker.leases.get(lease.id))!.status, (s) => s === 'destroyed', 'the lease to be destroyed');
    expect(await statusPath(broker, lease.id)).toBe('pending+acquired+active>released+destroyed');
    expect(await releaseCommands(broker, lease.id)).toEqual([{ author: 'ops', reason: 'operator says so', outcome: 'applied', consumed: true }]);
    await broker.close();
  });

  test('a release inline hands the resource to the lease waiting for it, whose worker acquires and activates it in one statement', async () => {
    const broker = await realBroker({ blueprints: [plainHosts('one', { maxResources: 1 }).blueprint], waitRecheck: { seconds: 60 }, sweepInterval: { seconds: 60 } });
    const held = await broker.acquire({ type: 'host', owner: 'a' });
    const waiting = await broker.requestLease({ type: 'host', owner: 'b' });
    await until(async () => (await broker.logs({ lease: waiting.id, type: 'lease.waiting-for-resources' })).length, (n) => n > 0, 'the second lease to wait');
    const released = Date.now();
    await held.release();
    const next = await waiting.whenActive({ timeout: { seconds: 10 } });
    // Far below the 60 s recheck and sweep: the hand-off of the release woke it.
    expect(Date.now() - released).toBeLessThan(5_000);
    expect(next.resource.id).toBe(held.resource.id);
    // The waiter's worker took the resource and activated the lease in one statement.
    expect(await statusPath(broker, waiting.id)).toBe('pending>acquired+active');
    await next.release();
    await broker.close();
  });

  test('the destroy statement finds the waiter that may use the freed resource, by blueprint, and the hand-off goes to it', async () => {
    // Two pools of one host each; the first waiter may use only the second pool, the next either.
    const broker = await realBroker({
      blueprints: [plainHosts('one', { maxResources: 1 }).blueprint, plainHosts('two', { maxResources: 1 }).blueprint],
      waitRecheck: { seconds: 60 },
      sweepInterval: { seconds: 60 },
    });
    const onOne = await broker.acquire({ type: 'host', blueprints: ['one'] });
    const onTwo = await broker.acquire({ type: 'host', blueprints: ['two'] });
    const wantsTwo = await broker.requestLease({ type: 'host', owner: 'two only', blueprints: ['two'] });
    const wantsAny = await broker.requestLease({ type: 'host', owner: 'either', blueprints: ['two', 'one'] });
    for (const lease of [wantsTwo, wantsAny]) {
      await until(async () => (await broker.logs({ lease: lease.id, type: 'lease.waiting-for-resources' })).length, (n) => n > 0, `${lease.id} to wait`);
    }
    const released = Date.now();
    await onOne.release();
    const next = await wantsAny.whenActive({ timeout: { seconds: 10 } });
    // Woken by the hand-off, far below the 60 s recheck and sweep, though it queued second.
    expect(Date.now() - released).toBeLessThan(5_000);
    expect(next.resource.id).toBe(onOne.resource.id);
    expect((await broker.leases.get(wantsTwo.id))!.status).toBe('pending');
    await onTwo.release();
    expect((await wantsTwo.whenActive({ timeout: { seconds: 10 } })).resource.id).toBe(onTwo.resource.id);
    await broker.close();
  });

  test('no lease is activated past its expiry: one whose ttl runs out while acquireLease runs is created or left acquired, and released as expired', async () => {
    const slow = defineBlueprint({
      type: 'host',
      async allocateResource() {},
      async acquireLease() {
        await new Promise((r) => setTimeout(r, 800));
      },
    })({ name: 'slow-acquire' });
    const broker = await realBroker({ blueprints: [slow] });
    await (await broker.acquire({ type: 'host' })).release();
    // The fast path (hooks inline in acquire()), then the allocator's (a timeout queues the lease).
    for (const spec of [{ type: 'host', owner: 'fast', ttl: { milliseconds: 300 } }, { type: 'host', owner: 'queued', ttl: { milliseconds: 300 }, timeout: { seconds: 10 } }]) {
      await expect(broker.acquire(spec)).rejects.toThrow(/expired/);
      const [lease] = await broker.leases.list({ owner: spec.owner });
      await until(async () => (await broker.leases.get(lease.id))!.status, (st) => st === 'destroyed', 'the expired lease to be destroyed');
      expect({ owner: spec.owner, activated: await broker.logs({ lease: lease.id, type: 'lease.activated' }) }).toEqual({ owner: spec.owner, activated: [] });
      expect(await broker.logs({ lease: lease.id, type: 'lease.expired' })).toHaveLength(1);
    }
    await broker.close();
  });

  test('with releaseLease and destroyLease, the holder\'s release is still inline: released with its command written consumed, then the hooks, then destroyed', async () => {
    const calls: string[] = [];
    let failures = 1;
    const withHooks = defineBlueprint({
      type: 'host',
      async allocateResource() {},
      async releaseLease(ctx) {
        calls.push(`releaseLease ${ctx.lease.id}`);
      },
      async destroyLease(ctx) {
        calls.push(`destroyLease ${ctx.lease.id}`);
        // The first one fails: the destroy phase retries it, as a worker's pass would.
        if (failures-- > 0) throw new Error('the host is busy');
      },
    })({ name: 'hooked' });
    const broker = await realBroker({ blueprints: [withHooks], backoff: { initial: { milliseconds: 200 }, max: { seconds: 1 } } });
    await (await broker.acquire({ type: 'host' })).release();
    calls.length = 0;
    failures = 1;
    const lease = await broker.acquire({ type: 'host' });
    await lease.release();
    // release() resolved once the lease was destroyed, both hooks called, destroyLease again after its failure.
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    expect(calls).toEqual([`releaseLease ${lease.id}`, `destroyLease ${lease.id}`, `destroyLease ${lease.id}`]);
    // Written consumed in the statement that released it: no worker consumed it later.
    const { db, store } = internals.get(broker)!;
    const [command] = await db.query(`SELECT created_at = consumed_at AS same, author, outcome FROM ${store.s}.commands WHERE target_id = $1`, [lease.id]);
    expect(command).toEqual({ same: true, author: 'holder', outcome: 'applied' });
    // activateLease is missing here too (created active); releaseLease and destroyLease are not: the release is its own step.
    expect(await statusPath(broker, lease.id)).toBe('pending+acquired+active>released>destroyed');
    const phases = (await broker.logs({ lease: lease.id })).map((l) => l.type);
    expect(phases.indexOf('lease.released')).toBeLessThan(phases.indexOf('lease.destroyed'));
    await broker.close();
  });

  test('a release that cannot run inline (a command waits for the lease) leaves nothing claimed: the lease\'s worker takes it at once, not after claimTtl', async () => {
    // The claim and the release are one statement: the claim it took for a lease the release
    // then refused must be undone with it, or the lease's worker waits for it to expire.
    const { blueprint: withHooks, calls } = withReleaseHook();
    const broker = await realBroker({ blueprints: [withHooks], claimTtl: { seconds: 60 } });
    const lease = await broker.acquire({ type: 'host' });
    // A release command of another process, committed with no wake of the lease's worker
    // (its wake comes later): the holder's release finds a command waiting.
    await releaseWrittenUnwoken(broker, lease.id);
    const { db, store } = internals.get(broker)!;
    const started = Date.now();
    await lease.release();
    expect(Date.now() - started).toBeLessThan(20_000);
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    // Both commands consumed by the worker, the holder's written unconsumed: not inline.
    const commands = await db.query(`SELECT author, created_at = consumed_at AS same, outcome FROM ${store.s}.commands WHERE target_id = $1 ORDER BY id`, [lease.id]);
    expect(commands.map((c) => [c.author, c.same])).toEqual([
      ['other', false],
      ['holder', false],
    ]);
    expect(calls).toEqual([`releaseLease ${lease.id}`]);
    await broker.close();
  });

  test('release({ wait: false }) is inline too: the lease is released when it returns, with its command written consumed, and destroyed by this broker', async () => {
    const { blueprint: withHooks, calls } = withReleaseHook();
    const broker = await realBroker({ blueprints: [withHooks] });
    await (await broker.acquire({ type: 'host' })).release();
    calls.length = 0;
    const lease = await broker.acquire({ type: 'host' });
    await lease.release({ wait: false });
    // Returned with the release recorded: not a command waiting for a worker, the lease released already.
    expect(['released', 'destroyed']).toContain((await broker.leases.get(lease.id))!.status);
    const { db, store } = internals.get(broker)!;
    const [command] = await db.query(`SELECT created_at = consumed_at AS same, author, outcome FROM ${store.s}.commands WHERE target_id = $1`, [lease.id]);
    expect(command).toEqual({ same: true, author: 'holder', outcome: 'applied' });
    await until(async () => (await broker.leases.get(lease.id))!.status, (s) => s === 'destroyed', 'the destroy');
    expect(calls).toEqual([`releaseLease ${lease.id}`]);
    expect(await statusPath(broker, lease.id)).toBe('pending+acquired+active>released>destroyed');
    await broker.close();
  });
});
