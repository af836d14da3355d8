/**
 * Blueprints that fail forever, on the real clock with `createBroker`, as users run it
 * (issue 9, bugs 1, 2 and 7). The suites before ran hostile blueprints on the manual clock
 * with `runUntilIdle`, which never measures the host's own timers: a broker that rebuilt
 * resources in a tight loop and starved the event loop passed every one of them.
 */
import { createServer, type Server } from 'node:http';
import { defineBlueprint, LeaseBrokenError, LeaseTimeoutError, type BlueprintImplementation, type BlueprintLimits, type Broker } from '../lib/index.js';
import { createTestBroker, fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, realBroker, track } from './helpers/broker.js';
import { testDatabase } from './helpers/tier.js';

guardBrokers();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A `host` blueprint whose hook `failing` always throws; with or without a destroyResource hook. */
function failingBlueprint(name: string, failing: 'allocateResource' | 'activateResource', options: { limits?: BlueprintLimits; destroyHook: boolean }) {
  const calls: number[] = [];
  const started = Date.now();
  const hooks: Record<string, (ctx: unknown) => unknown> = {
    async allocateResource() {
      if (failing === 'allocateResource') {
        calls.push(Date.now() - started);
        throw new Error(`${name}: no capacity in the cloud`);
      }
      return { attributes: {} };
    },
    async activateResource() {
      calls.push(Date.now() - started);
      throw new Error(`${name}: the VM never booted`);
    },
  };
  if (failing === 'allocateResource') delete hooks.activateResource;
  if (options.destroyHook) hooks.destroyResource = async () => undefined;
  const blueprint = defineBlueprint({ type: 'host', ...hooks } as BlueprintImplementation)({ name, limits: options.limits });
  return { blueprint, calls };
}

/** Measures the host's event loop: how late a 100 ms interval ticks at worst, and whether a 3 s timer fires on time. */
function watchEventLoop() {
  const started = Date.now();
  let last = started;
  let worstLagMs = 0;
  let ticks = 0;
  const interval = setInterval(() => {
    const now = Date.now();
    worstLagMs = Math.max(worstLagMs, now - last - 100);
    last = now;
    ticks++;
  }, 100);
  let firedAfterMs: number | null = null;
  const timer = setTimeout(() => (firedAfterMs = Date.now() - started), 3_000);
  return {
    get worstLagMs() {
      return worstLagMs;
    },
    get ticks() {
      return ticks;
    },
    get firedAfterMs() {
      return firedAfterMs;
    },
    stop() {
      clearInterval(interval);
      clearTimeout(timer);
    },
  };
}

