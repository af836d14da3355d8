import { internals, type Broker } from '../lib/broker/index.js';
import { createBroker, UnknownTypeError, ValidationError } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker, track } from './helpers/broker.js';

guardBrokers();

async function counts(broker: Broker) {
  const { db, store } = internals.get(broker)!;
  const s = store.s;
  const [row] = await db.query(
    `SELECT (SELECT count(*)::int FROM ${s}.leases) AS leases, (SELECT count(*)::int FROM ${s}.logs) AS logs,
            (SELECT count(*)::int FROM ${s}.work_items) AS work, (SELECT count(*)::int FROM ${s}.resources) AS resources`,
  );
  return row;
}

/** Runs `call`, expects a typed ValidationError naming `field` (with `code`), and checks the message names the field. */
async function expectRejected(call: () => Promise<unknown> | unknown, field: string | RegExp, code = 'INVALID_INPUT', Type: new (...args: any[]) => ValidationError = ValidationError) {
  let error: unknown;
  try {
    await call();
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(Type);
  const v = error as ValidationError;
  expect(v).toBeInstanceOf(ValidationError);
  expect(v.code).toBe(code);
  if (typeof field === 'string') expect(v.field).toBe(field);
  else expect(v.field).toMatch(field);
  expect(v.message).toContain(v.field);
  return v;
}

class Point {
  constructor(
    public x = 1,
    public y = 2,
  ) {}
}
const cyclic: any = { name: 'loop' };
cyclic.self = cyclic;

// ValidationError: "Bad input to a public call. `field` names the offending field. Nothing was written."
describe('bad lease specs are rejected with a typed error and nothing is written', () => {
  const cases: Array<[string, any, string | RegExp, string?, (new (...args: any[]) => ValidationError)?]> = [
    ['an unknown type', { type: 'gpu' }, 'spec.type', 'UNKNOWN_TYPE', UnknownTypeError],
    ['a missing type', { attributes: {} }, 'spec.type'],
    ['an empty type', { type: '  ' }, 'spec.type'],
    ['attributes with a function', { type: 'fake', attributes: { build: () => 1 } }, 'spec.attributes.build'],
    ['attributes with NaN', { type: 'fake', attributes: { cpus: NaN } }, 'spec.attributes.cpus'],
    ['attributes with Infinity deep inside', { type: 'fake', attributes: { a: [1, { b: Infinity }] } }, 'spec.attributes.a[1].b'],
    ['attributes with a class instance', { type: 'fake', attributes: { at: new Point() } }, 'spec.attributes.at'],
    ['attributes with a Date', { type: 'fake', attributes: { at: new Date() } }, 'spec.attributes.at'],
    ['attributes with a cycle', { type: 'fake', attributes: cyclic }, /^spec\.attributes/],
    ['attributes with undefined', { type: 'fake', attributes: { x: undefined } }, 'spec.attributes.x'],
    ['attributes that are an array', { type: 'fake', attributes: [1, 2] }, 'spec.attributes'],
    ['a negative ttl (ms)', { type: 'fake', ttl: -5 }, 'spec.ttl'],
    ['a negative ttl (object)', { type: 'fake', ttl: { minutes: -1 } }, 'spec.ttl'],
    ['an unparsable ttl', { type: 'fake', ttl: 'soon' }, 'spec.ttl'],
    ['a ttl of the wrong kind', { type: 'fake', ttl: true }, 'spec.ttl'],
    ['an unknown blueprint name in spec.blueprints', { type: 'fake', blueprints: ['nope'] }, 'spec.blueprints'],
    ['a blueprint of another type in spec.blueprints', { type: 'fake', blueprints: ['hosts'] }, 'spec.blueprints'],
    ['an unknown spec field', { type: 'fake', colour: 'red' }, 'spec.colour'],
    ['a non-integer priority', { type: 'fake', priority: 1.5 }, 'spec.priority'],
    ['ttl and until together', { type: 'fake', ttl: { minutes: 1 }, until: '2030-01-01T00:00:00Z' }, 'spec.until'],
  ];

  let broker: Awaited<ReturnType<typeof testBroker>>;
  beforeEach(async () => {
    broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' }), fakeBlueprint({ name: 'hosts', type: 'host' })] });
  });
  afterEach(async () => {
    await broker.close();
  });

  // rows padded to full length: jest passes `done` to a test function that declares more parameters than a row has
  test.each(cases.map(([what, spec, field, code, Type]) => [what, spec, field, code ?? 'INVALID_INPUT', Type ?? ValidationError] as const))('%s', async (_what, spec, field, code, Type) => {
    const before = await counts(broker);
    const viaRequest = await expectRejected(() => broker.requestLease(spec), field, code, Type);
    const viaAcquire = await expectRejected(() => broker.acquire(spec), field, code, Type);
    expect(viaAcquire.field).toBe(viaRequest.field);
    await broker.runUntilIdle();
    expect(await counts(broker)).toEqual(before);
    expect(before.leases).toBe(0);
  });

  test('UnknownTypeError names the known types', async () => {
    const error = await expectRejected(() => broker.acquire({ type: 'gpu' }), 'spec.type', 'UNKNOWN_TYPE', UnknownTypeError);
    expect((error as UnknownTypeError).type).toBe('gpu');
    expect(error.message).toMatch(/fake/);
    expect(error.message).toMatch(/host/);
  });

  test('a good spec after the bad ones is written (the counts above are not vacuous)', async () => {
    const before = await counts(broker);
    await broker.requestLease({ type: 'fake' });
    expect((await counts(broker)).leases).toBe(before.leases + 1);
    await broker.runUntilIdle();
  });
});

describe('bad broker options are rejected at createBroker', () => {
  test('two blueprints with the same name', async () => {
    const a = fakeBlueprint({ name: 'same' });
    const b = fakeBlueprint({ name: 'same', type: 'host' });
    const error = await expectRejected(async () => track(await createBroker({ blueprints: [a, b] })), 'blueprints[1].name');
    expect(error.message).toMatch(/same/);
  });

  test('a blueprints entry that is not a blueprint', async () => {
    await expectRejected(async () => track(await createBroker({ blueprints: [{ name: 'x' } as any] })), 'blueprints[0]');
  });

  test.each([
    ['workers.concurrency 0', { workers: { concurrency: 0 } }, 'workers.concurrency'],
    ['a negative waitRecheck', { waitRecheck: -1 }, 'waitRecheck'],
    ['an unparsable claimTtl', { claimTtl: 'whenever' }, 'claimTtl'],
    ['a database that is neither embedded nor a url', { database: { embedded: false } }, 'database.embedded'],
  ])('%s', async (_what, options, field) => {
    await expectRejected(async () => track(await createBroker(options as any)), field);
  });
});

describe('invalid blueprint limits are rejected with the field named', () => {
  test.each([
    ['maxResources 0', { maxResources: 0 }, 'limits.maxResources'],
    ['maxResources -1', { maxResources: -1 }, 'limits.maxResources'],
    ['maxResources 1.5', { maxResources: 1.5 }, 'limits.maxResources'],
    ["maxResources 'x'", { maxResources: 'x' }, 'limits.maxResources'],
    ['allocationLimit not a function', { allocationLimit: 3 }, 'limits.allocationLimit'],
    ['an unknown limit key', { maxResource: 3 }, 'limits.maxResource'],
    ['supplemental not a boolean', { supplemental: 'yes' }, 'limits.supplemental'],
    ['an unparsable idleExpiry', { idleExpiry: 'later' }, 'limits.idleExpiry'],
  ])('%s', async (_what, limits, field) => {
    await expectRejected(() => fakeBlueprint({ name: 'lim', limits: limits as any }), field);
  });

  test('a valid limit is accepted (the rejections above are about the value)', () => {
    expect(fakeBlueprint({ name: 'lim', limits: { maxResources: 1, allocationLimit: () => 2 } }).limits.maxResources).toBe(1);
  });
});
