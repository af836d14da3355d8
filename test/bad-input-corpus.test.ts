/**
 * The bad-input corpus (test/fixtures/bad-input/, described in its README.md): every case
 * must be refused with its typed error code and field, and leave the database unchanged.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DateTime, Duration } from 'luxon';
import { internals, type Broker } from '../lib/broker/index.js';
import { createBroker, defineBlueprint, SlipwayError, ValidationError, type Lease, type LeaseHandle } from '../lib/index.js';
import { createTestBroker, fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { localHosts } from '../blueprints/index.js';
import { guardBrokers, testBroker, track } from './helpers/broker.js';
import { pump } from './helpers/pump.js';
import { freshSchema, testDatabase, tier, tierUrl } from './helpers/tier.js';

guardBrokers();

interface Case {
  name: string;
  input: unknown;
  code: string;
  field: unknown;
  knownBug?: string;
}

const corpusDir = fileURLToPath(new URL('./fixtures/bad-input/', import.meta.url));
const AREAS = ['specs', 'broker-options', 'blueprint-configs', 'call-options'] as const;

function load(area: (typeof AREAS)[number]): Case[] {
  const cases = JSON.parse(readFileSync(join(corpusDir, `${area}.json`), 'utf8')) as Case[];
  if (!Array.isArray(cases)) throw new Error(`${area}.json: must hold an array of cases`);
  for (const c of cases) {
    const keys = Object.keys(c).filter((k) => !['name', 'input', 'code', 'field', 'knownBug'].includes(k));
    if (typeof c.name !== 'string' || !('input' in c) || typeof c.code !== 'string' || !('field' in c) || keys.length > 0) {
      throw new Error(`${area}.json: malformed case ${JSON.stringify(c.name)}`);
    }
  }
  return cases;
}
const corpus = Object.fromEntries(AREAS.map((a) => [a, load(a)])) as Record<(typeof AREAS)[number], Case[]>;

// ---- decoding the values JSON cannot express (README.md, "Values JSON cannot express") ----

class Point {
  x = 1;
  y = 2;
}
const CLASSES: Record<string, new (value?: any) => unknown> = { Point, Map, String, URL, AbortController };

type Context = Record<string, unknown>;

function decode(value: unknown, ctx: Context): any {
  if (Array.isArray(value)) return value.map((v) => decode(v, ctx));
  if (value === null || typeof value !== 'object') return value;
  const o = value as Record<string, any>;
  if (!('$special' in o)) return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, decode(v, ctx)]));
  switch (o.$special) {
    case 'undefined':
      return undefined;
    case 'NaN':
      return NaN;
    case 'Infinity':
      return Infinity;
    case '-Infinity':
      return -Infinity;
    case '-0':
      return -0;
    case 'bigint':
      return BigInt(o.value);
    case 'symbol':
      return Symbol(o.description);
    case 'function':
      return () => undefined;
    case 'functionReturning':
      return () => decode(o.value, ctx);
    case 'throwingFunction':
      return () => {
        throw o.throws === 'string' ? o.message : new Error(o.message);
      };
    case 'date':
      return new Date(o.value);
    case 'invalidDate':
      return new Date(NaN);
    case 'dateTime':
      return DateTime.fromISO(o.value);
    case 'invalidDateTime':
      return DateTime.invalid('a corpus case');
    case 'duration':
      return Duration.fromObject(o.value);
    case 'invalidDuration':
      return Duration.invalid('a corpus case');
    case 'instance': {
      const Class = CLASSES[o.class];
      if (!Class) throw new Error(`corpus: unknown class ${o.class}`);
      return 'value' in o ? new Class(decode(o.value, ctx)) : new Class();
    }
    case 'circular': {
      const object = decode(o.value, ctx);
      object[o.key] = object;
      return object;
    }
    case 'symbolKey': {
      const object = decode(o.value, ctx);
      object[Symbol(o.description)] = 1;
      return object;
    }
    case 'sparseArray': {
      const array = new Array(o.length);
      for (const [i, v] of Object.entries(o.items)) array[Number(i)] = decode(v, ctx);
      return array;
    }
    case 'deep': {
      let nested: unknown = o.leaf;
      for (let i = 0; i < o.depth; i++) nested = { [o.key]: nested };
      return nested;
    }
    case 'repeat':
      return String(o.value).repeat(o.times);
    case 'concat':
      return o.parts.map((p: unknown) => decode(p, ctx)).join('');
    case 'abortSignal':
      return new AbortController().signal;
    case 'abortedSignal':
      return AbortSignal.abort(new Error('aborted by a corpus case'));
    case 'fakeBlueprint':
      return fakeBlueprint({ name: o.name, type: o.type });
    default:
      if (o.$special in ctx && ctx[o.$special] !== undefined) return ctx[o.$special];
      throw new Error(`corpus: unknown $special ${JSON.stringify(o.$special)} (or a placeholder this area does not provide)`);
  }
}

// ---- running a case and checking its error ----

type Outcome = { error: unknown } | { value: unknown } | { hung: true };

/** Runs `call`, a synchronous throw counting as a rejection; a call that neither settles nor throws in `ms` is reported as hung. */
async function outcome(call: () => unknown, ms = 5_000): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<Outcome>((resolve) => (timer = setTimeout(() => resolve({ hung: true }), ms)));
  const settled = (async (): Promise<Outcome> => {
    try {
      return { value: await call() };
    } catch (error) {
      return { error };
    }
  })();
  try {
    return await Promise.race([settled, hung]);
  } finally {
    clearTimeout(timer);
  }
}

