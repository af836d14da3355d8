import { LeaseBrokenError, LeaseTimeoutError } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { engineErrors, guardBrokers, realBroker, testBroker } from './helpers/broker.js';
import { pump } from './helpers/pump.js';
import { describeOnEmbedded } from './helpers/tier.js';

guardBrokers();

const settledFlag = <T>(p: Promise<T>) => {
  const state = { done: false, value: undefined as T | undefined, error: undefined as unknown };
  p.then(
    (v) => ((state.done = true), (state.value = v)),
    (e) => ((state.done = true), (state.error = e)),
  );
  return state;
};

// LESSONS "expiry: ttl/until, scheduled at its time"; DESIGN "Time": tests move the clock instead of sleeping.
describe('lease expiry', () => {
  test('ttl: an active lease is released at its expiry, not before', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake', ttl: { minutes: 10 } }));
    expect(lease.expiresAt!.toMillis()).toBe(broker.clock.now().plus({ minutes: 10 }).toMillis());
    await broker.advance({ minutes: 9, seconds: 59 });
    expect((await broker.leases.get(lease.id))!.status).toBe('active');
    expect(bp.calls.releaseLease).toBe(0);
    await broker.advance({ seconds: 1 });
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    const [expired] = await broker.logs({ lease: lease.id, type: 'lease.expired' });
    expect(expired!.data.at).toBe(lease.expiresAt!.toISO());
    const [released] = await broker.logs({ lease: lease.id, type: 'lease.released' });
    expect(released!.data.reason).toBe('expired');
    expect(bp.calls.releaseLease).toBe(1);
    expect(bp.calls.destroyLease).toBe(1);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('until: an active lease is released at that time, not before', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' })] });
    const until = broker.clock.now().plus({ hours: 2 });
    const lease = await pump(broker, broker.acquire({ type: 'fake', until }));
    expect(lease.expiresAt!.toMillis()).toBe(until.toMillis());
    await broker.advance({ hours: 1, minutes: 59, seconds: 59, milliseconds: 999 });
    expect((await broker.leases.get(lease.id))!.status).toBe('active');
    await broker.advance({ milliseconds: 1 });
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    expect(await broker.logs({ lease: lease.id, type: 'lease.expired' })).toHaveLength(1);
    await broker.close();
  });

  test('a pending lease expires too: released at its ttl while waiting, acquire() rejects', async () => {
    const bp = fakeBlueprint({ name: 'f', answers: { canAllocate: () => false } });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake', ttl: { minutes: 5 } });
    const state = settledFlag(acquiring);
    await broker.runUntilIdle();
    const [lease] = await broker.leases.list();
    expect(lease!.status).toBe('pending');
    await broker.advance({ minutes: 4, seconds: 59 });
    expect((await broker.leases.get(lease!.id))!.status).toBe('pending');
    expect(state.done).toBe(false);
    // the lease's next look is at its expiry, not at the 30 s recheck after 4:30
    await broker.advance({ seconds: 1 });
    expect((await broker.leases.get(lease!.id))!.status).toBe('destroyed');
    await expect(pump(broker, acquiring)).rejects.toBeInstanceOf(LeaseBrokenError);
    expect(await broker.logs({ lease: lease!.id, type: 'lease.expired' })).toHaveLength(1);
    expect(await broker.resources.list()).toEqual([]);
    await broker.close();
  });
});

