import { defineBlueprint, LOG_TYPES, renderLog, RetryLater, type LogDataByType, type LogEntry, type LogType } from '../lib/index.js';
import { localHosts } from '../blueprints/index.js';
import { fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { guardBrokers, testBroker } from './helpers/broker.js';

guardBrokers();

const fallback = (type: string, data: object) => `${type} ${JSON.stringify(data)}`;

/** One sample per log type; typed by LogDataByType, so a new type without a sample fails to compile. */
const samples: { [T in LogType]: LogDataByType[T] } = {
  'lease.queued': { type: 'host', owner: 'ci', priority: 5 },
  'lease.acquired': { resource: 'res-1', blueprint: 'hosts' },
  'lease.activated': { resource: 'res-1' },
  'lease.waiting-for-resources': { reasons: ['hosts may build no more than 1 resource (maxResources), and none of them takes this lease now'], blueprints: ['hosts'] },
  'lease.allocation-failure': { blueprint: 'hosts', reason: 'quota', attempt: 2, retryAt: '2030-01-01T00:00:02.000Z' },
  'lease.reclaim': { resource: 'res-1', blueprint: 'hosts' },
  'lease.released': { reason: 'done', author: 'me' },
  'lease.expired': { at: '2030-01-01T00:00:00.000Z' },
  'lease.extended': { from: '2030-01-01T00:00:00.000Z', to: '2030-01-01T01:00:00.000Z', author: 'keepalive' },
  'lease.timeout': { timeout: '5 minutes' },
  'lease.broken': { reason: 'resource broke' },
  'lease.requeued': { resource: 'res-1', reason: 'it is broken' },
  'lease.destroyed': {},
  'lease.slot-lock-failure': { keys: ['slot:1'], resource: 'res-1' },
  'resource.allocating': { lease: 'lease-1' },
  'resource.allocated': {},
  'resource.activated': {},
  'resource.released': { reason: 'idle', author: null },
  'resource.reclaimed': { lease: 'lease-2' },
  'resource.broken': { reason: 'kernel panic' },
  'resource.destroyed': {},
  'resource.resume': { phase: 'activateResource', attempt: 2 },
  'resource.slot-lock-failure': { keys: ['host:h1'], phase: 'allocateResource', retryAt: '2030-01-01T00:00:02.000Z' },
  'hook.failure': { hook: 'activateResource', error: 'boom', code: 'E1', retry: true, attempt: 2, retryAt: '2030-01-01T00:00:02.000Z' },
  'hook.retry-later': { hook: 'allocateResource', reason: 'busy', retryAt: '2030-01-01T00:01:00.000Z' },
  'command.rejected': { command: 'reclaim', reason: 'resource is in use' },
  'status.changed': { kind: 'lease', from: 'pending', to: 'acquired' },
  'blueprint.note': { message: 'cloned in 3s' },
  'lease.waiting-for-authorization': { owner: 'build/42', inheritedFrom: null, blueprints: ['hosts'], declined: ['vms'] },
  'authorization.requested': { blueprint: 'hosts', owner: 'build/42', lease: 'lease-1', author: null },
  'authorization.authorized': { blueprint: 'hosts', owner: 'build/*', from: 'requested', author: 'alice' },
  'authorization.declined': { blueprint: 'hosts', owner: 'build/42', from: 'authorized', author: null },
  'blueprint.draining': { blueprint: 'hosts', idle: 2, author: 'ops' },
  'blueprint.resumed': { blueprint: 'hosts', author: null },
};

/** An exclusive blueprint that, unlike the fake, does not check leaseCount first: the slot lock is what refuses. */
const slotted = defineBlueprint({
  type: 'slotted',
  async allocateResource() {
    return { attributes: {} };
  },
  async acquireLease(ctx) {
    ctx.lockSlots([`seat:${ctx.resource.id}`]);
  },
});

function expectRendered(entries: LogEntry[]) {
  for (const e of entries) {
    expect(e.message).toBe(renderLog(e.type, e.data));
    expect(e.message).not.toBe(fallback(e.type, e.data));
  }
}

// The log types of lib/logs/log-types.ts: each has a renderer; the messages come from them.
describe('log types', () => {
  test('LOG_TYPES lists exactly the typed log types, and every one renders a real message', () => {
    expect([...LOG_TYPES].sort()).toEqual(Object.keys(samples).sort());
    for (const type of LOG_TYPES) {
      const data = samples[type] as Record<string, any>;
      const message = renderLog(type, data);
      expect(typeof message).toBe('string');
      expect(message.length).toBeGreaterThan(0);
      expect(message).not.toBe(fallback(type, data));
      expect(message).not.toMatch(/undefined|\[object Object\]/);
    }
  });

  test('renderers put the data in the message', () => {
    expect(renderLog('hook.failure', samples['hook.failure'])).toMatch(/activateResource.*boom.*E1/);
    expect(renderLog('lease.waiting-for-resources', samples['lease.waiting-for-resources'])).toMatch(/hosts.*maxResources/);
    expect(renderLog('resource.broken', samples['resource.broken'])).toMatch(/kernel panic/);
    expect(renderLog('lease.waiting-for-authorization', samples['lease.waiting-for-authorization'])).toBe(
      'Waiting for authorization of owner build/42 on blueprint hosts (declined on vms).',
    );
    expect(renderLog('authorization.authorized', samples['authorization.authorized'])).toBe('Owner build/* authorized on blueprint hosts by alice (was requested).');
    expect(renderLog('lease.slot-lock-failure', samples['lease.slot-lock-failure'])).toMatch(/slot:1/);
  });

  test('an unknown type falls back to type + data; a blueprint renderer wins; a throwing renderer falls back', () => {
    expect(renderLog('nope.never', { a: 1 })).toBe(fallback('nope.never', { a: 1 }));
    expect(renderLog('git.cloned', { ms: 3 }, { 'git.cloned': (d) => `cloned in ${d.ms} ms` })).toBe('cloned in 3 ms');
    expect(renderLog('git.cloned', { ms: 3 }, { 'git.cloned': () => { throw new Error('x'); } })).toBe(fallback('git.cloned', { ms: 3 }));
  });
});

async function typesOf(broker: TestBroker, filter: Parameters<TestBroker['logs']>[0] = {}) {
  return (await broker.logs(filter)).map((l) => l.type);
}

// Invariant 3: what happened is rows; invariant 5: waiting never writes a new row per poll.
describe('the logs a flow writes', () => {
  test('queued, allocation, acquired, activated, released, destroyed: each once, on the right objects, rendered', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake', owner: 'ci-job-7' });
    await broker.runUntilIdle();
    const lease = await acquiring;
    const releasing = lease.release();
    await broker.runUntilIdle();
    await releasing;
    await broker.releaseResource(lease.resource.id, { reason: 'test over', author: 'tester' });
    await broker.runUntilIdle();

    const leaseLog = (await typesOf(broker, { lease: lease.id })).filter((t) => t !== 'status.changed');
    // it waited (one row) for the resource it drives to activate
    expect(leaseLog).toEqual(['lease.queued', 'resource.allocating', 'lease.waiting-for-resources', 'lease.acquired', 'lease.activated', 'lease.released', 'lease.destroyed']);
    const changes = await broker.logs({ lease: lease.id, type: 'status.changed' });
    expect(changes.map((c) => `${c.data.from}→${c.data.to}`)).toEqual(['pending→acquired', 'acquired→active', 'active→released', 'released→destroyed']);
    const resourceLog = await typesOf(broker, { resource: lease.resource.id });
    expect(resourceLog).toEqual(expect.arrayContaining(['resource.allocating', 'resource.allocated', 'resource.activated', 'resource.released', 'resource.destroyed']));
    const [queued] = await broker.logs({ lease: lease.id, type: 'lease.queued' });
    expect(queued!.message).toMatch(/ci-job-7/);
    const [allocating] = await broker.logs({ type: 'resource.allocating' });
    expect(allocating!.resource).toBe(lease.resource.id);
    expect(allocating!.blueprint).toBe(bp.name);
    const [released] = await broker.logs({ resource: lease.resource.id, type: 'resource.released' });
    expect(released!.message).toBe('Resource released by tester (test over).');
    expectRendered(await broker.logs());
    await broker.close();
  });

  test('waiting-for-resources and slot-lock-failure: a lease refused by a held slot lock waits (one row), then is served', async () => {
    const bp = slotted({ name: 's', limits: { maxResources: 1 } });
    const broker = await testBroker({ blueprints: [bp] });
    const first = broker.acquire({ type: 'slotted' });
    await broker.runUntilIdle();
    const a = await first;
    const b = await broker.requestLease({ type: 'slotted' });
    await broker.runUntilIdle();
    expect(await b.status()).toBe('pending');

    const [failure] = await broker.logs({ lease: b.id, type: 'lease.slot-lock-failure' });
    expect(failure!.data).toEqual({ keys: [`seat:${a.resource.id}`], resource: a.resource.id });
    expect(failure!.resource).toBe(a.resource.id);
    expect(failure!.message).toMatch(new RegExp(`seat:${a.resource.id}`));
    const waits = await broker.logs({ lease: b.id, type: 'lease.waiting-for-resources' });
    expect(waits).toHaveLength(1);
    expect(waits[0]!.data.blueprints).toEqual(['s']);
    expect((waits[0]!.data.reasons as string[]).join(' ')).toMatch(/slot locks seat:/);
    expect(waits[0]!.message).toMatch(/Waiting for resources from s/);

    const releasing = a.release();
    await broker.runUntilIdle();
    await releasing;
    expect(await b.status()).toBe('active');
    expectRendered(await broker.logs());
    await broker.close();
  });

  test('ONE wait is ONE waiting-for-resources row whose count grows each waitRecheck (5 × 10 s → one row, count ≥ 5)', async () => {
    const bp = fakeBlueprint({ name: 'f', exclusive: true, limits: { maxResources: 1 } });
    const broker = await testBroker({ blueprints: [bp], waitRecheck: { seconds: 10 } });
    const first = broker.acquire({ type: 'fake' });
    await broker.runUntilIdle();
    await first;
    const waiting = await broker.requestLease({ type: 'fake' });
    await broker.runUntilIdle();
    const before = await broker.logs({ lease: waiting.id, type: 'lease.waiting-for-resources' });
    expect(before).toHaveLength(1);
    const countBefore = before[0]!.count;
    const calls = bp.calls.canAllocate;
    for (let i = 0; i < 5; i++) await broker.advance({ seconds: 10 });
    const after = await broker.logs({ lease: waiting.id, type: 'lease.waiting-for-resources' });
    expect(after).toHaveLength(1);
    expect(after[0]!.id).toBe(before[0]!.id);
    expect(after[0]!.count).toBeGreaterThanOrEqual(countBefore + 5);
    expect(after[0]!.count).toBeGreaterThanOrEqual(5);
    // it really looked again each time (the count is not made up)
    expect(bp.calls.canAllocate - calls).toBeGreaterThanOrEqual(5);
    expect(after[0]!.lastAt.toMillis() - after[0]!.at.toMillis()).toBeGreaterThanOrEqual(50_000);
    expect(await broker.logs({ lease: waiting.id })).toHaveLength(2); // queued + the one wait
    await broker.close();
  });

  test('reclaim: a lease that cannot use the idle resource at the cap reclaims it (lease.reclaim + resource.reclaimed)', async () => {
    const bp = fakeBlueprint({ name: 'f', limits: { maxResources: 1 }, answers: { canAcquireLease: (lease, resource) => (resource.builtFor as any)?.repo === (lease as any).repo } });
    const broker = await testBroker({ blueprints: [bp] });
    const first = broker.acquire({ type: 'fake', attributes: { repo: 'a' } });
    await broker.runUntilIdle();
    const a = await first;
    const releasing = a.release();
    await broker.runUntilIdle();
    await releasing;
    const second = broker.acquire({ type: 'fake', attributes: { repo: 'b' } });
    await broker.runUntilIdle();
    const b = await second;
    expect(b.resource.id).not.toBe(a.resource.id);
    const [reclaim] = await broker.logs({ lease: b.id, type: 'lease.reclaim' });
    expect(reclaim!.data).toEqual({ resource: a.resource.id, blueprint: 'f' });
    expect(reclaim!.message).toMatch(new RegExp(`Reclaiming idle resource ${a.resource.id}`));
    const [reclaimed] = await broker.logs({ resource: a.resource.id, type: 'resource.reclaimed' });
    expect(reclaimed!.data).toEqual({ lease: b.id });
    expect(await typesOf(broker, { resource: a.resource.id })).toContain('resource.destroyed');
    expectRendered(await broker.logs());
    await broker.close();
  });

  test('hook failure with its cause: hook.failure on the lease, and lease.broken with the reason', async () => {
    const bp = fakeBlueprint({ name: 'f', failures: { activateLease: { throws: Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' }) } } });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake' }).catch((e) => e);
    await broker.runUntilIdle();
    await acquiring;
    const [lease] = await broker.leases.list();
    const [failure] = await broker.logs({ lease: lease!.id, type: 'hook.failure' });
    expect(failure!.data).toMatchObject({ hook: 'activateLease', code: 'EACCES', retry: false });
    expect(failure!.data.error).toMatch(/EACCES: permission denied/);
    expect(failure!.message).toMatch(/Hook activateLease failed: .*EACCES: permission denied.*\[EACCES\]/);
    const [broken] = await broker.logs({ lease: lease!.id, type: 'lease.broken' });
    expect(broken!.message).toMatch(/permission denied/);
    expectRendered(await broker.logs());
    await broker.close();
  });

  test('log events carry the rendered entry', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const seen: LogEntry[] = [];
    broker.on('log', (e) => seen.push(e));
    const acquiring = broker.acquire({ type: 'fake' });
    await broker.runUntilIdle();
    await acquiring;
    expect(seen.map((e) => e.type)).toEqual(expect.arrayContaining(['lease.queued', 'lease.acquired', 'lease.activated']));
    expectRendered(seen);
    await broker.close();
  });
});

/** The messages of a broker's log entries of one type, in order. */
async function messages(broker: TestBroker, type: string, filter: Parameters<TestBroker['logs']>[0] = {}) {
  return (await broker.logs({ ...filter, type })).map((e) => e.message);
}

// Issue 10, "Log wording": what first users read in their logs, said once and truly.
describe('log wording', () => {
  test('a localHosts lease beyond the slots waits on the full slots, not on "maxResources (1)" alone', async () => {
    // A root of its own: the test broker numbers its leases (lease_0001, ...), and so does another test file running beside this one.
    const root = mkdtempSync(join(tmpdir(), 'slipway-logs-test-'));
    const broker = await testBroker({ blueprints: [localHosts({ name: 'local', config: { slots: 2, root } })] });
    const holders = [broker.acquire({ type: 'host' }), broker.acquire({ type: 'host' })];
    await broker.runUntilIdle();
    const leases = await Promise.all(holders);
    const third = await broker.requestLease({ type: 'host' });
    await broker.runUntilIdle();
    const [wait] = await broker.logs({ lease: third.id, type: 'lease.waiting-for-resources' });
    expect(wait!.message).toBe(
      'Waiting for resources from local: local is full: none of its resources has room for another lease (at most 2 leases each: maxLeasesPerResource), and it may build no more than 1 resource (maxResources).',
    );
    const releasing = [...leases.map((l) => l.release()), third.release()];
    await broker.runUntilIdle();
    await Promise.all(releasing);
    await broker.close();
    rmSync(root, { recursive: true, force: true });
  });

  test('a release says who and why once: "Lease released by holder.", "Lease released by ci (job cancelled).", "Lease released."', async () => {
    const bp = fakeBlueprint({ name: 'f' });
    const broker = await testBroker({ blueprints: [bp] });
    const acquired = [broker.acquire({ type: 'fake' }), broker.acquire({ type: 'fake' }), broker.acquire({ type: 'fake' })];
    await broker.runUntilIdle();
    const [a, b, c] = await Promise.all(acquired);
    const released = a!.release();
    await broker.release(b!.id, { reason: 'job cancelled', author: 'ci' });
    await broker.release(c!.id);
    await broker.runUntilIdle();
    await released;
    expect(await messages(broker, 'lease.released', { lease: a!.id })).toEqual(['Lease released by holder.']);
    expect(await messages(broker, 'lease.released', { lease: b!.id })).toEqual(['Lease released by ci (job cancelled).']);
    expect(await messages(broker, 'lease.released', { lease: c!.id })).toEqual(['Lease released.']);
    await broker.releaseResource(a!.resource.id);
    await broker.runUntilIdle();
    expect(await messages(broker, 'resource.released', { resource: a!.resource.id })).toEqual(['Resource released.']);
    await broker.close();
  });

  test('a failed hook is named once: "Hook destroyResource failed: disk busy", not "failed: scratch.destroyResource failed: ..."', async () => {
    const bp = fakeBlueprint({ name: 'scratch', failures: { destroyResource: { throws: new Error('disk busy'), times: 1 }, activateLease: { throws: new Error('no mount'), times: 1 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const broken = await pumpUntilSettled(broker, broker.acquire({ type: 'fake' }));
    // The broken reason keeps its prefix: it stands alone, without the log entry's hook.
    expect(broken).toMatchObject({ message: expect.stringMatching(/broke: scratch\.activateLease failed: no mount$/) });
    const [resource] = await broker.resources.list();
    await broker.releaseResource(resource!.id);
    await broker.runUntilIdle();
    await broker.advance({ seconds: 2 });
    const failures = await broker.logs({ type: 'hook.failure' });
    expect(failures.map((f) => [f.data.hook, f.data.error])).toEqual([['activateLease', 'no mount'], ['destroyResource', 'disk busy']]);
    expect(failures[0]!.message).toBe('Hook activateLease failed: no mount.');
    expect(failures[1]!.message).toMatch(/^Hook destroyResource failed: disk busy; retry 1 at \S+\.$/);
    expect((await broker.resources.get(resource!.id))!.status).toBe('destroyed');
    await broker.close();
  });

  test('a RetryLater is a retry, not a resume: no "Resuming interrupted" entry, and the fake records resume: false', async () => {
    const bp = fakeBlueprint({
      name: 'later',
      failures: {
        allocateResource: { throws: () => new RetryLater('quota resets soon', { seconds: 5 }), times: 1 },
        activateResource: { throws: () => new RetryLater('booting', { seconds: 5 }), times: 1 },
        activateLease: { throws: () => new RetryLater('mounting', { seconds: 5 }), times: 1 },
        destroyLease: { throws: new Error('busy'), times: 1 },
        destroyResource: { throws: () => new RetryLater('still deleting', { seconds: 5 }), times: 1 },
      },
    });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake' });
    await broker.runUntilIdle();
    for (let i = 0; i < 3; i++) await broker.advance({ seconds: 5 });
    const lease = await acquiring;
    const releasing = lease.release();
    await broker.runUntilIdle();
    await broker.advance({ seconds: 2 });
    await releasing;
    await broker.releaseResource(lease.resource.id);
    await broker.runUntilIdle();
    // Its destroy asked to be retried: it still counts as destroying.
    expect((await broker.stats()).blueprints.later).toMatchObject({ deletionLane: 1, destroying: 1 });
    await broker.advance({ seconds: 5 });
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('destroyed');

    expect(await broker.logs({ type: 'resource.resume' })).toEqual([]);
    const hooks = ['allocateResource', 'activateResource', 'activateLease', 'releaseLease', 'destroyLease', 'destroyResource'];
    expect(bp.history.filter((h) => hooks.includes(h.hook)).map((h) => `${h.hook} ${h.resume}`)).toEqual([
      'allocateResource false', 'allocateResource false',
      'activateResource false', 'activateResource false',
      'activateLease false', 'activateLease false',
      'releaseLease false', 'destroyLease false', 'destroyLease false', // releaseLease once, on the first try only
      'destroyResource false', 'destroyResource false',
    ]);
    // A RetryLater of a destroy hook is no failure either.
    expect(await messages(broker, 'hook.retry-later')).toEqual([
      expect.stringMatching(/^Hook allocateResource asked to retry later \(quota resets soon\)/),
      expect.stringMatching(/^Hook activateResource asked to retry later \(booting\)/),
      expect.stringMatching(/^Hook activateLease asked to retry later \(mounting\)/),
      expect.stringMatching(/^Hook destroyResource asked to retry later \(still deleting\)/),
    ]);
    expect(await messages(broker, 'hook.failure')).toEqual([expect.stringMatching(/^Hook destroyLease failed: busy; retry 1 at/)]);
    await broker.close();
  });

  test('`throw RetryLater` (the class, not an instance) fails the hook with a message that says to write `new`', async () => {
    const bp = fakeBlueprint({ name: 'noNew', failures: { activateResource: { throws: RetryLater, times: 1 } } });
    const broker = await testBroker({ blueprints: [bp] });
    const acquiring = broker.acquire({ type: 'fake' });
    await broker.runUntilIdle();
    await broker.advance({ seconds: 1 });
    await acquiring.then((lease) => lease.release({ wait: false }));
    const [failure] = await broker.logs({ type: 'hook.failure' });
    expect(failure!.data).toMatchObject({ hook: 'activateResource', code: 'HOOK_MALFORMED_RESULT', retry: false });
    expect(failure!.message).toBe('Hook activateResource failed: threw the class RetryLater itself, not an instance: write throw new RetryLater(reason, after) [HOOK_MALFORMED_RESULT].');
    const [broken] = await broker.resources.list({ status: 'destroyed' });
    expect(broken!.brokenReason).toBe('noNew.activateResource failed: threw the class RetryLater itself, not an instance: write throw new RetryLater(reason, after)');
    await broker.runUntilIdle();
    await broker.close();
  });
});

// Issue 10: ctx.log writes only what the blueprint declared, and says so when it is not.
describe('ctx.log', () => {
  const logging = (log: (ctx: { log: (type: string, data?: any) => Promise<void> }) => Promise<unknown> | unknown) =>
    defineBlueprint({
      type: 'logging',
      logTypes: { 'logging.cloned': (d) => `Cloned ${String(d.repo)} in ${String(d.ms)} ms.` },
      async allocateResource() {
        return { attributes: {} };
      },
      async activateLease(ctx) {
        await log(ctx);
      },
    });

  async function failureOf(log: Parameters<typeof logging>[0]) {
    const broker = await testBroker({ blueprints: [logging(log)({ name: 'logging' })] });
    const error = await pumpUntilSettled(broker, broker.acquire({ type: 'logging' }));
    const failures = await broker.logs({ type: 'hook.failure' });
    const rest = (await broker.logs()).filter((e) => e.blueprint === 'logging' && e.type.startsWith('logging.'));
    await broker.close();
    return { error, failures: failures.map((f) => f.message), rest: rest.map((e) => e.message) };
  }

  test('a declared type with JSON data is written and rendered; blueprint.note needs { message }', async () => {
    const result = await failureOf(async (ctx) => {
      await ctx.log('logging.cloned', { repo: 'app', ms: 3 });
      await ctx.log('blueprint.note', { message: 'warm cache' });
    });
    expect(result.failures).toEqual([]);
    expect(result.rest).toEqual(['Cloned app in 3 ms.']);
  });

  test.each([
    ['an undeclared type', (ctx: any) => ctx.log('logging.typo', { repo: 'app' }), 'ctx.log: log type "logging.typo" is not declared by blueprint "logging": add a renderer for it to its logTypes (declared: "logging.cloned", "blueprint.note")'],
    ['a library type', (ctx: any) => ctx.log('lease.activated', { resource: 'forged' }), 'ctx.log: log type "lease.activated" is not declared by blueprint "logging"'],
    ['data that is a string', (ctx: any) => ctx.log('logging.cloned', 'app in 3 ms'), 'ctx.log: the data of a logging.cloned entry must be a JSON object like { path: \'/tmp/x\' } (got string)'],
    ['data that is an array', (ctx: any) => ctx.log('logging.cloned', ['app']), 'ctx.log: the data of a logging.cloned entry must be a JSON object like { path: \'/tmp/x\' } (got array)'],
    ['data that is not JSON', (ctx: any) => ctx.log('logging.cloned', { at: new Date(0) }), 'ctx.log data of logging.cloned.at: is not JSON: a Date instance'],
    ['a note without a message', (ctx: any) => ctx.log('blueprint.note', { text: 'hi' }), 'ctx.log: a blueprint.note entry needs data { message: string }'],
    // Not awaited: the refusal is thrown at once, so it still fails the hook instead of vanishing.
    ['an undeclared type, not awaited', (ctx: any) => void ctx.log('logging.typo'), 'ctx.log: log type "logging.typo" is not declared'],
  ])('%s is refused: the hook fails with a ValidationError that its hook.failure log names', async (_what, log, says) => {
    const { error, failures, rest } = await failureOf(log);
    expect(failures).toEqual([expect.stringContaining(`Hook activateLease failed: ${says}`)]);
    expect(failures[0]).toMatch(/\[INVALID_INPUT\]\.$/);
    expect((error as Error).message).toContain(`logging.activateLease failed: ${says}`);
    expect(rest).toEqual([]);
  });
});

/** Runs the workers (and the clock, a second at a time) until `promise` settles; resolves with its value or its error. */
async function pumpUntilSettled<T>(broker: TestBroker, promise: Promise<T>): Promise<T | unknown> {
  let settled = false;
  const result = promise.then((v) => v, (e: unknown) => e).finally(() => (settled = true));
  for (let i = 0; i < 20 && !settled; i++) {
    await broker.runUntilIdle();
    if (!settled) await broker.advance({ seconds: 1 });
  }
  return result;
}