function expectRefused(result: Outcome, c: Case, ctx: Context): void {
  if (!('error' in result)) throw new Error(`expected ${c.code} on ${String(c.field)}, but the call ${'hung' in result ? 'hung' : 'succeeded'}`);
  const error = result.error;
  if (!(error instanceof SlipwayError)) {
    throw new Error(`expected a SlipwayError ${c.code}, got ${(error as Error)?.constructor?.name ?? typeof error}: ${(error as Error)?.message ?? String(error)}`);
  }
  const field = decode(c.field, ctx);
  expect({ code: error.code, field: error instanceof ValidationError ? error.field : null }).toEqual({ code: c.code, field });
  if (field !== null) expect(error.message).toContain(field);
}

/**
 * `test`, or `test.failing` for a case whose `knownBug` says the library still gets it wrong.
 * SLIPWAY_CORPUS_SHOW_BUGS=1 runs those as plain tests too, to see how each one fails.
 */
function caseTest(c: Case, fn: () => Promise<void>) {
  (c.knownBug && !process.env.SLIPWAY_CORPUS_SHOW_BUGS ? test.failing : test)(c.knownBug ? `${c.name} [known bug: ${c.knownBug}]` : c.name, fn);
}

// ---- the world a case must leave unchanged ----

let shared: TestBroker;
let target: { handle: LeaseHandle; lease: Lease; leaseId: string; resourceId: string };
let localLease: Lease;
let scratch: string;
let hostsRoot: string;
let victimDataDir: string;
let victimFile: string;
let victimUrl: string;
let untouchedSchema: string;
let recorder: Server;
let connections = 0;
const sockets = new Set<Socket>();

/** Every row of every table in the broker's schema, one query, in a stable order. */
async function rowsOf(broker: Broker): Promise<Array<{ t: string; r: string }>> {
  const db = internals.get(broker)!.db;
  const tables = await db.query<{ table_name: string }>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1`,
    [db.schema],
  );
  if (tables.length === 0) return [];
  const union = tables.map(({ table_name: t }) => `SELECT '${t}' AS t, to_jsonb(x)::text AS r FROM "${db.schema}"."${t}" x`).join(' UNION ALL ');
  return db.query(`${union} ORDER BY 1, 2`);
}

/** The files under `dir`, with a hash of each one's content. */
function listing(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const entry of readdirSync(d, { withFileTypes: true })) {
      const path = join(d, entry.name);
      if (entry.isDirectory()) {
        out[`${path}/`] = 'dir';
        walk(path);
      } else out[path] = `${statSync(path).size}:${createHash('sha256').update(readFileSync(path)).digest('hex')}`;
    }
  };
  walk(dir);
  return out;
}

/** Schemas among `names` that exist on the tier's server (postgres tier only). */
async function existingSchemas(names: string[]): Promise<string[]> {
  if (!tierUrl) return [];
  const rows = await internals.get(shared)!.db.query<{ nspname: string }>(`SELECT nspname FROM pg_namespace WHERE nspname = ANY($1::text[]) ORDER BY 1`, [names]);
  return rows.map((r) => r.nspname);
}

async function dropSchemas(names: string[]) {
  for (const name of names) await internals.get(shared)!.db.execute(`DROP SCHEMA "${name}" CASCADE`);
}

async function world(options: { broker?: TestBroker; schemas?: string[] } = {}) {
  const broker = options.broker ?? shared;
  await broker.runUntilIdle();
  return {
    rows: await rowsOf(broker),
    files: listing(scratch),
    connections,
    schemas: await existingSchemas([untouchedSchema, ...(options.schemas ?? [])]),
  };
}

const context = (): Context => ({ leaseId: target?.leaseId, resourceId: target?.resourceId, victimUrl, victimDataDir, victimFile, untouchedSchema });

/** The active lease call cases work on; made again when a case (a known bug) released it or broke its resource. */
async function ensureTarget() {
  if (target) {
    const lease = await shared.leases.get(target.leaseId);
    const resource = await shared.resources.get(target.resourceId);
    if (lease?.status === 'active' && resource?.status === 'active') return;
  }
  const handle = await shared.requestLease({ type: 'fake', owner: 'corpus-target' });
  const lease = await pump(shared, handle.whenActive());
  target = { handle, lease, leaseId: lease.id, resourceId: lease.resource.id };
}

/** An empty data directory nobody may open, and a regular file where a data directory might be expected. */
function resetVictims() {
  rmSync(victimDataDir, { recursive: true, force: true });
  mkdirSync(victimDataDir);
  writeFileSync(victimFile, 'not a PGlite data directory\n');
}

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'slipway-corpus-'));
  victimDataDir = join(scratch, 'data-dir-nobody-may-open');
  victimFile = join(scratch, 'a-file-not-a-directory');
  resetVictims();
  untouchedSchema = freshSchema('untouched');
  recorder = createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.destroy();
  });
  await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
  victimUrl = tierUrl ?? `postgres://corpus@127.0.0.1:${(recorder.address() as { port: number }).port}/slipway`;

  hostsRoot = mkdtempSync(join(tmpdir(), 'slipway-corpus-hosts-'));
  // Not tracked: the leak guard closes tracked brokers after every test, and this one serves them all (closed in afterAll).
  shared = await createTestBroker({
    database: testDatabase('shared'),
    blueprints: [fakeBlueprint({ name: 'f' }), localHosts({ name: 'local', config: { slots: 2, root: hostsRoot } })],
  });
  // Some history, so that "unchanged" compares real rows: a destroyed lease, an active one, a localHosts lease with its slot lock.
  const done = await pump(shared, shared.acquire({ type: 'fake', owner: 'corpus-history', attributes: { keep: 'me' } }));
  await pump(shared, done.release());
  await ensureTarget();
  localLease = await pump(shared, shared.acquire({ type: 'host', owner: 'corpus-commands' }));
}, 120_000);

