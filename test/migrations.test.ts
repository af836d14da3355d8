import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createBroker, SchemaNotMigratedError, type Broker } from '../lib/index.js';
import { MIGRATIONS } from '../lib/store/migrations/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import type { MigrateChildMessage } from './fixtures/migrate-child.js';
import { guardBrokers, track } from './helpers/broker.js';
import { describeOnEmbedded, describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

/*
 * The schema's migrations: run at start under an advisory lock, so that any number of
 * brokers in any number of processes may start at once on an empty schema; and
 * `database: { migrate: false }`, for a role without DDL rights, which runs no DDL and
 * refuses a schema that is not migrated with a typed error instead of starting and
 * failing on its first statement.
 */

const fixture = fileURLToPath(new URL('./fixtures/migrate-child.ts', import.meta.url));
const ALL_MIGRATIONS = MIGRATIONS.map((m) => ({ id: m.id, name: m.name }));

/** A connection of the test's own, as the server's superuser (the tier's url). */
async function admin<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: tierUrl!, application_name: 'migrations-test' });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

const ledger = (schema: string) => admin(async (c) => (await c.query(`SELECT id, name FROM "${schema}".migrations ORDER BY id`)).rows);
const schemaExists = (schema: string) => admin(async (c) => (await c.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [schema])).rowCount === 1);

/** One forked host process; resolves `ready` once its imports are loaded. */
class Child {
  readonly proc: ChildProcess;
  readonly ready: Promise<void>;
  readonly started: Promise<Extract<MigrateChildMessage, { t: 'started' }>['calls']>;
  stderr = '';

