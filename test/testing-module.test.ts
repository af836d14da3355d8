import { DateTime } from 'luxon';
import { internals } from '../lib/broker/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AbortError, RetryLater, ValidationError, type CommandInterface } from '../lib/index.js';
import { createTestBroker, fakeBlueprint, ManualClock } from '../lib/testing/index.js';
import { guardBrokers, testBroker, track } from './helpers/broker.js';
import { testDatabase } from './helpers/tier.js';

guardBrokers();

/** Calls one hook of a fake's implementation directly, with the bits of context the fake reads. */
function call(bp: ReturnType<typeof fakeBlueprint>, hook: string, ctx: Record<string, unknown> = {}) {
  const fn = (bp.implementation as any)[hook] as (ctx: object) => Promise<unknown>;
  return fn.call(bp.implementation, { resume: false, resource: { id: 'res-x', leaseCount: 0, attributes: {} }, lease: { id: 'lease-x', attributes: {} }, ...ctx });
}

// slipway/testing: the fake blueprint users put in their own suites.
describe('fakeBlueprint', () => {
  test('counts every call per hook and records each in order with the object id and the resume flag', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    expect(Object.values(bp.calls).every((n) => n === 0)).toBe(true);
    await call(bp, 'activateResource', { resource: { id: 'r1' } });
    await call(bp, 'activateResource', { resource: { id: 'r1' }, resume: true });
    await call(bp, 'destroyResource', { resource: { id: 'r2' } });
    expect(bp.calls.activateResource).toBe(2);
    expect(bp.calls.destroyResource).toBe(1);
    expect(bp.calls.allocateResource).toBe(0);
    expect(bp.history).toEqual([
      { hook: 'activateResource', id: 'r1', resume: false },
      { hook: 'activateResource', id: 'r1', resume: true },
      { hook: 'destroyResource', id: 'r2', resume: false },
    ]);
  });

  test('delays: a hook waits its delay (real milliseconds) before answering; others do not', async () => {
    // A delay of a second, and a bound of half of it: told apart on a loaded machine too.
    const bp = fakeBlueprint({ name: 'f', delays: { activateResource: 1_000 } });
    let t = Date.now();
    await call(bp, 'activateResource');
    expect(Date.now() - t).toBeGreaterThanOrEqual(990);
    t = Date.now();
    await call(bp, 'destroyResource');
    expect(Date.now() - t).toBeLessThan(500);
  });

  test('gates: a hook blocks until the test opens its gate', async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const bp = fakeBlueprint({ name: 'f', gates: { activateLease: () => gate } });
    let done = false;
    const running = call(bp, 'activateLease').then(() => (done = true));
    await new Promise((r) => setTimeout(r, 30));
    expect(done).toBe(false);
    expect(bp.calls.activateLease).toBe(1);
    open();
    await running;
    expect(done).toBe(true);
  });

  test('failures: a hook throws the injected value `times` times, then succeeds; other hooks are untouched', async () => {
    const boom = new Error('boom');
    const bp = fakeBlueprint({ name: 'f', failures: { canAllocate: { throws: boom, times: 2 } } });
    await expect(call(bp, 'canAllocate')).rejects.toBe(boom);
    await expect(call(bp, 'canAllocate')).rejects.toBe(boom);
    await expect(call(bp, 'canAllocate')).resolves.toBe(true);
    await expect(call(bp, 'canAllocate')).resolves.toBe(true);
    await expect(call(bp, 'activateResource')).resolves.toBeUndefined();
    expect(bp.calls.canAllocate).toBe(4);
  });

  test('failures: without times a hook always fails; throws may be a factory or a non-Error; fail() changes and clears it at run time', async () => {
    let made = 0;
    const bp = fakeBlueprint({ name: 'f', failures: { destroyResource: { throws: () => new Error(`attempt ${++made}`) } } });
    for (let i = 1; i <= 4; i++) await expect(call(bp, 'destroyResource')).rejects.toThrow(`attempt ${i}`);
    bp.fail('destroyResource', undefined);
    await expect(call(bp, 'destroyResource')).resolves.toBeUndefined();
    bp.fail('activateResource', { throws: 'a string', times: 1 });
    await expect(call(bp, 'activateResource')).rejects.toBe('a string');
    await expect(call(bp, 'activateResource')).resolves.toBeUndefined();
  });

  test('answers and resourceAttributes shape the yes/no hooks and the allocation', async () => {
    const bp = fakeBlueprint({ name: 'f', resourceAttributes: { zone: 'b' }, answers: { canEverAllocate: (l) => l.ok === true, canAllocate: () => false } });
    await expect(call(bp, 'canEverAllocate', { lease: { id: 'l', attributes: { ok: true } } })).resolves.toBe(true);
    await expect(call(bp, 'canEverAllocate', { lease: { id: 'l', attributes: {} } })).resolves.toBe(false);
    await expect(call(bp, 'canAllocate')).resolves.toBe(false);
    await expect(call(bp, 'allocateResource', { lease: { id: 'l', attributes: { a: 1 } }, acquireLease: async () => undefined })).resolves.toEqual({ attributes: { zone: 'b', builtFor: { a: 1 } } });
  });

  test('command: each run is recorded (argv, cwd, env, stdin, lease, resource) and answered by respond; a quiet success by default', async () => {
    const bp = fakeBlueprint({
      name: 'f',
      command: { respond: ({ argv }) => (argv[0] === 'make' ? { exitCode: 2, stdout: 'building\n', stderr: 'no rule' } : argv[0] === 'kill-me' ? { exitCode: null, signal: 'SIGKILL', timedOut: true } : {}) },
    });
    const command = (bp.implementation.interfaces!.command as (ctx: object) => CommandInterface)({ lease: { id: 'lease-x' }, resource: { id: 'res-x' } });
    const chunks: string[] = [];
    await expect(command.run(['git', 'status'], { cwd: 'src', env: { CI: '1' }, stdin: 'y\n' })).resolves.toEqual({ exitCode: 0, signal: null, stdout: '', stderr: '', timedOut: false });
    await expect(command.run(['make', 'all'], { onStdout: (c) => chunks.push(`out:${c}`), onStderr: (c) => chunks.push(`err:${c}`) })).resolves.toEqual({ exitCode: 2, signal: null, stdout: 'building\n', stderr: 'no rule', timedOut: false });
    await expect(command.run(['kill-me'])).resolves.toMatchObject({ exitCode: null, signal: 'SIGKILL', timedOut: true });
    expect(chunks).toEqual(['out:building\n', 'err:no rule']);
    expect(bp.commands).toEqual([
      { argv: ['git', 'status'], cwd: 'src', env: { CI: '1' }, stdin: 'y\n', lease: 'lease-x', resource: 'res-x' },
      { argv: ['make', 'all'], cwd: undefined, env: undefined, stdin: undefined, lease: 'lease-x', resource: 'res-x' },
      { argv: ['kill-me'], cwd: undefined, env: undefined, stdin: undefined, lease: 'lease-x', resource: 'res-x' },
    ]);
    const quiet = fakeBlueprint({ name: 'q' });
    const quietCommand = (quiet.implementation.interfaces!.command as (ctx: object) => CommandInterface)({ lease: { id: 'l' }, resource: { id: 'r' } });
    await expect(quietCommand.run(['anything'])).resolves.toEqual({ exitCode: 0, signal: null, stdout: '', stderr: '', timedOut: false });
  });

  test('command: an error respond throws is what run() rejects with; an aborted signal rejects with AbortError; bad argv and bad options are refused', async () => {
    const notFound = new Error('spawn nope ENOENT');
    const bp = fakeBlueprint({ name: 'f', command: { respond: ({ argv }) => { if (argv[0] === 'nope') throw notFound; return {}; } } });
    const command = (bp.implementation.interfaces!.command as (ctx: object) => CommandInterface)({ lease: { id: 'l' }, resource: { id: 'r' } });
    await expect(command.run(['nope'])).rejects.toBe(notFound);
    await expect(command.run(['git'], { signal: AbortSignal.abort() })).rejects.toBeInstanceOf(AbortError);
    expect(bp.commands.map((c) => c.argv[0])).toEqual(['nope', 'git']);
    await expect(command.run([])).rejects.toMatchObject({ field: 'argv' });
    await expect(command.run(['git', 1 as unknown as string])).rejects.toBeInstanceOf(ValidationError);
    expect(bp.commands).toHaveLength(2);
    expect(() => fakeBlueprint({ command: { respond: 'exit 0' as never } })).toThrow(/command\.respond: must be a function/);
    expect(() => fakeBlueprint({ command: null as never })).toThrow(/command: must be/);
  });

  test('name, type and limits are those given', () => {
    const bp = fakeBlueprint({ name: 'mine', type: 'host', limits: { maxResources: 3 } });
    expect(bp.name).toBe('mine');
    expect(bp.type).toBe('host');
    expect(bp.limits.maxResources).toBe(3);
    expect(fakeBlueprint().type).toBe('fake');
  });
});