async function listen(): Promise<{ server: Server; url: string }> {
  const server = createServer((_, res) => res.end('pong'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address() as { port: number };
  return { server, url: `http://127.0.0.1:${address.port}/` };
}

describe('a blueprint that fails forever, real clock', () => {
  test('allocate or activate throwing, with or without maxResources and a destroy hook: the host keeps its timers and its HTTP server, and builds back off', async () => {
    const variants = [];
    for (const failing of ['allocateResource', 'activateResource'] as const) {
      for (const limits of [undefined, { maxResources: 2 }]) {
        for (const destroyHook of [true, false]) variants.push({ failing, limits, destroyHook, name: `${failing === 'allocateResource' ? 'alloc' : 'act'}-${limits ? 'max2' : 'nomax'}-${destroyHook ? 'destroy' : 'nodestroy'}` });
      }
    }
    const { server, url } = await listen();
    const brokers: Array<{ broker: Broker; calls: number[]; name: string; waiting: Promise<unknown> }> = [];
    // Opening a database is the host's own synchronous work; measure from when the brokers run.
    let loop!: ReturnType<typeof watchEventLoop>;
    try {
      for (const v of variants) {
        const { blueprint, calls } = failingBlueprint(v.name, v.failing, v);
        brokers.push({ broker: await realBroker({ blueprints: [blueprint] }), calls, name: v.name, waiting: Promise.resolve() });
      }
      loop = watchEventLoop();
      for (const b of brokers) {
        // One waiting lease, as a CI controller leaves it: no timeout.
        b.waiting = b.broker.acquire({ type: 'host', owner: b.name }).catch((error) => error);
      }
      // The HTTP server in the same process answers all along. The window is 6 s, and at
      // least 5 s after the last broker's first build (which a loaded machine can delay by
      // seconds), so that every broker has had the time for its second; past 8 s a first
      // build is too late anyway. At most 13 s: builds at 0, 1, 3 and 7 s, four at most.
      const answers: number[] = [];
      const start = Date.now();
      let windowEnd = start + 6_000;
      let allBuilt = false;
      while (Date.now() < windowEnd || (!allBuilt && Date.now() < start + 8_000)) {
        const t = Date.now();
        const res = await fetch(url);
        expect(await res.text()).toBe('pong');
        answers.push(Date.now() - t);
        await sleep(250);
        if (!allBuilt && brokers.every((b) => b.calls.length >= 1)) {
          allBuilt = true;
          windowEnd = Math.max(windowEnd, Math.min(Date.now(), start + 8_000) + 5_000);
        }
      }
      expect(loop.firedAfterMs).not.toBeNull();
      expect(loop.firedAfterMs!).toBeLessThan(3_500);
      expect(loop.worstLagMs).toBeLessThan(1_000);
      expect(Math.max(...answers)).toBeLessThan(1_000);
      for (const { calls, name } of brokers) {
        // Backoff from 1 s, doubling: builds at about 0, 1, 3 (and 7) s in the window (a handful a minute), not hundreds.
        expect({ name, builds: calls.length }).toEqual({ name, builds: expect.any(Number) });
        expect(calls.length).toBeGreaterThanOrEqual(2);
        expect(calls.length).toBeLessThanOrEqual(4);
        // The gaps double: each is at least its place in the schedule (1 s, 2 s, 4 s), whatever
        // the load added to the one before (a ratio of measured gaps failed on a busy machine).
        for (let i = 1; i < calls.length; i++) expect(calls[i]! - calls[i - 1]!).toBeGreaterThanOrEqual(1_000 * 2 ** (i - 1) - 100);
      }
      for (const { broker, name } of brokers) {
        const stats = await broker.stats();
        expect(stats.blueprints[name]!.failures).toMatchObject({ streak: expect.any(Number), lastError: expect.stringContaining(name) });
        expect(stats.blueprints[name]!.failures!.streak).toBeGreaterThanOrEqual(2);
      }
    } finally {
      loop?.stop();
      server.close();
      for (const { broker } of brokers) await broker.close({ grace: { milliseconds: 200 } });
    }
    // Eight brokers opened one after another before the window: seconds each on a loaded machine.
  }, 120_000);

  test('many waiting leases share the blueprint backoff: the builds of one blueprint stay a handful', async () => {
    const { blueprint, calls } = failingBlueprint('shared', 'allocateResource', { destroyHook: true });
    const broker = await realBroker({ blueprints: [blueprint] });
    const waiting = Array.from({ length: 6 }, (_, i) => broker.acquire({ type: 'host', owner: `build-${i}`, timeout: { seconds: 4 } }).catch((e) => e));
    const errors = await Promise.all(waiting);
    for (const e of errors) expect(e).toBeInstanceOf(LeaseTimeoutError);
    // 0, 1 and 3 s: the blueprint's streak holds every lease back, not one allocation per lease.
    expect(calls.length).toBeLessThanOrEqual(4);
    await broker.close();
  }, 30_000);

  test('after maxAllocationFailures failed builds in a row the lease breaks, with the last hook error as cause; the streak shows in stats()', async () => {
    const fake = fakeBlueprint({ name: 'flaky', type: 'host', failures: { allocateResource: { throws: new Error('quota exceeded') } } });
    const broker = await realBroker({ blueprints: [fake], backoff: { initial: { milliseconds: 50 }, max: { seconds: 1 } }, maxAllocationFailures: 3 });
    const error = await broker.acquire({ type: 'host', owner: 'ci', timeout: { seconds: 20 } }).catch((e) => e);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect(error.message).toMatch(/allocation failed 3 times in a row; last: flaky\.allocateResource failed: quota exceeded/);
    expect(String(error.cause)).toMatch(/quota exceeded/);
    expect(fake.calls.allocateResource).toBe(3);
    const stats = await broker.stats();
    expect(stats.blueprints.flaky!.failures).toMatchObject({ streak: 3, lastError: 'flaky.allocateResource failed: quota exceeded' });
    const failures = await broker.logs({ lease: error.leaseId, type: 'lease.allocation-failure' });
    expect(failures.map((l) => l.data.attempt)).toEqual([1, 2, 3]);
    // The streak ends with the first resource that activates.
    fake.fail('allocateResource', undefined);
    const lease = await broker.acquire({ type: 'host', owner: 'ci', timeout: { seconds: 20 } });
    expect(lease.status).toBe('active');
    expect((await broker.stats()).blueprints.flaky!.failures).toBeNull();
    await lease.release();
    await broker.close();
  }, 30_000);

  test('a limits.allocationLimit that throws is a blueprint failure: logged as hook.failure, backed off, and the lease breaks', async () => {
    const fake = fakeBlueprint({
      name: 'policy',
      type: 'host',
      limits: {
        allocationLimit: () => {
          throw new Error('policy service unreachable');
        },
      },
    });
    const broker = await realBroker({ blueprints: [fake], backoff: { initial: { milliseconds: 50 }, max: { seconds: 1 } }, maxAllocationFailures: 2 });
    const error = await broker.acquire({ type: 'host', owner: 'ci', timeout: { seconds: 20 } }).catch((e) => e);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect(error.message).toMatch(/policy\.limits\.allocationLimit failed: policy service unreachable/);
    const hookFailures = await broker.logs({ type: 'hook.failure' });
    expect(hookFailures.map((l) => l.data.hook)).toEqual(['limits.allocationLimit', 'limits.allocationLimit']);
    expect((await broker.stats()).blueprints.policy!.failures!.streak).toBe(2);
    expect(fake.calls.allocateResource).toBe(0);
    await broker.close();
  }, 30_000);
});

describe('acquire({ timeout }) while a blueprint fails or has no capacity', () => {
  test('createBroker: LeaseTimeoutError (not LeaseBrokenError) carrying the last hook failure', async () => {
    const fake = fakeBlueprint({ name: 'down', type: 'host', failures: { allocateResource: { throws: new Error('cloud API 503') } } });
    const broker = await realBroker({ blueprints: [fake] });
    const started = Date.now();
    // Long enough for a loaded machine to make the first build, and see it fail, before the timeout.
    const error = await broker.acquire({ type: 'host', owner: 'ci', timeout: { seconds: 3 } }).catch((e) => e);
    expect(error).toBeInstanceOf(LeaseTimeoutError);
    expect(Date.now() - started).toBeLessThan(6_000);
    expect(error.lastFailure).toBe('down.allocateResource failed: cloud API 503');
    expect(error.cause).toBe('down.allocateResource failed: cloud API 503');
    expect(error.message).toMatch(/not active within 3 seconds/);
    await broker.close();
  });

  test('createBroker and createTestBroker give the same error for the same code', async () => {
    const noCapacity = () => fakeBlueprint({ name: 'full', type: 'host', answers: { canAllocate: () => false } });
    const real = await realBroker({ blueprints: [noCapacity()] });
    const fromReal = await real.acquire({ type: 'host', timeout: { milliseconds: 500 } }).catch((e) => e);
    await real.close();
    const test = track(await createTestBroker({ database: testDatabase(), blueprints: [noCapacity()] }));
    const pending = test.acquire({ type: 'host', timeout: { milliseconds: 500 } }).catch((e) => e);
    await test.advance({ seconds: 1 });
    const fromTest = await pending;
    await test.close();
    expect(fromReal).toBeInstanceOf(LeaseTimeoutError);
    expect(fromTest).toBeInstanceOf(LeaseTimeoutError);
    expect(fromTest.code).toBe(fromReal.code);
  });

  test('handle.whenActive({ timeout }): the message agrees with handle.status() right after', async () => {
    const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'slow', type: 'host', delays: { activateResource: 1_500 } })] });
    const handle = await broker.requestLease({ type: 'host', owner: 'ci' });
    const error = await handle.whenActive({ timeout: { milliseconds: 300 } }).catch((e) => e);
    expect(error).toBeInstanceOf(LeaseTimeoutError);
    const status = await handle.status();
    // A lease still pending or acquired has not been released, and the error must not say it has.
    if (status === 'pending' || status === 'acquired') {
      expect(error.released).toBe(false);
      expect(error.message).toMatch(/its release was requested/);
    }
    if (error.released) expect(['released', 'destroyed']).toContain(status);
    // The release was recorded: the lease ends destroyed, and never active.
    const deadline = Date.now() + 10_000;
    while ((await handle.status()) !== 'destroyed' && Date.now() < deadline) await sleep(50);
    expect(await handle.status()).toBe('destroyed');
    expect((await broker.logs({ lease: handle.id, type: 'lease.activated' })).length).toBe(0);
    await broker.close();
  });
});
