import { DateTime } from 'luxon';
import {
  defineBlueprint,
  HookTimeoutError,
  LeaseBrokenError,
  MAX_HOOK_TIMEOUT,
  type BlueprintImplementation,
  type BlueprintLimits,
  type Clock,
  type HookTimeouts,
  type LogEntry,
} from '../lib/index.js';
import { fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';
import { pump, rows } from './helpers/pump.js';

guardBrokers();

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `done` in real time until it holds, or fails naming `what`: for a hook to be reached while the workers run on their own. */
async function waitFor(done: () => boolean | Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

type AnyHook = (ctx: any) => unknown;

/** Waits until the leases have logged `n` failed allocations (the backoff that follows is then scheduled). */
const failedAllocations = (broker: TestBroker, n: number) =>
  waitFor(async () => (await broker.logs({ type: 'lease.allocation-failure' })).length >= n, `${n} failed allocation(s)`);

/** A blueprint of type `hostile` (or `type`) whose hooks are the given functions; allocateResource defaults to a well-behaved one. */
function hostile(name: string, hooks: Record<string, AnyHook>, options: { type?: string; timeouts?: HookTimeouts; limits?: BlueprintLimits } = {}) {
  const implementation = defineBlueprint({
    type: options.type ?? 'hostile',
    async allocateResource() {
      return { attributes: { built: true } };
    },
    ...hooks,
  } as BlueprintImplementation);
  return implementation({ name, timeouts: options.timeouts, limits: options.limits });
}

/**
 * A hook body for the first `times` calls never settles on its own and ignores its
 * `ctx.signal` (the hostile part); later calls return `then()`. Records each call's
 * signal and its start on the broker's clock.
 */
function hanging(times: number, then: () => unknown = () => undefined) {
  const calls: Array<{ signal: AbortSignal; at: number }> = [];
  const late: Array<(value: unknown) => void> = [];
  return {
    calls,
    fn: (ctx: { signal: AbortSignal; clock: Clock }) => {
      calls.push({ signal: ctx.signal, at: ctx.clock.now().toMillis() });
      if (calls.length > times) return Promise.resolve(then());
      return new Promise((resolve) => late.push(resolve));
    },
    reached: (n: number) => waitFor(() => calls.length >= n, `call ${n} of a hanging hook`),
    /** Settles every hung call now, long after its timeout: a late result. */
    settleLate: (value: unknown) => late.forEach((resolve) => resolve(value)),
  };
}

/** The hook.failure row of a timeout names the hook, the timeout and the code, in its data and its rendered message. */
function expectTimeoutLog(entry: LogEntry | undefined, hook: string, seconds: number) {
  expect(entry).toBeDefined();
  expect(entry!.data).toMatchObject({ hook, code: 'HOOK_TIMEOUT' });
  expect(entry!.message).toContain(`Hook ${hook} failed`);
  expect(entry!.message).toContain(`did not finish within ${seconds} seconds`);
  expect(entry!.message).toContain(`timeouts.${hook}`);
  expect(entry!.message).toContain('[HOOK_TIMEOUT]');
}

/** Nothing half-done is left: no unconsumed command, no claim, no object in a transitional state, no engine error. */
/**
 * acquire() on a blueprint whose activateLease hangs: the hook is not aborted 1 ms before
 * its timeout and is at it. Resolves with what acquire() rejected with.
 */
async function acquireUntilActivateTimeout(broker: TestBroker, activate: ReturnType<typeof hanging>, timeoutMs: number): Promise<unknown> {
  const acquiring = broker.acquire({ type: 'hostile' }).catch((e: unknown) => e);
  const idle = broker.runUntilIdle();
  await activate.reached(1);
  broker.clock.advance({ milliseconds: timeoutMs - 1 });
  expect(activate.calls[0]!.signal.aborted).toBe(false);
  broker.clock.advance({ milliseconds: 1 });
  expect(activate.calls[0]!.signal.aborted).toBe(true);
  await idle;
  return acquiring;
}

async function expectNothingStuck(broker: TestBroker) {
  expect(await rows(broker, (s) => `SELECT id, command, target_id FROM ${s}.commands WHERE consumed_at IS NULL`)).toEqual([]);
  expect(await rows(broker, (s) => `SELECT object_kind, object_id FROM ${s}.work_items WHERE claimed_by IS NOT NULL`)).toEqual([]);
  expect(await rows(broker, (s) => `SELECT id, status FROM ${s}.resources WHERE status NOT IN ('active', 'destroyed')`)).toEqual([]);
  expect(await rows(broker, (s) => `SELECT id, status FROM ${s}.leases WHERE status NOT IN ('active', 'destroyed')`)).toEqual([]);
  expect(engineErrors(broker)).toEqual([]);
}

// DESIGN "Blueprint contract" and the `timeouts` blueprint option: a hook that never settles
// is cut off on the broker's clock, counted as a failure of that hook, and told so through
// ctx.signal. Whatever it returns later is ignored.
describe('hooks that never resolve are bounded by their timeouts', () => {
  test('a query hook (canAllocate) that never answers: cut off at timeouts.canAllocate, the lease breaks with a HOOK_TIMEOUT failure, and no other blueprint builds for it', async () => {
    const hang = hanging(1, () => true);
    const bp = hostile('q', { canAllocate: hang.fn }, { timeouts: { canAllocate: 'PT2S' } });
    // A second candidate of the same type, asked after q: it must not build a resource for the broken lease.
    const other = fakeBlueprint({ name: 'other', type: 'hostile' });
    const broker = await testBroker({ blueprints: [bp, other] });
    const acquiring = broker.acquire({ type: 'hostile' }).catch((e: unknown) => e);
    const idle = broker.runUntilIdle();
    await hang.reached(1);
    const { signal } = hang.calls[0]!;
    broker.clock.advance({ milliseconds: 1999 });
    expect(signal.aborted).toBe(false);
    broker.clock.advance({ milliseconds: 1 });
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(HookTimeoutError);
    expect((signal.reason as HookTimeoutError).code).toBe('HOOK_TIMEOUT');
    await idle;

    const error = await acquiring;
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect((error as Error).message).toMatch(/q\.canAllocate failed: did not finish within 2 seconds/);
    const [lease] = await broker.leases.list();
    const failures = await broker.logs({ lease: lease!.id, type: 'hook.failure' });
    expect(failures).toHaveLength(1);
    expectTimeoutLog(failures[0], 'canAllocate', 2);
    expect(failures[0]!.data.retry).toBe(false);
    expect(await broker.resources.list()).toEqual([]);
    expect(other.calls.canAllocate).toBe(0);
    expect(await broker.logs({ lease: lease!.id, type: 'lease.waiting-for-resources' })).toEqual([]);

    // its answer, long after, changes nothing
    hang.settleLate(true);
    await broker.runUntilIdle();
    expect((await broker.leases.get(lease!.id))!.status).toBe('destroyed');
    expect(await broker.resources.list()).toEqual([]);
    await expectNothingStuck(broker);
    await broker.close();
  });

  test('allocateResource, then activateResource, never settle: each resource breaks at its timeout, the lease is served by a third, late results are ignored', async () => {
    const allocate = hanging(1, () => ({ attributes: { built: true } }));
    const activate = hanging(1);
    const destroyed: string[] = [];
    const bp = hostile(
      'r',
      { allocateResource: allocate.fn, activateResource: activate.fn, destroyResource: (ctx) => void destroyed.push(ctx.resource.id) },
      { timeouts: { allocateResource: { seconds: 5 }, activateResource: 'PT5S' } },
    );
    const broker = await testBroker({ blueprints: [bp] });
    const handle = await broker.requestLease({ type: 'hostile' });
    const idle = broker.runUntilIdle();
    await allocate.reached(1);
    broker.clock.advance({ seconds: 5 });
    expect(allocate.calls[0]!.signal.aborted).toBe(true);
    // a failed build: the lease and the blueprint back off 1 s, then the second resource builds, and its activation hangs
    await failedAllocations(broker, 1);
    broker.clock.advance({ seconds: 1 });
    await activate.reached(1);
    broker.clock.advance({ milliseconds: 4999 });
    expect(activate.calls[0]!.signal.aborted).toBe(false);
    broker.clock.advance({ milliseconds: 1 });
    expect(activate.calls[0]!.signal.aborted).toBe(true);
    expect(activate.calls[0]!.signal.reason).toBeInstanceOf(HookTimeoutError);
    await idle;
    // the second failure in a row: 2 s of backoff before the third resource
    await failedAllocations(broker, 2);
    await broker.advance({ seconds: 2 });

    expect(await handle.status()).toBe('active');
    const [first, second, third] = await broker.resources.list();
    expect(first!.status).toBe('destroyed');
    expect(first!.brokenReason).toMatch(/r\.allocateResource failed: did not finish within 5 seconds/);
    expect(second!.status).toBe('destroyed');
    expect(second!.brokenReason).toMatch(/r\.activateResource failed: did not finish within 5 seconds/);
    expect(third!.status).toBe('active');
    expect((await broker.leases.get(handle.id))!.resourceId).toBe(third!.id);
    expectTimeoutLog((await broker.logs({ resource: first!.id, type: 'hook.failure' }))[0], 'allocateResource', 5);
    expectTimeoutLog((await broker.logs({ resource: second!.id, type: 'hook.failure' }))[0], 'activateResource', 5);
    // what the cut-off hooks may have built is torn down (destroyResource is idempotent)
    expect(destroyed.sort()).toEqual([first!.id, second!.id].sort());

    // the hung hooks finish long after their timeouts: nothing of theirs is written
    allocate.settleLate({ attributes: { late: true } });
    activate.settleLate({ attributes: { late: true } });
    await broker.advance({ minutes: 1 });
    const after = await broker.resources.list();
    expect(after.map((r) => r.status)).toEqual(['destroyed', 'destroyed', 'active']);
    for (const r of after) expect(r.attributes).not.toHaveProperty('late');
    await expectNothingStuck(broker);
    await broker.close();
  });

  test('activateLease never settles: the lease breaks at timeouts.activateLease; its resource is unharmed and serves the next lease', async () => {
    const activate = hanging(1);
    const bp = hostile('l', { activateLease: activate.fn }, { timeouts: { activateLease: { seconds: 5 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const error = await acquireUntilActivateTimeout(broker, activate, 5000);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect((error as Error).message).toMatch(/l\.activateLease failed: did not finish within 5 seconds/);
    const [lease] = await broker.leases.list();
    const [failure] = await broker.logs({ lease: lease!.id, type: 'hook.failure' });
    expectTimeoutLog(failure, 'activateLease', 5);
    const [resource] = await broker.resources.list();
    expect(resource!.status).toBe('active');
    expect(failure!.resource).toBe(resource!.id);

    const next = await pump(broker, broker.acquire({ type: 'hostile' }));
    expect(next.resource.id).toBe(resource!.id);
    activate.settleLate({ attributes: { late: true } });
    await broker.runUntilIdle();
    const first = (await broker.leases.get(lease!.id))!;
    expect(first.status).toBe('destroyed');
    expect(first.attributes).not.toHaveProperty('late');
    await expectNothingStuck(broker);
    await broker.close();
  });

  test('the longest timeout a config may give (MAX_HOOK_TIMEOUT, 24 hours) still fires on time; anything longer, up to an overflowing 1e17 ms, is refused when the blueprint is configured', async () => {
    expect(MAX_HOOK_TIMEOUT.toMillis()).toBe(24 * 60 * 60 * 1000);
    for (const timeouts of [{ activateLease: MAX_HOOK_TIMEOUT.plus({ milliseconds: 1 }) }, { default: 1e17 }, { destroyResource: 'P7D' }]) {
      const field = `timeouts.${Object.keys(timeouts)[0]}`;
      expect(() => hostile('too-long', {}, { timeouts })).toThrow(expect.objectContaining({ code: 'INVALID_INPUT', field }));
    }

    const activate = hanging(1);
    const bp = hostile('day', { activateLease: activate.fn }, { timeouts: { activateLease: MAX_HOOK_TIMEOUT } });
    const broker = await testBroker({ blueprints: [bp] });
    const error = await acquireUntilActivateTimeout(broker, activate, MAX_HOOK_TIMEOUT.toMillis());
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect((error as Error).message).toMatch(/day\.activateLease failed: did not finish within 86400 seconds/);
    await broker.close();
  });

  test('destroyLease and destroyResource that hang are cut off and retried with backoff until they succeed, never abandoned', async () => {
    const destroyLease = hanging(2);
    const destroyResource = hanging(2);
    const bp = hostile('d', { destroyLease: destroyLease.fn, destroyResource: destroyResource.fn }, { timeouts: { destroyLease: 'PT5S', destroyResource: { seconds: 5 } } });
    const broker = await testBroker({ blueprints: [bp] }); // backoff 1 s, 2 s, 4 s ... 5 min
    const lease = await pump(broker, broker.acquire({ type: 'hostile' }));
    const resourceId = lease.resource.id;
    await broker.releaseResource(resourceId);

    /** Runs the workers to the nth call of a hanging hook, lets its timeout pass, and waits for the failure to be recorded. */
    const timeOut = async (hook: ReturnType<typeof hanging>, n: number) => {
      const idle = broker.runUntilIdle();
      await hook.reached(n);
      broker.clock.advance({ seconds: 5 });
      await idle;
      expect(hook.calls[n - 1]!.signal.aborted).toBe(true);
    };
    await timeOut(destroyLease, 1); // retried 1 s later
    broker.clock.advance({ seconds: 1 });
    await timeOut(destroyLease, 2); // retried 2 s later
    await broker.advance({ milliseconds: 1999 });
    expect(destroyLease.calls).toHaveLength(2);
    expect((await broker.leases.get(lease.id))!.status).toBe('released');
    broker.clock.advance({ milliseconds: 1 });
    // the third destroyLease succeeds; the lease is destroyed and the resource's destroy starts, and hangs
    await timeOut(destroyResource, 1);
    expect((await broker.leases.get(lease.id))!.status).toBe('destroyed');
    broker.clock.advance({ seconds: 1 });
    await timeOut(destroyResource, 2);
    expect((await broker.resources.get(resourceId))!.status).toBe('released');
    await broker.advance({ seconds: 2 });
    expect(destroyResource.calls).toHaveLength(3);
    expect((await broker.resources.get(resourceId))!.status).toBe('destroyed');

    // on the broker's clock: each retry starts after the timeout (5 s) plus the backoff (1 s, then 2 s)
    const gaps = (h: ReturnType<typeof hanging>) => h.calls.slice(1).map((c, i) => c.at - h.calls[i]!.at);
    expect(gaps(destroyLease)).toEqual([6000, 7000]);
    expect(gaps(destroyResource)).toEqual([6000, 7000]);
    for (const [filter, hook] of [[{ lease: lease.id }, 'destroyLease'], [{ resource: resourceId }, 'destroyResource']] as const) {
      const failures = (await broker.logs({ ...filter, type: 'hook.failure' })).filter((f) => f.data.hook === hook);
      expect(failures.map((f) => [f.data.hook, f.data.retry, f.data.attempt])).toEqual([
        [hook, true, 1],
        [hook, true, 2],
      ]);
      for (const f of failures) {
        expectTimeoutLog(f, hook, 5);
        expect(f.message).toMatch(/; retry [12] at 2030-/);
      }
    }
    await expectNothingStuck(broker);
    await broker.close();
  });
});

// DESIGN "Blueprint contract": anything a hook throws other than RetryLater breaks the object
// with its cause recorded; destroy hooks are retried. JavaScript lets a hook throw anything.
const cyclic: Record<string, unknown> = { name: 'loop' };
cyclic.self = cyclic;
const bareCyclic: Record<string, unknown> = Object.create(null);
bareCyclic.self = bareCyclic;
const explode = () => {
  throw new Error('exploded while being described');
};
// Every way of turning it into text throws.
const unprintable = { toString: explode, toJSON: explode, valueOf: explode, [Symbol.toPrimitive]: explode };
const revoked = Proxy.revocable({}, {});
revoked.revoke();

/** [what is thrown, a factory for it, how it must read in the log (a regex source)] */
const THROWN: Array<[string, () => unknown, string]> = [
  ['a string', () => 'quota exceeded', 'quota exceeded'],
  ['a string Postgres cannot store (NUL, lone surrogate)', () => 'bad\u0000byte \uD800', 'bad\\\\u0000byte \uFFFD'],
  ['a number', () => 42, '42'],
  ['null', () => null, 'null'],
  ['undefined', () => undefined, 'undefined'],
  ['a plain object', () => ({ reason: 'no capacity', code: 'E_FULL' }), '\\{"reason":"no capacity","code":"E_FULL"\\}'],
  ['a Symbol', () => Symbol('hostile'), 'Symbol\\(hostile\\)'],
  ['an object whose toString (and toJSON, valueOf, toPrimitive) throws', () => unprintable, '\\{ toString: \\[Function: explode\\]'],
  ['a cyclic object', () => cyclic, "<ref \\*1> \\{ name: 'loop', self: \\[Circular \\*1\\] \\}"],
  ['a cyclic object with no prototype', () => bareCyclic, '<ref \\*1> \\[Object: null prototype\\] \\{ self: \\[Circular \\*1\\] \\}'],
  ['a revoked Proxy', () => revoked.proxy, '<Revoked Proxy>'],
];

const byBrokenFirst = <T extends { brokenReason: string | null }>(list: T[]) => [...list].sort((a, b) => Number(a.brokenReason === null) - Number(b.brokenReason === null));

describe('hooks that throw values that are not Errors', () => {
  // One broker, one blueprint (and type) per value, all driven in step: a diff below names the value.
  test('each value is logged readably, breaks what it should, destroys that throw it are retried, and the engine carries on', async () => {
    const cases = THROWN.map(([what, value, readable], i) => {
      const name = `t${i}`;
      const bp = fakeBlueprint({ name, type: name, failures: { allocateResource: { throws: value, times: 1 }, activateLease: { throws: value, times: 1 } } });
      return { what, value, readable, name, bp };
    });
    const broker = await testBroker({ blueprints: cases.map((c) => c.bp) }); // backoff from 1 s
    // allocateResource throws: that resource breaks; after its 1 s backoff the lease gets a second one, where activateLease throws: the lease breaks
    const firsts = cases.map((c) => broker.acquire({ type: c.name }).catch((e: unknown) => e));
    await broker.runUntilIdle();
    await broker.advance({ seconds: 1 });
    const errors = await Promise.all(firsts);
    // then destroy hooks throw it once: the destroys are retried after their backoff and succeed
    for (const c of cases) {
      c.bp.fail('destroyLease', { throws: c.value, times: 1 });
      c.bp.fail('destroyResource', { throws: c.value, times: 1 });
    }
    const seconds = await pump(broker, Promise.all(cases.map((c) => broker.acquire({ type: c.name }))));
    for (const lease of seconds) await broker.releaseResource(lease.resource.id);
    await broker.runUntilIdle();
    const midway = await broker.leases.list({ status: 'released' });
    await broker.advance({ seconds: 1 });
    await broker.advance({ seconds: 1 });

    const observed: Record<string, unknown> = {};
    const expected: Record<string, unknown> = {};
    for (const [i, c] of cases.entries()) {
      const reads = (hook: string, prefix = '') => expect.stringMatching(new RegExp(`^${prefix}${c.name}\\.${hook} failed: ${c.readable}`));
      const error = errors[i];
      observed[c.what] = {
        acquire: error instanceof LeaseBrokenError ? error.message.replace(/^lease \S+ broke: /, '') : error,
        leases: (await broker.leases.list({ type: c.name })).map((l) => [l.status, l.brokenReason]),
        resources: byBrokenFirst(await broker.resources.list({ blueprint: c.name })).map((r) => [r.status, r.brokenReason]),
        failures: (await broker.logs({ blueprint: c.name, type: 'hook.failure' })).map((f) => [f.data.hook, f.data.retry, f.message]),
      };
      expected[c.what] = {
        acquire: reads('activateLease'),
        leases: [['destroyed', reads('activateLease')], ['destroyed', null]],
        resources: [['destroyed', reads('allocateResource')], ['destroyed', null]],
        // The log entry names the hook once: "Hook x failed: <what was thrown>", no "<blueprint>.x failed:" again.
        failures: ['allocateResource', 'activateLease', 'destroyLease', 'destroyResource'].map((hook) => [hook, hook.startsWith('destroy'), expect.stringMatching(new RegExp(`^Hook ${hook} failed: ${c.readable}`))]),
      };
    }
    expect(observed).toEqual(expected);
    // the second leases were still being destroyed (their destroyLease threw) before the clock moved
    expect(midway.map((l) => l.id).sort()).toEqual(seconds.map((l) => l.id).sort());
    await expectNothingStuck(broker);
    await broker.close();
  });
});

// DESIGN "Blueprint contract": hooks return data and the library does every write. A value
// of the wrong shape is that hook's failure, and nothing of it reaches the database.
class Vm {
  poison = 'vm-1';
}
const cyclicAttributes: Record<string, unknown> = { poison: 1 };
cyclicAttributes.self = cyclicAttributes;

type Effect = 'the lease breaks' | 'the resource breaks';
/** [hook, what it returns, the value, what the failure says (a regex source), what breaks] */
const MALFORMED: Array<[string, string, unknown, string, Effect]> = [
  ['canEverAllocate', 'a number', 1, 'a number where a boolean was expected', 'the lease breaks'],
  ['canAllocate', 'a string', 'yes', 'a string where a boolean was expected', 'the lease breaks'],
  ['canAcquireLease', 'an object', { poison: true }, 'an? Object where a boolean was expected', 'the lease breaks'],
  ['allocateResource', 'a number', 42, 'a number where nothing or \\{ attributes \\} was expected', 'the resource breaks'],
  ['activateResource', 'an array', [{ poison: 1 }], 'an? array where nothing or \\{ attributes \\} was expected', 'the resource breaks'],
  ['allocateResource', 'a class instance', new Vm(), 'a Vm where nothing or \\{ attributes \\} was expected', 'the resource breaks'],
  ['activateResource', 'an object with an unknown key', { attributes: {}, poison: 1 }, 'unknown key\\(s\\) poison \\(only attributes is allowed\\)', 'the resource breaks'],
  ['allocateResource', 'attributes with a function', { attributes: { poison: () => 1 } }, 'attributes that are not JSON \\(attributes\\.poison: is not JSON: a function\\)', 'the resource breaks'],
  ['activateResource', 'attributes with NaN', { attributes: { poison: NaN } }, 'attributes that are not JSON \\(attributes\\.poison: is not JSON: NaN\\)', 'the resource breaks'],
  ['allocateResource', 'attributes with a cycle', { attributes: cyclicAttributes }, 'attributes that are not JSON \\(attributes\\.self: is not JSON: it contains a cycle\\)', 'the resource breaks'],
  ['activateResource', 'attributes with a class instance', { attributes: { poison: new Date(0) } }, 'attributes that are not JSON \\(attributes\\.poison: is not JSON: a Date instance\\)', 'the resource breaks'],
  ['acquireLease', 'attributes that are an array', { attributes: ['poison'] }, 'attributes that are not a plain object', 'the lease breaks'],
  ['activateLease', 'attributes with a bigint', { attributes: { poison: 10n } }, 'attributes that are not JSON \\(attributes\\.poison: is not JSON: a bigint\\)', 'the lease breaks'],
];

describe('hooks that return malformed data', () => {
  // One broker, one blueprint (and type) per case, all at once: a diff below names the case.
  test('each is a failure of that hook with a clear message (HOOK_MALFORMED_RESULT); nothing malformed is written', async () => {
    const cases = MALFORMED.map(([hook, what, value, says, effect], i) => {
      let calls = 0;
      const good = hook.startsWith('can') ? true : { attributes: { good: true } };
      const name = `m${i}`;
      // Malformed on the first call only: when a resource breaks, its lease is served by a second one.
      const bp = hostile(name, { [hook]: () => (calls++ === 0 ? value : good) }, { type: name });
      return { title: `${hook} returns ${what}`, hook, says, effect, name, bp };
    });
    const broker = await testBroker({ blueprints: cases.map((c) => c.bp) });
    const outcomes = cases.map((c) => broker.acquire({ type: c.name }).then((lease) => lease.status, (e: unknown) => e));
    await broker.runUntilIdle();
    // A broken resource is a failed build: its blueprint and its lease back off 1 s before the second.
    await broker.advance({ seconds: 1 });
    const settled = await Promise.all(outcomes);

    const observed: Record<string, unknown> = {};
    const expected: Record<string, unknown> = {};
    for (const [i, c] of cases.entries()) {
      const failure = `${c.name}\\.${c.hook} failed: returned .*${c.says}`;
      const outcome = settled[i];
      const resources = byBrokenFirst(await broker.resources.list({ blueprint: c.name }));
      observed[c.title] = {
        acquire: outcome instanceof LeaseBrokenError ? outcome.message.replace(/^lease \S+ broke: /, '') : outcome,
        resources: resources.map((r) => [r.status, r.brokenReason]),
        failures: (await broker.logs({ blueprint: c.name, type: 'hook.failure' })).map((f) => [f.data.hook, f.data.code, f.data.retry, f.message]),
      };
      const breaksLease = c.effect === 'the lease breaks';
      expected[c.title] = {
        acquire: breaksLease ? expect.stringMatching(new RegExp(`^${failure}`)) : 'active',
        resources: c.hook.startsWith('can') && c.hook !== 'canAcquireLease' ? [] : breaksLease ? [['active', null]] : [['destroyed', expect.stringMatching(new RegExp(`^${failure}`))], ['active', null]],
        failures: [[c.hook, 'HOOK_MALFORMED_RESULT', false, expect.stringMatching(new RegExp(`^Hook ${c.hook} failed: returned .*${c.says} \\[HOOK_MALFORMED_RESULT\\]\\.$`))]],
      };
    }
    expect(observed).toEqual(expected);
    // nothing of a malformed value reached a resource or a lease row
    const stored = await rows(broker, (s) => `SELECT id, attributes::text AS a FROM ${s}.resources UNION ALL SELECT id, attributes::text FROM ${s}.leases`);
    expect(stored.filter((r) => r.a.includes('poison'))).toEqual([]);

    for (const lease of await broker.leases.list({ status: 'active' })) await broker.release(lease.id);
    await broker.runUntilIdle();
    await expectNothingStuck(broker);
    await broker.close();
  });
});

// LESSONS (GARM): a provider whose deletes keep failing must be seen, retried without end at
// a bounded rate, and must not stall the rest of the pool.
describe('a blueprint whose destroy keeps failing', () => {
  test('is retried with capped backoff (1, 2, 4, 8, 8, 8 s ...), shows as stuck in stats(), while leases of a healthy blueprint keep cycling', async () => {
    const attempts: number[] = [];
    const flaky = hostile(
      'flaky',
      {
        destroyResource: (ctx) => {
          attempts.push(ctx.clock.now().toMillis());
          throw new Error('cloud API answered 503');
        },
      },
      { type: 'flaky' },
    );
    const healthy = fakeBlueprint({ name: 'healthy', type: 'healthy' });
    const broker = await testBroker({ blueprints: [flaky, healthy], backoff: { initial: { seconds: 1 }, max: { seconds: 8 } } });
    const doomed = await pump(broker, broker.acquire({ type: 'flaky' }));
    const stuck = doomed.resource.id;
    await pump(broker, doomed.release());
    await broker.releaseResource(stuck);
    await broker.runUntilIdle();
    const start = broker.clock.now().toMillis();
    expect(attempts).toEqual([start]);

    // Between retries a healthy lease is acquired and released; the clock then stops just
    // before each retry is due (nothing happens) and at it (one more attempt).
    for (let retry = 1; retry <= 7; retry++) {
      const lease = await pump(broker, broker.acquire({ type: 'healthy' }));
      await pump(broker, lease.release());
      const [last] = (await broker.logs({ resource: stuck, type: 'hook.failure' })).slice(-1);
      const retryAt = DateTime.fromISO(String(last!.data.retryAt));
      broker.clock.set(retryAt.minus({ milliseconds: 1 }));
      await broker.runUntilIdle();
      expect(attempts).toHaveLength(retry);
      broker.clock.set(retryAt);
      await broker.runUntilIdle();
      expect(attempts).toHaveLength(retry + 1);
    }
    const gaps = attempts.slice(1).map((at, i) => at - attempts[i]!);
    expect(gaps).toEqual([1000, 2000, 4000, 8000, 8000, 8000, 8000]);
    expect((await broker.resources.get(stuck))!.status).toBe('released');
    const failures = await broker.logs({ resource: stuck, type: 'hook.failure' });
    expect(failures.map((f) => f.data.attempt)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(failures.every((f) => f.data.retry === true && /cloud API answered 503/.test(f.message))).toBe(true);

    const stats = await broker.stats();
    expect(stats.blueprints.flaky).toMatchObject({ live: 0, allocating: 0, deletionLane: 1, destroying: 1 });
    expect(stats.blueprints.flaky!.resources.released).toBe(1);
    expect(stats.blueprints.flaky!.oldestAgeMs.destroying).toBe(39_000);
    expect(stats.blueprints.flaky!.oldestAgeMs.released).toBe(39_000);
    expect(stats.blueprints.healthy).toMatchObject({ live: 1, deletionLane: 0, destroying: 0 });
    expect(stats.types.healthy!.leases.destroyed).toBe(7);
    expect(stats.types.healthy!.deletionLane).toBe(0);
    expect(healthy.calls.allocateResource).toBe(1);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('while one blueprint\'s destroy hangs in flight (until its timeout), another blueprint\'s leases are served without waiting for it', async () => {
    const destroy = hanging(1);
    const flaky = hostile('flaky', { destroyResource: destroy.fn }, { type: 'flaky', timeouts: { destroyResource: { minutes: 10 } } });
    const healthy = fakeBlueprint({ name: 'healthy', type: 'healthy' });
    const broker = await testBroker({ blueprints: [flaky, healthy] });
    const doomed = await pump(broker, broker.acquire({ type: 'flaky' }));
    await pump(broker, doomed.release());
    await broker.releaseResource(doomed.resource.id);
    const idle = broker.runUntilIdle();
    await destroy.reached(1);
    // the workers run on their own wake-ups here (runUntilIdle would wait for the hung hook)
    for (let i = 0; i < 5; i++) {
      const lease = await broker.acquire({ type: 'healthy' });
      await lease.release();
    }
    expect(destroy.calls).toHaveLength(1);
    expect(destroy.calls[0]!.signal.aborted).toBe(false);
    expect((await broker.stats()).types.healthy!.leases.destroyed).toBe(5);
    broker.clock.advance({ minutes: 10 });
    await idle;
    expect(destroy.calls[0]!.signal.aborted).toBe(true);
    await broker.advance({ seconds: 1 });
    expect((await broker.resources.get(doomed.resource.id))!.status).toBe('destroyed');
    await expectNothingStuck(broker);
    await broker.close();
  });
});

// Issue 9, bug 7: a policy function that throws is the blueprint's failure, like a hook's;
// one that returns nonsense must not disable the rate limit.
describe('policy functions that throw or return nonsense', () => {
  test('limits.allocationLimit throwing: a hook.failure per try, backed off, and the lease breaks after maxAllocationFailures', async () => {
    const bp = hostile('policy', {}, {
      limits: {
        allocationLimit: () => {
          throw new TypeError('quota lookup failed');
        },
      },
    });
    const broker = await testBroker({ blueprints: [bp], maxAllocationFailures: 2 });
    const outcome = broker.acquire({ type: 'hostile' }).catch((e: unknown) => e);
    await broker.runUntilIdle();
    expect((await broker.logs({ type: 'hook.failure' })).map((l) => l.data.hook)).toEqual(['limits.allocationLimit']);
    // backed off: nothing more happens until the clock moves
    await broker.runUntilIdle();
    expect(await broker.logs({ type: 'hook.failure' })).toHaveLength(1);
    await broker.advance({ seconds: 1 });
    const error = await outcome;
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect((error as Error).message).toMatch(/allocation failed 2 times in a row; last: policy\.limits\.allocationLimit failed: quota lookup failed/);
    expect(await broker.resources.list()).toEqual([]);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test.each([['NaN', NaN], ['-1', -1], ['Infinity', Infinity], ['a string', 'many']])('limits.allocationLimit returning %s allocates one at a time', async (_, value) => {
    let allocating = 0;
    let most = 0;
    const bp = hostile('odd', {
      async allocateResource() {
        most = Math.max(most, ++allocating);
        await new Promise((r) => setTimeout(r, 20));
        allocating--;
        return { attributes: {} };
      },
    }, { limits: { allocationLimit: () => value as number, maxLeasesPerResource: 1 } });
    const broker = await testBroker({ blueprints: [bp] });
    const leases = await pump(broker, Promise.all(Array.from({ length: 4 }, () => broker.acquire({ type: 'hostile' }))));
    expect(leases).toHaveLength(4);
    expect(most).toBe(1);
    await broker.close();
  });
});