describe('resource idle expiry', () => {
  test.each([
    ['the blueprint implementation (fakeBlueprint idleExpiry)', { idleExpiry: { minutes: 15 } }],
    ['limits.idleExpiry', { limits: { idleExpiry: { minutes: 15 } } }],
  ])('set by %s: an idle resource is released and destroyed after the duration, not while leased', async (_what, options) => {
    const bp = fakeBlueprint({ name: 'f', ...options });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const id = lease.resource.id;
    // leased: never idle-expired
    await broker.advance({ minutes: 20 });
    await broker.advance({ minutes: 20 });
    expect((await broker.resources.get(id))!.status).toBe('active');
    await pump(broker, lease.release());
    // idle from now on
    await broker.advance({ minutes: 14, seconds: 59 });
    expect((await broker.resources.get(id))!.status).toBe('active');
    expect(bp.calls.destroyResource).toBe(0);
    await broker.advance({ seconds: 1 });
    expect((await broker.resources.get(id))!.status).toBe('destroyed');
    expect(bp.calls.destroyResource).toBe(1);
    const [released] = await broker.logs({ resource: id, type: 'resource.released' });
    expect(released!.data.reason).toMatch(/^idle for /);
    await broker.close();
  });

  test('idle time counts from when the last lease left, not from activation', async () => {
    const bp = fakeBlueprint({ name: 'f', idleExpiry: { minutes: 15 } });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await pump(broker, broker.acquire({ type: 'fake' }));
    const id = lease.resource.id;
    await broker.advance({ minutes: 14 });
    await pump(broker, lease.release());
    await broker.advance({ minutes: 2 });
    // idle for 2 minutes only
    expect((await broker.resources.get(id))!.status).toBe('active');
    await broker.advance({ minutes: 12, seconds: 59 });
    expect((await broker.resources.get(id))!.status).toBe('active');
    await broker.advance({ seconds: 1 });
    expect((await broker.resources.get(id))!.status).toBe('destroyed');
    await broker.close();
  });

  test('a resource that is reused before its idle expiry is not released under its new lease', async () => {
    const bp = fakeBlueprint({ name: 'f', idleExpiry: { minutes: 15 } });
    const broker = await testBroker({ blueprints: [bp] });
    const first = await pump(broker, broker.acquire({ type: 'fake' }));
    await pump(broker, first.release());
    await broker.advance({ minutes: 10 });
    const second = await pump(broker, broker.acquire({ type: 'fake' }));
    expect(second.resource.id).toBe(first.resource.id);
    await broker.advance({ minutes: 10 });
    expect((await broker.resources.get(first.resource.id))!.status).toBe('active');
    expect((await broker.leases.get(second.id))!.status).toBe('active');
    await broker.close();
  });

  // The statement that destroys the last lease wakes the resource to schedule its idle
  // expiry: after a destroy phase (hooks at the lease's end), and after the holder's
  // release run inline with the destroy in it (no hook there). Nothing else would: the
  // resource's work item waits for no time of its own while it is leased.
  test.each([
    ['with every per-lease hook', []],
    ['with no hook at the lease\'s end (the release and destroy run inline)', ['activateLease', 'releaseLease', 'destroyLease']],
  ] as const)('real clock, %s: a resource left idle goes at its idle expiry', async (_what, without) => {
    const bp = fakeBlueprint({ name: 'f', without: [...without], limits: { idleExpiry: { milliseconds: 800 } } });
    const broker = await realBroker({ blueprints: [bp] });
    try {
      const lease = await broker.acquire({ type: 'fake' });
      const id = lease.resource.id;
      // Held past the idle expiry, so that a look the resource scheduled before the lease
      // took it finds it leased, and parks it.
      await new Promise((r) => setTimeout(r, 1_500));
      const released = Date.now();
      await lease.release();
      expect((await broker.resources.get(id))!.status).toBe('active');
      let status: string | undefined;
      while ((status = (await broker.resources.get(id))!.status) !== 'destroyed' && Date.now() - released < 10_000) await new Promise((r) => setTimeout(r, 50));
      expect(status).toBe('destroyed');
      expect(Date.now() - released).toBeGreaterThanOrEqual(800);
      const [log] = await broker.logs({ resource: id, type: 'resource.released' });
      expect(log!.data.reason).toMatch(/^idle for /);
      expect(engineErrors(broker)).toEqual([]);
    } finally {
      await broker.close();
    }
  }, 30_000);
});

describe('acquire timeout', () => {
  test('not active within spec.timeout: acquire() rejects with LeaseTimeoutError and the lease is released', async () => {
    const bp = fakeBlueprint({ name: 'f', answers: { canAllocate: () => false } });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake', timeout: { minutes: 2 } });
    const state = settledFlag(acquiring);
    await broker.runUntilIdle();
    const [lease] = await broker.leases.list();
    await broker.advance({ minutes: 1, seconds: 59 });
    expect(state.done).toBe(false);
    expect((await broker.leases.get(lease!.id))!.status).toBe('pending');
    await broker.advance({ seconds: 1 });
    const error = await pump(broker, acquiring).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LeaseTimeoutError);
    expect((error as LeaseTimeoutError).leaseId).toBe(lease!.id);
    expect((error as Error).message).toContain('2 minutes');
    await broker.runUntilIdle();
    expect((await broker.leases.get(lease!.id))!.status).toBe('destroyed');
    expect(await broker.logs({ lease: lease!.id, type: 'lease.released' })).toHaveLength(1);
    expect((await broker.stats()).types.fake!.waiting).toBe(0);
    expect(await broker.resources.list()).toEqual([]);
    await broker.close();
  });
});

// Issue 10: a holder that dies leaves a lease without a ttl active for good; a new broker on
// the same embedded data says what it found, so the operator can see and release it.
describeOnEmbedded('a new broker on a dataDir with active leases of an earlier process', () => {
  test('logs a warning with how many are active and how many have no ttl', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'slipway-left-'));
    try {
      const first = await realBroker({ database: { embedded: true, dataDir }, blueprints: [fakeBlueprint({ name: 'f', type: 'host' })] });
      await first.acquire({ type: 'host', owner: 'gone' });
      await first.acquire({ type: 'host', owner: 'gone', ttl: { hours: 1 } });
      await first.close();
      const warnings: Array<{ obj: Record<string, unknown>; msg?: string }> = [];
      const logger = { debug() {}, info() {}, error() {}, warn: (obj: object, msg?: string) => void warnings.push({ obj: obj as Record<string, unknown>, msg }) };
      const second = await realBroker({ database: { embedded: true, dataDir }, blueprints: [fakeBlueprint({ name: 'f', type: 'host' })], logger });
      const found = warnings.find((w) => /active lease/.test(w.msg ?? ''));
      expect(found?.obj).toMatchObject({ active: 2, withoutTtl: 1 });
      expect(found?.msg).toMatch(/2 active lease\(s\) of an earlier process, 1 of them without a ttl/);
      await second.close();
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