describe('the fake inside a test broker: failures with times, driven by the manual clock', () => {
  test('destroyLease fails twice: retried with backoff (1 s, 2 s of manual time), then the lease is destroyed', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { destroyLease: { throws: new Error('busy'), times: 2 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    await handle.release({ wait: false });
    await broker.runUntilIdle();
    expect(bp.calls.destroyLease).toBe(1);
    expect(await handle.status()).toBe('released');
    await broker.advance({ milliseconds: 999 });
    expect(bp.calls.destroyLease).toBe(1);
    await broker.advance({ milliseconds: 1 });
    expect(bp.calls.destroyLease).toBe(2);
    await broker.advance({ seconds: 2 });
    expect(bp.calls.destroyLease).toBe(3);
    expect(await handle.status()).toBe('destroyed');
    expect(bp.calls.releaseLease).toBe(1);
    await broker.close();
  });

  test('a RetryLater failure with times 1 delays the hook by its duration only once', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { activateResource: { throws: new RetryLater('soon', { seconds: 5 }), times: 1 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('pending');
    await broker.advance({ seconds: 5 });
    expect(await handle.status()).toBe('active');
    expect(bp.calls.activateResource).toBe(2);
    await broker.close();
  });
});

describe('the fake command interface through a lease', () => {
  test("lease.interface('command') of a fake's lease runs nothing, and the run is recorded with the lease and its resource", async () => {
    const bp = fakeBlueprint({ name: 'f', type: 'host', command: { respond: ({ argv }) => ({ stdout: `ran ${argv.join(' ')}` }) } });
    const broker = await testBroker({ blueprints: [bp] });
    const lease = await broker.acquire({ type: 'host' });
    await expect(lease.interface('command').run(['npm', 'test'], { cwd: 'app' })).resolves.toMatchObject({ exitCode: 0, stdout: 'ran npm test' });
    expect(bp.commands).toEqual([{ argv: ['npm', 'test'], cwd: 'app', env: undefined, stdin: undefined, lease: lease.id, resource: lease.resource.id }]);
    await lease.release();
    await broker.close();
  });
});

describe('ManualClock', () => {
  test('starts at a fixed time, moves only when told, fires callbacks in time order as it passes them', () => {
    const clock = new ManualClock();
    const start = clock.now();
    expect(start.toISO()).toBe('2030-01-01T00:00:00.000Z');
    const fired: string[] = [];
    clock.schedule(start.plus({ seconds: 10 }), () => fired.push('10s'));
    clock.schedule(start.plus({ seconds: 5 }), () => fired.push('5s'));
    const cancel = clock.schedule(start.plus({ seconds: 7 }), () => fired.push('7s'));
    cancel();
    expect(clock.pending).toBe(2);
    clock.advance({ seconds: 6 });
    expect(fired).toEqual(['5s']);
    expect(clock.now().toMillis() - start.toMillis()).toBe(6000);
    clock.advance({ seconds: 10 });
    expect(fired).toEqual(['5s', '10s']);
    expect(clock.pending).toBe(0);
    expect(() => clock.set(start)).toThrow(/backwards/);
  });

  test('a callback scheduled in the past runs soon (microtask), not never', async () => {
    const clock = new ManualClock(DateTime.fromISO('2031-05-05T00:00:00Z'));
    let ran = false;
    clock.schedule(clock.now().minus({ seconds: 1 }), () => (ran = true));
    await Promise.resolve();
    expect(ran).toBe(true);
  });
});

describe('createTestBroker', () => {
  test('is embedded and in memory, with a ManualClock that does not move by itself', async () => {
    // createTestBroker itself, not the tier's testBroker(): its default is what users get.
    const broker = track(await createTestBroker({ blueprints: [fakeBlueprint({ name: 'f' })] }));
    const { db, engine } = internals.get(broker)!;
    expect(db.embedded).toBe(true);
    expect(engine).not.toBeNull();
    expect(broker.clock).toBeInstanceOf(ManualClock);
    const t = broker.clock.now();
    await new Promise((r) => setTimeout(r, 50));
    expect(broker.clock.now().equals(t)).toBe(true);
    await broker.requestLease({ type: 'fake' });
    await broker.close();
    // in memory: a second test broker starts empty
    const fresh = track(await createTestBroker({ blueprints: [fakeBlueprint({ name: 'f' })] }));
    expect(await fresh.leases.list()).toEqual([]);
    await fresh.close();
  });

  test('runUntilIdle() runs the workers until nothing is due now; work scheduled later waits for advance()', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'fake', ttl: { minutes: 10 } });
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('active');
    expect(bp.calls.activateLease).toBe(1);
    // the expiry is scheduled: runUntilIdle does not jump to it
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('active');
    await broker.advance({ minutes: 9, seconds: 59 });
    expect(await handle.status()).toBe('active');
    await broker.advance({ seconds: 1 });
    expect(await handle.status()).toBe('destroyed');
    expect(await broker.logs({ lease: handle.id, type: 'lease.expired' })).toHaveLength(1);
    await broker.close();
  });

  test('numbers leases and resources per broker (lease_0001, res_0001, ...), so two runs of a test see the same ids', async () => {
    const ids = async () => {
      const broker = track(await createTestBroker({ blueprints: [fakeBlueprint({ name: 'f', exclusive: true })] }));
      const a = await broker.acquire({ type: 'fake' });
      const b = await broker.acquire({ type: 'fake' });
      const seen = [a.id, a.resource.id, b.id, b.resource.id];
      await broker.close();
      return seen;
    };
    expect(await ids()).toEqual(['lease_0001', 'res_0001', 'lease_0002', 'res_0002']);
    expect(await ids()).toEqual(['lease_0001', 'res_0001', 'lease_0002', 'res_0002']);
  });

  test('deterministicIds: off gives random ids; on works on any fresh database (this tier\'s); off by default with a dataDir; a non-boolean is refused', async () => {
    const random = track(await createTestBroker({ deterministicIds: false }));
    expect((await random.requestLease({ type: 'fake' })).id).toMatch(/^lease_[0-9a-f]{20}$/);
    await random.close();
    const numbered = await testBroker({ deterministicIds: true });
    expect((await numbered.requestLease({ type: 'fake' })).id).toBe('lease_0001');
    await numbered.close();
    const dataDir = mkdtempSync(join(tmpdir(), 'slipway-ids-'));
    try {
      const durable = track(await createTestBroker({ database: { embedded: true, dataDir } }));
      expect((await durable.requestLease({ type: 'fake' })).id).toMatch(/^lease_[0-9a-f]{20}$/);
      await durable.close();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
    await expect(createTestBroker({ deterministicIds: 'yes' as never })).rejects.toThrow(/deterministicIds: must be a boolean/);
    if (testDatabase()) {
      // A url: random by default, as a schema may outlive one broker.
      const shared = track(await createTestBroker({ database: testDatabase() }));
      expect((await shared.requestLease({ type: 'fake' })).id).toMatch(/^lease_[0-9a-f]{20}$/);
      await shared.close();
    }
  });

  test('accepts a ManualClock of the caller; runUntilIdle needs workers', async () => {
    const clock = new ManualClock(DateTime.fromISO('2040-02-02T00:00:00Z'));
    const broker = track(await createTestBroker({ clock, blueprints: [fakeBlueprint({ name: 'f' })] }));
    expect(broker.clock).toBe(clock);
    const handle = await broker.requestLease({ type: 'fake' });
    expect((await broker.leases.get(handle.id))!.createdAt.toISO()).toBe('2040-02-02T00:00:00.000Z');
    await broker.runUntilIdle();
    await broker.close();
    const writer = track(await createTestBroker({ workers: false }));
    await expect(writer.runUntilIdle()).rejects.toThrow(/workers/);
    await writer.close();
  });
});
