import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { createBroker, SchemaTooNewError } from '../lib/index.js';
import type { DatabaseOptions } from '../lib/store/open.js';
import { MIGRATIONS } from '../lib/store/migrations/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { freshSchema, testDatabase, tier } from './helpers/tier.js';

guardBrokers();

/*
 * A schema a newer slipway migrated holds migrations this version does not know. A broker
 * of this version refuses it with SchemaTooNewError, whether it migrates on start or only
 * checks (`migrate: false`), and writes nothing: it neither applies its own missing
 * migrations nor starts on tables whose meaning may have changed.
 */

const LATEST = MIGRATIONS[MIGRATIONS.length - 1];

/** A connection of the test's own to the broker's database, outside any broker. */
interface Raw {
  query(text: string, params?: unknown[]): Promise<any[]>;
  close(): Promise<void>;
}

let dir: string;
/** On embedded, an empty database to copy into each test's data directory: loading one costs a second, initdb several. */
let blank: Blob | undefined;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'slipway-too-new-'));
  if (tier === 'embedded') {
    const pglite = await PGlite.create();
    blank = (await pglite.dumpDataDir('none')) as Blob;
    await pglite.close();
  }
}, 60_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A database this test can open again between brokers: on postgres a fresh schema on the
 * tier's server; on embedded a PGlite data directory (an in-memory one dies with its broker).
 */
async function reopenable(label: string): Promise<{ database: DatabaseOptions; schema: string; raw(): Promise<Raw> }> {
  const database = testDatabase(label);
  if (database && 'url' in database) {
    return {
      database,
      schema: database.schema!,
      async raw() {
        const client = new pg.Client({ connectionString: database.url, application_name: 'schema-too-new-test' });
        await client.connect();
        return { query: async (text, params) => (await client.query(text, params)).rows, close: () => client.end() };
      },
    };
  }
  const dataDir = join(dir, freshSchema(label));
  await (await PGlite.create({ dataDir, loadDataDir: blank })).close();
  return {
    database: { embedded: true, dataDir },
    schema: 'slipway',
    async raw() {
      const pglite = await PGlite.create({ dataDir });
      return {
        // Without parameters, as a migration's several statements: PGlite's query() takes one.
        query: async (text, params) => (params?.length ? (await pglite.query(text, params)).rows : ((await pglite.exec(text)).at(-1)?.rows ?? [])),
        close: () => pglite.close(),
      };
    },
  };
}

async function withRaw<T>(db: Awaited<ReturnType<typeof reopenable>>, work: (raw: Raw) => Promise<T>): Promise<T> {
  const raw = await db.raw();
  try {
    return await work(raw);
  } finally {
    await raw.close();
  }
}

/** What a broker could have written: the ledger (with its timestamps), every table's columns, every index, every row count. */
async function state(raw: Raw, schema: string) {
  const ledger = await raw.query(`SELECT id, name, applied_at::text FROM "${schema}".migrations ORDER BY id`);
  const columns = await raw.query(
    `SELECT table_name, column_name, data_type, column_default, is_nullable FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`,
    [schema],
  );
  const indexes = await raw.query(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname`, [schema]);
  const rows: Record<string, number> = {};
  for (const table of new Set(columns.map((c) => c.table_name as string))) {
    rows[table] = Number((await raw.query(`SELECT count(*) AS n FROM "${schema}"."${table}"`))[0].n);
  }
  return { ledger, columns, indexes, rows };
}

/** createBroker's failure on the database, or the test fails because it started. */
async function refusal(database: DatabaseOptions): Promise<unknown> {
  return createBroker({ database, workers: false }).then(
    async (broker) => {
      await track(broker).close();
      throw new Error('createBroker started on a schema a newer slipway migrated');
    },
    (error: unknown) => error,
  );
}

function expectTooNew(error: unknown, schema: string, latestKnown: number) {
  expect(error).toBeInstanceOf(SchemaTooNewError);
  expect(error).toMatchObject({
    name: 'SchemaTooNewError',
    code: 'SCHEMA_TOO_NEW',
    schema,
    latestKnown,
    latestApplied: 99,
    unknown: [{ id: 99, name: 'from-the-future' }],
  });
  expect((error as Error).message).toBe(
    `schema "${schema}" was migrated by a newer slipway: it is at migration 99 and this version knows migrations up to ${latestKnown}; ` +
      `its ledger holds migration 99 (from-the-future), unknown to this version. Nothing was written; run the slipway that migrated it (or a later one), or give this one another schema`,
  );
}

describe('a schema migrated by a newer slipway', () => {
  test('fully migrated, plus migration 99 in the ledger: createBroker with and without migrate: false rejects with SchemaTooNewError, and nothing is written', async () => {
    const db = await reopenable('future');
    await track(await createBroker({ database: db.database, workers: false })).close();
    await withRaw(db, (raw) => raw.query(`INSERT INTO "${db.schema}".migrations (id, name) VALUES (99, 'from-the-future')`));
    const before = await withRaw(db, (raw) => state(raw, db.schema));
    expect(before.ledger.map((m) => m.id)).toEqual([...MIGRATIONS.map((m) => m.id), 99]);

    expectTooNew(await refusal(db.database), db.schema, LATEST.id);
    expect(await withRaw(db, (raw) => state(raw, db.schema))).toEqual(before);

    expectTooNew(await refusal({ ...db.database, migrate: false }), db.schema, LATEST.id);
    expect(await withRaw(db, (raw) => state(raw, db.schema))).toEqual(before);
  }, 60_000);

  test(`migrated up to ${LATEST.id - 1} by this version, then to 99 by a newer one: migration ${LATEST.id} is not applied, and migrate: false reports the schema too new, not behind`, async () => {
    const db = await reopenable('skipped');
    // The schema as this version's migrations leave it one step short of the last, then the newer version's ledger row.
    await withRaw(db, async (raw) => {
      const s = `"${db.schema}"`;
      await raw.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
      await raw.query(`CREATE TABLE ${s}.migrations (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const sql = { query: raw.query, execute: async (text: string, params?: unknown[]) => (await raw.query(text, params)).length };
      for (const m of MIGRATIONS.slice(0, -1)) {
        await m.up(sql, s);
        await raw.query(`INSERT INTO ${s}.migrations (id, name) VALUES ($1, $2)`, [m.id, m.name]);
      }
      await raw.query(`INSERT INTO ${s}.migrations (id, name) VALUES (99, 'from-the-future')`);
    });
    const before = await withRaw(db, (raw) => state(raw, db.schema));

    expectTooNew(await refusal(db.database), db.schema, LATEST.id);
    expect(await withRaw(db, (raw) => state(raw, db.schema))).toEqual(before);

    expectTooNew(await refusal({ ...db.database, migrate: false }), db.schema, LATEST.id);
    expect(await withRaw(db, (raw) => state(raw, db.schema))).toEqual(before);
  }, 60_000);
});