afterAll(async () => {
  await shared?.close();
  for (const s of sockets) s.destroy();
  await new Promise((resolve) => recorder?.close(resolve));
  for (const dir of [scratch, hostsRoot]) if (dir) rmSync(dir, { recursive: true, force: true });
});

test('the corpus has at least 60 cases, in every area, with unique names', () => {
  for (const area of AREAS) {
    expect(corpus[area].length).toBeGreaterThan(0);
    expect(new Set(corpus[area].map((c) => c.name)).size).toBe(corpus[area].length);
  }
  expect(AREAS.reduce((n, a) => n + corpus[a].length, 0)).toBeGreaterThanOrEqual(60);
});

test('the snapshot holds real rows and sees a write (the comparisons below are not vacuous)', async () => {
  const before = await world();
  const tables = new Set(before.rows.map((r) => r.t));
  for (const t of ['leases', 'resources', 'logs', 'work_items', 'slot_locks', 'commands', 'migrations']) expect(tables).toContain(t);
  expect(before.files).toEqual({ [`${victimDataDir}/`]: 'dir', [victimFile]: expect.any(String) });
  expect(before.connections).toBe(0);
  expect(before.schemas).toEqual([]);
  const handle = await shared.requestLease({ type: 'fake', owner: 'corpus-control' });
  expect((await world()).rows).not.toEqual(before.rows);
  await pump(shared, handle.whenActive());
  await pump(shared, handle.release());
});

describe('lease specs (requestLease and acquire)', () => {
  for (const c of corpus.specs) {
    caseTest(c, async () => {
      const before = await world();
      expectRefused(await outcome(() => shared.requestLease(decode(c.input, context()))), c, context());
      expectRefused(await outcome(() => shared.acquire(decode(c.input, context()))), c, context());
      expect(await world()).toEqual(before);
    });
  }
});