  constructor(url: string, schema: string, brokers: number) {
    this.proc = fork(fixture, [url, schema, String(brokers)], { execPath: process.execPath, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    this.proc.stderr!.on('data', (chunk) => (this.stderr = (this.stderr + chunk).slice(-10_000)));
    const exited = new Promise<never>((_, reject) => this.proc.once('exit', (code) => reject(new Error(`migrate child exited (${code}) early; stderr: ${this.stderr}`))));
    const message = <T extends MigrateChildMessage['t']>(t: T) =>
      Promise.race([exited, new Promise<Extract<MigrateChildMessage, { t: T }>>((resolve) => this.proc.on('message', (m: MigrateChildMessage) => m.t === t && resolve(m as any)))]);
    this.ready = message('ready').then(() => undefined);
    this.started = message('started').then((m) => m.calls);
    this.ready.catch(() => undefined);
    this.started.catch(() => undefined);
  }

  async close() {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const gone = new Promise((r) => this.proc.once('exit', r));
    this.proc.send('close');
    await gone;
  }
}

/** The most calls in flight at one instant (and from how many processes): a sweep over their start and end times. */
function peakOverlap(calls: Array<{ startedAt: number; endedAt: number; process: string }>) {
  let best = { calls: 0, processes: 0 };
  for (const at of calls.map((c) => c.startedAt)) {
    const inFlight = calls.filter((c) => c.startedAt <= at && at < c.endedAt);
    if (inFlight.length > best.calls) best = { calls: inFlight.length, processes: new Set(inFlight.map((c) => c.process)).size };
  }
  return best;
}

describeOnPostgres('migrations on start (Postgres)', () => {
  const children: Child[] = [];
  // The first createBroker of a jest process loads driver code for a good 200 ms; done here, it
  // would hold back the test's own calls and leave them no chance to overlap the children's.
  beforeAll(async () => void (await (track(await createBroker({ database: { url: tierUrl!, schema: freshSchema('warmup') }, workers: false }))).close()));
  afterEach(async () => {
    for (const c of children.splice(0)) c.proc.kill('SIGKILL');
  });

  test('4 processes and 3 in-process brokers (11 createBroker calls) start at once on an empty schema: all succeed, one ledger row per migration', async () => {
    const schema = freshSchema();
    const PROCESSES = 4;
    const PER_PROCESS = 2;
    const IN_PROCESS = 3;
    for (let i = 0; i < PROCESSES; i++) children.push(new Child(tierUrl!, schema, PER_PROCESS));
    // The barrier: every process has loaded the library before any of them starts a broker.
    await Promise.all(children.map((c) => c.ready));
    expect(await schemaExists(schema)).toBe(false);

    for (const c of children) c.proc.send('go');
    const here = Array.from({ length: IN_PROCESS }, async () => {
      const startedAt = Date.now();
      try {
        const broker = track(await createBroker({ database: { url: tierUrl!, schema, poolSize: 1 }, workers: false }));
        return { ok: true, error: null, startedAt, endedAt: Date.now(), broker, process: 'test' };
      } catch (error) {
        return { ok: false, error: String((error as Error)?.stack ?? error), startedAt, endedAt: Date.now(), broker: null, process: 'test' };
      }
    });
    const calls = [...(await Promise.all(children.map(async (c, i) => (await c.started).map((call) => ({ ...call, process: `child ${i}` }))))).flat(), ...(await Promise.all(here))];

    expect(calls.filter((c) => !c.ok).map((c) => c.error)).toEqual([]);
    expect(calls).toHaveLength(PROCESSES * PER_PROCESS + IN_PROCESS);
    // They really ran at the same time: most calls, from most of the processes, were in flight at one instant.
    const overlap = peakOverlap(calls);
    expect(overlap.calls).toBeGreaterThanOrEqual(Math.ceil(calls.length / 2));
    expect(overlap.processes).toBeGreaterThanOrEqual(3);
    expect(await ledger(schema)).toEqual(ALL_MIGRATIONS);

    // Every broker works on the schema they made together.
    const broker = track(await createBroker({ database: { url: tierUrl!, schema }, blueprints: [fakeBlueprint({ name: 'f' })] }));
    const lease = await broker.acquire({ type: 'fake', timeout: { seconds: 20 } });
    await lease.release();
    await broker.close();
    for (const c of here) await (await c).broker?.close();
    for (const c of children.splice(0)) await c.close();
    expect(await ledger(schema)).toEqual(ALL_MIGRATIONS);
  }, 60_000);
});

describeOnPostgres('database.migrate: false (Postgres)', () => {
  test('on a migrated schema, as a role that may not run DDL: starts, serves a lease, leaves the ledger alone (the same role with migrate: true is refused)', async () => {
    const schema = freshSchema();
    await (track(await createBroker({ database: { url: tierUrl!, schema }, workers: false }))).close();
    const role = `slipway_noddl_${process.pid}_${Date.now() % 100_000}`;
    // Data rights only: no CREATE on the database (so no CREATE SCHEMA), and not the owner of the
    // schema or its tables (so no CREATE TABLE, CREATE INDEX, ALTER or DROP there). Any DDL fails.
    await admin(async (c) => {
      await c.query(`CREATE ROLE ${role} LOGIN PASSWORD 'noddl'`);
      await c.query(`GRANT USAGE ON SCHEMA "${schema}" TO ${role}`);
      await c.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${schema}" TO ${role}`);
      await c.query(`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA "${schema}" TO ${role}`);
    });
    const url = new URL(tierUrl!);
    url.username = role;
    url.password = 'noddl';
    const brokers: Broker[] = [];
    try {
      // The control: what migrate: true runs on start (even with nothing left to apply) is DDL this role may not run.
      await expect(createBroker({ database: { url: url.href, schema } })).rejects.toThrow(/permission denied/);

      const broker = track(await createBroker({ database: { url: url.href, schema, migrate: false }, blueprints: [fakeBlueprint({ name: 'f' })], sweepInterval: { milliseconds: 100 } }));
      brokers.push(broker);
      const lease = await broker.acquire({ type: 'fake', timeout: { seconds: 20 } });
      expect(lease.resource.id).toMatch(/^res_/);
      await lease.release();
      const [row] = await admin(async (c) => (await c.query(`SELECT status FROM "${schema}".leases WHERE id = $1`, [lease.id])).rows);
      expect(row.status).toBe('destroyed');
      expect(await ledger(schema)).toEqual(ALL_MIGRATIONS);
    } finally {
      for (const b of brokers) await b.close();
      await admin(async (c) => {
        await c.query(`DROP OWNED BY ${role}`);
        await c.query(`DROP ROLE ${role}`);
      });
    }
  }, 60_000);

  test('on a missing schema: SchemaNotMigratedError (SCHEMA_NOT_MIGRATED) naming the schema, and nothing is created', async () => {
    const schema = freshSchema('missing');
    const failure = await createBroker({ database: { url: tierUrl!, schema, migrate: false } }).then(
      (b) => track(b),
      (e: unknown) => e,
    );
    expect(failure).toBeInstanceOf(SchemaNotMigratedError);
    const error = failure as SchemaNotMigratedError;
    expect(error.code).toBe('SCHEMA_NOT_MIGRATED');
    expect(error.schema).toBe(schema);
    expect(error.missing).toEqual(ALL_MIGRATIONS.map((m) => m.id));
    expect(error.message).toBe(
      `database.migrate is false and schema "${schema}" does not exist; start one broker with migrate: true (the default) on this schema first, with a role that may create it`,
    );
    expect(await schemaExists(schema)).toBe(false);
  }, 30_000);

  test('on a schema whose ledger lacks a migration, and on a schema slipway never migrated: the error says which', async () => {
    const behind = freshSchema('behind');
    await (track(await createBroker({ database: { url: tierUrl!, schema: behind }, workers: false }))).close();
    const last = ALL_MIGRATIONS[ALL_MIGRATIONS.length - 1];
    await admin((c) => c.query(`DELETE FROM "${behind}".migrations WHERE id = $1`, [last.id]));
    await expect(createBroker({ database: { url: tierUrl!, schema: behind, migrate: false } })).rejects.toMatchObject({
      code: 'SCHEMA_NOT_MIGRATED',
      missing: [last.id],
      message: expect.stringContaining(`schema "${behind}" lacks migration ${last.id} (${last.name})`),
    });

    const foreign = freshSchema('foreign');
    await admin((c) => c.query(`CREATE SCHEMA "${foreign}"`));
    await expect(createBroker({ database: { url: tierUrl!, schema: foreign, migrate: false } })).rejects.toMatchObject({
      code: 'SCHEMA_NOT_MIGRATED',
      message: expect.stringContaining(`schema "${foreign}" exists but has no migrations table`),
    });
  }, 30_000);
});

describeOnEmbedded('database.migrate: false (embedded)', () => {
  let dir: string;
  beforeAll(() => void (dir = mkdtempSync(join(tmpdir(), 'slipway-migrate-'))));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('a migrated dataDir opens and serves a lease; another schema of it is refused with SchemaNotMigratedError', async () => {
    const dataDir = join(dir, 'data');
    await (track(await createBroker({ database: { embedded: true, dataDir }, workers: false }))).close();
    const broker = track(await createBroker({ database: { embedded: true, dataDir, migrate: false }, blueprints: [fakeBlueprint({ name: 'f' })] }));
    const lease = await broker.acquire({ type: 'fake', timeout: { seconds: 20 } });
    await lease.release();
    await broker.close();

    await expect(createBroker({ database: { embedded: true, dataDir, schema: 'elsewhere', migrate: false } })).rejects.toMatchObject({
      name: 'SchemaNotMigratedError',
      code: 'SCHEMA_NOT_MIGRATED',
      schema: 'elsewhere',
      message: expect.stringContaining('schema "elsewhere" does not exist'),
    });
  }, 60_000);
});
