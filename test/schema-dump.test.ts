import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { Db } from '../lib/store/db.js';
import { openDatabase } from '../lib/store/open.js';
import { dumpSchema, REGENERATE, SCHEMA_SQL } from './helpers/schema-dump.js';
import { freshSchema, tierUrl } from './helpers/tier.js';

/*
 * lib/store/schema.sql is the schema as the migrations make it, committed so that a schema
 * change shows in review (graphile-worker keeps one too). A fresh schema `slipway` is
 * migrated here, on this tier, and dumped by the same code as `npm run schema:dump`.
 */

/** The tier's server with one database of its own: the dump names the schema `slipway`, which other test files may use. */
async function withDatabase<T>(work: (url: string) => Promise<T>): Promise<T> {
  const name = freshSchema('dump');
  const admin = async (statement: string) => {
    const client = new pg.Client({ connectionString: tierUrl!, application_name: 'schema-dump-test' });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  // template0: template1 may not be copied while anyone is connected to it.
  await admin(`CREATE DATABASE "${name}" TEMPLATE template0`);
  try {
    const url = new URL(tierUrl!);
    url.pathname = `/${name}`;
    return await work(url.href);
  } finally {
    await admin(`DROP DATABASE "${name}"`);
  }
}

/** A fresh database of this tier, migrated, with the schema named `slipway`. */
async function withMigrated<T>(work: (db: Db) => Promise<T>): Promise<T> {
  const run = async (db: Db) => {
    try {
      return await work(db);
    } finally {
      await db.close();
    }
  };
  if (!tierUrl) return run(await openDatabase({ embedded: true, schema: 'slipway' }));
  return withDatabase(async (url) => run(await openDatabase({ url, schema: 'slipway', poolSize: 1 })));
}

/** The lines only one side has, in order: enough to see what changed without a diff tool. */
function lineDiff(committed: string, migrated: string): string {
  const a = committed.split('\n');
  const b = migrated.split('\n');
  return [...a.filter((l) => !b.includes(l)).map((l) => `- ${l}`), ...b.filter((l) => !a.includes(l)).map((l) => `+ ${l}`)].join('\n');
}

test('lib/store/schema.sql is what the migrations make', async () => {
  const file = fileURLToPath(SCHEMA_SQL);
  let committed = '';
  try {
    committed = readFileSync(file, 'utf8');
  } catch {
    // reported below as a file with nothing in it
  }
  const migrated = await withMigrated((db) => dumpSchema(db, 'slipway'));
  if (migrated !== committed) {
    throw new Error(
      `${file} does not match the schema the migrations make: run \`${REGENERATE}\` and commit the result ` +
        `(a changed migration that already shipped is a bug: append a new one instead).\n` +
        `Lines only in the committed file (-) and only in the migrated schema (+):\n${lineDiff(committed, migrated)}`,
    );
  }
}, 60_000);

test('the dump leaves out nothing the schema holds: every relation, function and type of it is named there', async () => {
  const { dump, objects } = await withMigrated(async (db) => ({
    dump: await dumpSchema(db, 'slipway'),
    objects: await db.query<{ kind: string; name: string }>(
      `SELECT 'relation ' || c.relkind::text AS kind, c.relname AS name FROM pg_class c
       WHERE c.relnamespace = 'slipway'::regnamespace
         -- an identity column's sequence is its column's doing
         AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'i')
         -- a table's row type and TOAST table come with it
         AND c.relkind NOT IN ('t', 'c')
       UNION ALL
       SELECT 'function', p.proname FROM pg_proc p WHERE p.pronamespace = 'slipway'::regnamespace
       UNION ALL
       SELECT 'type ' || t.typtype::text, t.typname FROM pg_type t
       WHERE t.typnamespace = 'slipway'::regnamespace AND t.typrelid = 0 AND t.typelem = 0`,
    ),
  }));
  expect(objects.length).toBeGreaterThan(0);
  // An index is named before its table (CREATE INDEX name ON slipway.table), the rest qualified.
  const named = (o: { kind: string; name: string }) => new RegExp(o.kind === 'relation i' ? `INDEX ${o.name} ON ` : `\\bslipway\\.${o.name}\\b`).test(dump);
  expect(objects.filter((o) => !named(o))).toEqual([]);
}, 60_000);