describe('createBroker options', () => {
  /**
   * The database a case without `database` is pointed at: one that must never be touched. A url on
   * both tiers (the server, or the connection-counting listener), so that an option that slips through
   * is caught at its first connection instead of after building a PGlite database.
   */
  const defaultDatabase = () => ({ url: victimUrl, schema: untouchedSchema, poolSize: 2 });
  const isPlain = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

  for (const c of corpus['broker-options']) {
    caseTest(c, async () => {
      const input = decode(c.input, context());
      const options = isPlain(input) && !('database' in input) ? { ...input, database: defaultDatabase() } : input;
      const named = isPlain(options) && isPlain(options.database) && options.database.schema !== undefined ? [String(options.database.schema)] : [];
      const before = await world({ schemas: named });
      const opened: Broker[] = [];
      let result: Outcome;
      let after: typeof before;
      try {
        result = await outcome(async () => opened.push(track(await createBroker(options))), 30_000);
      } finally {
        for (const b of opened) await b.close({ grace: { milliseconds: 100 } });
        after = await world({ schemas: named });
        // A case that slipped through (a known bug) must not spoil the targets of the cases after it.
        if (JSON.stringify(after.files) !== JSON.stringify(before.files)) resetVictims();
        await dropSchemas(after.schemas.filter((name) => !before.schemas.includes(name)));
      }
      expectRefused(result, c, context());
      expect(after).toEqual(before);
    });
  }

  test('control: a good url is really tried (so zero connections above means none were made)', async () => {
    const before = await world();
    const schema = freshSchema('control');
    const result = await outcome(async () => {
      const b = track(await createBroker({ database: { url: victimUrl, schema, poolSize: 1 }, workers: false }));
      await b.close();
    }, 30_000);
    const after = await world({ schemas: [schema] });
    if (tier === 'postgres') {
      expect(result).toEqual({ value: undefined });
      expect(after.schemas).toEqual([schema]);
      await dropSchemas([schema]);
    } else {
      expect('error' in result).toBe(true);
      expect(after.connections).toBeGreaterThan(before.connections);
    }
  });
});

describe('blueprint definitions and configs', () => {
  const valid = { type: 'corpus', allocateResource: async () => undefined };
  const build = (input: any) => {
    if ('define' in input) return defineBlueprint(input.define);
    if ('configure' in input) return defineBlueprint({ ...valid, ...(input.implementation ?? {}) })(input.configure);
    if ('localHosts' in input) return localHosts(input.localHosts);
    throw new Error('corpus: a blueprint case needs define, configure or localHosts');
  };
  for (const c of corpus['blueprint-configs']) {
    caseTest(c, async () => {
      // No broker is involved: defining and configuring a blueprint must touch no database at all.
      const before = await world();
      expectRefused(await outcome(() => build(decode(c.input, context()))), c, context());
      expect(await world()).toEqual(before);
    });
  }
});

describe('options of calls', () => {
  async function closeCase(c: Case, args: unknown[]) {
    const own = await testBroker({ blueprints: [fakeBlueprint({ name: 'f' })] });
    const db = internals.get(own)!.db;
    try {
      const before = await world({ broker: own });
      expectRefused(await outcome(() => own.close(...(args as []))), c, context());
      expect(await world({ broker: own })).toEqual(before);
      // A refused close changed nothing: the broker still takes requests, and a proper close then really closes it.
      await expect(own.requestLease({ type: 'fake' })).resolves.toBeDefined();
      await own.close();
      await expect(db.query('SELECT 1')).rejects.toThrow();
    } finally {
      // Whatever a buggy close left behind: the engine still running, the database still open.
      await own.close().catch(() => undefined);
      await internals.get(own)!.engine?.stop(Duration.fromMillis(100));
      await db.close().catch(() => undefined);
    }
  }

  type AnyCall = (...args: unknown[]) => unknown;
  const calls: Record<string, () => AnyCall> = {
    release: () => shared.release as AnyCall,
    releaseResource: () => shared.releaseResource as AnyCall,
    reclaimResource: () => shared.reclaimResource as AnyCall,
    breakResource: () => shared.breakResource as AnyCall,
    'leases.get': () => shared.leases.get as AnyCall,
    'leases.list': () => shared.leases.list as AnyCall,
    'resources.get': () => shared.resources.get as AnyCall,
    'resources.list': () => shared.resources.list as AnyCall,
    logs: () => shared.logs as AnyCall,
    'authorizations.request': () => shared.authorizations.request as AnyCall,
    'authorizations.authorize': () => shared.authorizations.authorize as AnyCall,
    'authorizations.decline': () => shared.authorizations.decline as AnyCall,
    'authorizations.list': () => shared.authorizations.list as AnyCall,
    // An accepted subscription is undone at once, so that a known bug leaves no listener behind.
    on: () => (...args) => {
      const off = (shared.on as AnyCall)(...args);
      if (typeof off === 'function') off();
      return off;
    },
    whenActive: () => target.handle.whenActive as AnyCall,
    'lease.interface': () => target.lease.interface as AnyCall,
    'lease.release': () => target.lease.release as AnyCall,
    'command.run': () => localLease.interface('command').run as AnyCall,
  };

  for (const c of corpus['call-options']) {
    caseTest(c, async () => {
      const { call: name, args } = c.input as { call: string; args: unknown[] };
      if (name === 'close') return closeCase(c, decode(args, context()));
      const fn = calls[name];
      if (!fn) throw new Error(`corpus: unknown call ${name}`);
      await ensureTarget();
      const before = await world();
      expectRefused(await outcome(() => fn()(...decode(args, context()))), c, context());
      expect(await world()).toEqual(before);
    });
  }
});
