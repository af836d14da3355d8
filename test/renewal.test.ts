/**
 * Lease renewal (issue 13): `extend` commands applied by the lease's own worker, and the
 * holder's keepalive. On the manual clock for the exact times, on the real clock as users
 * run it, across two brokers on Postgres, and with a holder SIGKILLed under keepalive.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DateTime } from 'luxon';
import { createBroker, defineBlueprint, LeaseEndedError, LeaseNotActiveError, NotFoundError, ValidationError, type Broker, type DatabaseOptions } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, realBroker, testBroker, track } from './helpers/broker.js';
import { lockHolder } from './helpers/lock-holder.js';
import { describeOnPostgres, freshSchema, tier, tierUrl } from './helpers/tier.js';

guardBrokers();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const hosts = () => fakeBlueprint({ name: 'hosts', type: 'host' });

async function waitFor<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(value)})`);
    await sleep(20);
  }
}

describe('extend, on the manual clock', () => {
  test('moves the expiry: the signal and the worker follow the new one, and the log says who renewed', async () => {
    const broker = await testBroker({ blueprints: [hosts()] });
    const start = broker.clock.now();
    const lease = await broker.acquire({ type: 'host', owner: 'ci', ttl: { minutes: 10 } });
    const signal = lease.signal;
    const until = await lease.extend('PT30M', { author: 'ci-job-7' });
    expect(until.toMillis()).toBe(start.plus({ minutes: 30 }).toMillis());
    expect(lease.expiresAt!.toMillis()).toBe(until.toMillis());
    expect((await broker.leases.get(lease.id))!.expiresAt!.toMillis()).toBe(until.toMillis());

    // Past the old expiry: still active, and its signal has not aborted.
    await broker.advance({ minutes: 15 });
    expect((await broker.leases.get(lease.id))!.status).toBe('active');
    expect(signal.aborted).toBe(false);
    // Past the new one: its worker releases it, and the signal says it expired.
    await broker.advance({ minutes: 16 });
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(LeaseNotActiveError);
    expect(signal.reason.why).toBe('expired');
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    const [extended] = await broker.logs({ lease: lease.id, type: 'lease.extended' });
    expect(extended!.message).toBe(`Lease now expires at ${until.toUTC().toISO()} (extended by ci-job-7).`);
    expect(extended!.data).toEqual({ from: start.plus({ minutes: 10 }).toUTC().toISO(), to: until.toUTC().toISO(), author: 'ci-job-7' });
    const [expired] = await broker.logs({ lease: lease.id, type: 'lease.expired' });
    expect(expired!.data.at).toBe(until.toUTC().toISO());
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('{ until } may also bring the expiry nearer; a lease with no ttl gets one; a pending lease renews through its handle', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'one', type: 'host', exclusive: true, limits: { maxResources: 1 } })] });
    const now = broker.clock.now();
    const first = await broker.acquire({ type: 'host', owner: 'a', ttl: { hours: 2 } });
    const signal = first.signal;
    await broker.extendLease(first.id, { until: now.plus({ minutes: 5 }).toISO()! }, { author: 'operator' });
    const waiting = await broker.requestLease({ type: 'host', owner: 'b' });
    expect(await waiting.status()).toBe('pending');
    // No ttl before: the renewal gives it an expiry.
    expect((await broker.leases.get(waiting.id))!.expiresAt).toBeNull();
    const until = await waiting.extend({ ttl: { hours: 1 } });
    expect((await broker.leases.get(waiting.id))!.expiresAt!.toMillis()).toBe(until.toMillis());
    await broker.advance({ minutes: 6 });
    expect(signal.aborted).toBe(true);
    const second = await waiting.whenActive();
    expect(second.expiresAt!.toMillis()).toBe(now.plus({ hours: 1 }).toMillis());
    await second.release();
    await broker.close();
  });

  test('refused: bad renewals before anything is written, an unknown lease, a lease that has ended', async () => {
    const broker = await testBroker({ blueprints: [hosts()] });
    const lease = await broker.acquire({ type: 'host', ttl: { minutes: 10 } });
    const past = broker.clock.now().minus({ seconds: 1 });
    await expect(lease.extend({ until: past })).rejects.toThrow(new ValidationError('renewal.until', `must be in the future (got ${past.toUTC().toISO()}, the broker's clock says ${broker.clock.now().toUTC().toISO()})`));
    await expect(lease.extend(0)).rejects.toThrow(/renewal: must be longer than zero/);
    await expect(lease.extend('soon')).rejects.toThrow(ValidationError);
    await expect(lease.extend({ ttl: 'PT1H', until: DateTime.utc().plus({ hours: 1 }) } as never)).rejects.toThrow(/give \{ ttl \} or \{ until \}, one of them/);
    await expect(lease.extend('PT1H', { wait: 'no' } as never)).rejects.toThrow(/wait: must be a boolean/);
    await expect(lease.extend('PT1H', { reason: 'x' } as never)).rejects.toThrow(/reason: is not an option of extendLease\(\)/);
    await expect(broker.extendLease('', 'PT1H')).rejects.toThrow(/leaseId: must be a non-empty string/);
    await expect(broker.extendLease('lease_nope', 'PT1H')).rejects.toThrow(NotFoundError);
    // Nothing was written by the refused calls.
    expect(await broker.logs({ lease: lease.id, type: 'lease.extended' })).toEqual([]);

    await lease.release();
    const ended = await broker.extendLease(lease.id, 'PT1H').catch((e) => e);
    expect(ended).toBeInstanceOf(LeaseEndedError);
    expect(ended).toMatchObject({ code: 'LEASE_ENDED', leaseId: lease.id, end: 'destroyed' });
    expect(ended.message).toBe(`lease ${lease.id} is already destroyed: it cannot be extended`);
    await expect(lease.extend('PT1H')).rejects.toThrow(LeaseEndedError);
    await broker.close();
  });

  test('an extend that reaches the worker after the expiry passed does not bring the lease back', async () => {
    // The worker is not running while the command is written and the clock passes the expiry.
    const broker = await testBroker({ blueprints: [hosts()] });
    const lease = await broker.acquire({ type: 'host', ttl: { minutes: 10 } });
    const signal = lease.signal;
    const until = broker.clock.now().plus({ hours: 1 });
    // Written, not waited for; then the clock moves past the old expiry, perhaps before the worker's pass.
    // (Moving the clock before the write resolves let the worker destroy the lease first: refused, rightly.)
    await broker.extendLease(lease.id, { until }, { wait: false });
    broker.clock.advance({ minutes: 11 });
    await broker.runUntilIdle();
    const row = (await broker.leases.get(lease.id))!;
    // Either the worker applied the renewal before it saw the expiry (then the holder's signal
    // must still be live), or it refused it and released the lease: never a lease that is live
    // while its holder was told it expired.
    if (row.status === 'active') {
      expect(row.expiresAt!.toMillis()).toBe(until.toMillis());
      expect(signal.aborted).toBe(false);
    } else {
      expect(row.status).toBe('destroyed');
      expect(signal.aborted).toBe(true);
    }
    await broker.close();
  });
});

describe('keepAlive, on the manual clock', () => {
  test('renews a ttl lease every third of its ttl while the holder lives; one log row counts the renewals; release stops it', async () => {
    const broker = await testBroker({ blueprints: [hosts()] });
    const lease = await broker.acquire({ type: 'host', owner: 'ci', ttl: { seconds: 30 }, keepAlive: true });
    const signal = lease.signal;
    for (let i = 1; i <= 9; i++) {
      await broker.advance({ seconds: 10 });
      const expected = broker.clock.now().plus({ seconds: 30 }).toMillis();
      // The renewal is written at the tick and applied by the lease's worker right after.
      await waitFor(async () => (await broker.leases.get(lease.id))!.expiresAt!.toMillis(), (at) => at === expected, `renewal ${i}`);
    }
    // Three ttls have passed since the request: the lease lives, its signal too.
    expect((await broker.leases.get(lease.id))!.status).toBe('active');
    expect(signal.aborted).toBe(false);
    const logs = await broker.logs({ lease: lease.id, type: 'lease.extended' });
    expect(logs).toHaveLength(1);
    expect(logs[0]!.count).toBe(9);
    expect(logs[0]!.data.author).toBe('keepalive');
    await lease.release();
    await broker.advance({ seconds: 10 });
    expect((await broker.logs({ lease: lease.id, type: 'lease.extended' }))[0]!.count).toBe(9);
    await broker.close();
  });

  test('a lease waiting for capacity is kept alive too, and the renewals stop when it ends', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'one', type: 'host', exclusive: true, limits: { maxResources: 1 } })] });
    const holder = await broker.acquire({ type: 'host', owner: 'first' });
    const waiting = await broker.requestLease({ type: 'host', owner: 'second', ttl: { seconds: 30 }, keepAlive: { every: { seconds: 5 } } });
    for (let i = 0; i < 12; i++) await broker.advance({ seconds: 5 });
    expect(await waiting.status()).toBe('pending');
    await broker.release(waiting.id, { author: 'operator' });
    await broker.runUntilIdle();
    expect(await waiting.status()).toBe('destroyed');
    const before = (await broker.logs({ lease: waiting.id, type: 'lease.extended' }))[0]!.count;
    expect(before).toBeGreaterThanOrEqual(10);
    // The next tick finds the lease ended and stops for good.
    await broker.advance({ seconds: 5 });
    await broker.advance({ seconds: 5 });
    expect((await broker.logs({ lease: waiting.id, type: 'lease.extended' }))[0]!.count).toBe(before);
    await holder.release();
    await broker.close();
  });

  test('refused without a ttl, with until, with an interval not shorter than the ttl, and on a child lease', async () => {
    const broker = await testBroker({ blueprints: [hosts()] });
    await expect(broker.acquire({ type: 'host', keepAlive: true })).rejects.toThrow(new ValidationError('spec.keepAlive', 'renews a ttl: give spec.ttl too'));
    await expect(broker.acquire({ type: 'host', until: DateTime.utc().plus({ years: 10 }), keepAlive: true })).rejects.toThrow(/renews a ttl: give spec.ttl instead of spec.until/);
    await expect(broker.acquire({ type: 'host', ttl: 'PT1M', keepAlive: { every: 'PT1M' } })).rejects.toThrow(/spec.keepAlive.every: must be shorter than spec.ttl/);
    await expect(broker.acquire({ type: 'host', ttl: 'PT1M', keepAlive: { every: 'PT10S', often: true } as never })).rejects.toThrow(/must be true or \{ every: duration \}/);
    await expect(broker.acquire({ type: 'host', ttl: 'PT1M', keepAlive: 'yes' as never })).rejects.toThrow(/must be true or \{ every: duration \}/);
    expect(await broker.leases.list()).toEqual([]);
    await broker.close();

    // A child lease is held by its resource, in no process that could renew it.
    const seen: { error?: unknown } = {};
    const wc = defineBlueprint({
      type: 'working-copy',
      async allocateResource(ctx) {
        seen.error = await ctx.acquireLease({ type: 'host', ttl: 'PT1H', keepAlive: true }, { key: 'host' }).catch((e: unknown) => e);
        throw seen.error;
      },
    })({ name: 'wcs' });
    const withChild = await testBroker({ blueprints: [hosts(), wc] });
    await withChild.requestLease({ type: 'working-copy' });
    await withChild.runUntilIdle();
    expect(seen.error).toBeInstanceOf(ValidationError);
    expect((seen.error as ValidationError).field).toBe('spec.keepAlive');
    expect(await withChild.leases.list({ type: 'host' })).toEqual([]);
    await withChild.close();
  });
});

describe('renewal on the real clock, as users run it', () => {
  test('keepAlive holds a lease with a 1.5 s ttl for 4 s; extend() moves the signal; release ends it', async () => {
    const broker = await realBroker({ blueprints: [hosts()], sweepInterval: { milliseconds: 100 } });
    const lease = await broker.acquire({ type: 'host', owner: 'real', ttl: { milliseconds: 1_500 }, keepAlive: { every: { milliseconds: 300 } } });
    const signal = lease.signal;
    await sleep(4_000);
    expect(signal.aborted).toBe(false);
    const row = (await broker.leases.get(lease.id))!;
    expect(row.status).toBe('active');
    expect(row.expiresAt!.toMillis()).toBeGreaterThan(Date.now());
    await lease.release();
    expect(signal.aborted).toBe(true);
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');

    // extend() without keepalive: the signal aborts at the new expiry, not the old one. The ttl
    // runs from the request: long enough for a loaded machine to hand the lease over and apply the extend before it.
    const short = await broker.acquire({ type: 'host', owner: 'real', ttl: { milliseconds: 2_000 } });
    const shortSignal = short.signal;
    const until = await short.extend({ milliseconds: 4_000 });
    const abortedAt = await new Promise<number>((resolve) => shortSignal.addEventListener('abort', () => resolve(Date.now()), { once: true }));
    expect(abortedAt).toBeGreaterThanOrEqual(until.toMillis() - 5);
    expect(abortedAt - until.toMillis()).toBeLessThan(1_000);
    expect(shortSignal.reason.why).toBe('expired');
    await waitFor(async () => (await broker.leases.get(short.id))!.status, (s) => s === 'destroyed', 'the expired lease to be destroyed');
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });
});

describe('keepAlive through hooks longer than the ttl, on the real clock', () => {
  test('a lease whose activateLease outlasts its 1 s ttl is kept alive and handed over active, the hook called once', async () => {
    const slow = fakeBlueprint({ name: 'slow', type: 'host', delays: { activateLease: 2_500 } });
    const broker = await realBroker({ blueprints: [slow], sweepInterval: { milliseconds: 100 } });
    const lease = await broker.acquire({ type: 'host', owner: 'slow', ttl: { milliseconds: 1_000 }, keepAlive: { every: { milliseconds: 200 } } });
    expect(lease.status).toBe('active');
    expect(lease.signal.aborted).toBe(false);
    expect(slow.calls.activateLease).toBe(1);
    await lease.release();
    // Without keepAlive the same lease expires before it becomes active.
    await expect(broker.acquire({ type: 'host', owner: 'slow', ttl: { milliseconds: 1_000 } })).rejects.toThrow(/expired .* before it became active|expired at .* as it became active/);
    await broker.close();
  });
});

describeOnPostgres('renewal across two brokers on one schema', () => {
  test('a renewal applied as the expiry passes: the holder told it expired and the worker agree (the row lock orders them)', async () => {
    // The worker judges a renewal against the expiry and commits it a moment later; the
    // holder's signal reads the row at the expiry. An outside transaction holds the lease's
    // row lock so that the moment lasts: the worker is stopped at its write, the clock passes
    // the expiry, the signal reads. Judged before the lock, the renewal then committed after
    // the holder had been told the lease expired: an expired lease revived.
    const schema = freshSchema('race');
    const broker = await testBroker({ database: { url: tierUrl!, schema }, blueprints: [hosts()] });
    const lease = await broker.acquire({ type: 'host', owner: 'held', ttl: { minutes: 10 } });
    const signal = lease.signal;
    const outside = await lockHolder(tierUrl!, 'renewal-race');
    // The sessions that wait for the outside transaction's lock, or in line behind one that does.
    const waiters = () => outside.waiters({ queued: true });
    try {
      await outside.query(`SELECT 1 FROM ${schema}.leases WHERE id = $1 FOR UPDATE`, [lease.id]);
      await broker.extendLease(lease.id, { ttl: { minutes: 30 } }, { author: 'late', wait: false });
      const idle = broker.runUntilIdle();
      await waitFor(waiters, (n) => n >= 1, 'the worker to wait for the row lock');
      broker.clock.advance({ minutes: 11 });
      // The signal either aborted on a plain read, or waits for the row lock too.
      await waitFor(async () => signal.aborted || (await waiters()) >= 2, (done) => done, 'the signal to read the lease');
      await outside.commit();
      await idle;
      await waitFor(async () => signal.aborted, (done) => done, 'the signal to abort');
      expect(signal.reason.why).toBe('expired');
      const [command] = (await outside.query(`SELECT outcome FROM ${schema}.commands WHERE target_id = $1 AND command = 'extend'`, [lease.id])).rows;
      expect(command.outcome).toMatch(/^rejected: lease expired at /);
      await broker.runUntilIdle();
      expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
      expect(await broker.logs({ lease: lease.id, type: 'lease.extended' })).toEqual([]);
    } finally {
      await outside.end();
    }
    await broker.close();
  });

  test('real clock, createBroker: a renewal held at its write while the expiry passes is refused, and the holder was told it expired', async () => {
    const schema = freshSchema('racereal');
    const broker = track(await createBroker({ database: { url: tierUrl!, schema }, blueprints: [hosts()], sweepInterval: { milliseconds: 200 } }));
    const lease = await broker.acquire({ type: 'host', owner: 'held', ttl: { seconds: 3 } });
    const signal = lease.signal;
    const outside = await lockHolder(tierUrl!, 'renewal-race-real');
    const blocked = () => outside.waiters();
    try {
      await outside.query(`SELECT 1 FROM ${schema}.leases WHERE id = $1 FOR UPDATE`, [lease.id]);
      await broker.extendLease(lease.id, { ttl: { minutes: 5 } }, { author: 'late', wait: false });
      await waitFor(blocked, (n) => n >= 1, "the broker's worker to wait for the row lock");
      // The expiry passes on the real clock while the renewal is held at its write.
      await sleep(Math.max(0, lease.expiresAt!.toMillis() - Date.now()) + 500);
      await outside.commit();
      const [command] = (
        await waitFor(async () => (await outside.query(`SELECT outcome FROM ${schema}.commands WHERE target_id = $1 AND command = 'extend'`, [lease.id])).rows, (rows) => rows[0]?.outcome != null, 'the renewal to be judged')
      );
      // The signal's read waited for the same row lock: it may finish just after the worker's
      // judgement. Either order, the holder is told the lease expired.
      await waitFor(async () => signal.aborted, (done) => done, 'the signal to abort');
      expect(signal.reason.why).toBe('expired');
      expect(command.outcome).toMatch(/^rejected: lease expired at /);
      await waitFor(async () => (await broker.leases.get(lease.id))!.status, (st) => st === 'destroyed', 'the expired lease to be destroyed');
    } finally {
      await outside.end();
    }
    await broker.close();
  });

  test('an operator broker extends a lease held through another; the holder\'s signal learns the new expiry', async () => {
    const database: DatabaseOptions = { url: tierUrl!, schema: freshSchema('two'), poolSize: 4 };
    const holderBroker = track(await createBroker({ database, blueprints: [hosts()], sweepInterval: { milliseconds: 200 } }));
    const operator = track(await createBroker({ database, workers: false, sweepInterval: { milliseconds: 200 } }));
    // A ttl of seconds: on a loaded machine an acquire can take most of a second, and an
    // extend that came after the expiry is refused (as it should be).
    const lease = await holderBroker.acquire({ type: 'host', owner: 'held', ttl: { seconds: 2 } });
    const signal = lease.signal;
    const oldExpiry = lease.expiresAt!.toMillis();
    const until = await operator.extendLease(lease.id, { ttl: { seconds: 6 } }, { author: 'operator' });
    expect(until.toMillis()).toBeGreaterThan(Date.now() + 5_000);
    // Past the old expiry, which the holder's signal read and found moved.
    await sleep(Math.max(0, oldExpiry - Date.now()) + 1_000);
    expect(signal.aborted).toBe(false);
    expect((await operator.leases.get(lease.id))!.status).toBe('active');
    await lease.release();
    await operator.close();
    await holderBroker.close();
  });
});

const fixture = fileURLToPath(new URL('./fixtures/keepalive-child.ts', import.meta.url));

function holder(database: DatabaseOptions, ttlMs: number, everyMs: number): { child: ChildProcess; out: () => string; waitFor(pattern: RegExp): Promise<RegExpExecArray> } {
  const child = fork(fixture, [JSON.stringify(database), String(ttlMs), String(everyMs)], { execPath: process.execPath, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  let out = '';
  child.stdout!.on('data', (chunk) => (out += chunk));
  child.stderr!.on('data', (chunk) => (out += chunk));
  return {
    child,
    out: () => out,
    async waitFor(pattern) {
      const deadline = Date.now() + 60_000;
      for (;;) {
        const match = pattern.exec(out);
        if (match) return match;
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the holder never printed ${pattern}; output: ${out}`);
        await sleep(20);
      }
    },
  };
}

function killed(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

describe('a holder SIGKILLed under keepalive', () => {
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

  test('its lease outlives its ttl while it runs, then expires a ttl after it died, not at some far expiry', async () => {
    const ttl = 1_500;
    let database: DatabaseOptions;
    if (tier === 'postgres') database = { url: tierUrl!, schema: freshSchema('killed'), poolSize: 2 };
    else {
      const dir = mkdtempSync(join(tmpdir(), 'slipway-keepalive-'));
      dirs.push(dir);
      database = { embedded: true, dataDir: dir };
    }
    const proc = holder(database, ttl, 300);
    let broker: Broker | undefined;
    try {
      const id = (await proc.waitFor(/holding (\S+)/))[1]!;
      // Three ttls after it was acquired, the holder still has it, thanks to its renewals.
      await proc.waitFor(/after three ttls: (\w+), signal (\w+)/);
      expect(proc.out()).toMatch(/after three ttls: active, signal live/);
      await killed(proc.child);
      const killedAt = Date.now();
      // Another broker (on embedded: the data directory's next process) runs the lease's worker.
      broker = track(await createBroker({ database, blueprints: [hosts()], sweepInterval: { milliseconds: 200 } }));
      const row = await waitFor(() => broker!.leases.get(id), (l) => l!.status === 'destroyed', 'the lease of the killed holder to expire and be destroyed', 30_000);
      const [expired] = await broker.logs({ lease: id, type: 'lease.expired' });
      const expiredAt = DateTime.fromISO(expired!.data.at as string).toMillis();
      // The last renewal came at most one interval before the kill: the expiry lies within a ttl of it.
      expect(expiredAt).toBeLessThanOrEqual(killedAt + ttl + 50);
      expect(expiredAt).toBeGreaterThan(killedAt - 300 - 50);
      expect(row!.brokenReason).toBeNull();
      expect((await broker.logs({ lease: id, type: 'lease.extended' }))[0]!.count).toBeGreaterThanOrEqual(5);
    } finally {
      await killed(proc.child);
      await broker?.close();
    }
  }, 90_000);
});
