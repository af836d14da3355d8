import { SchemaNotMigratedError } from '../errors/schema-not-migrated-error.js';
import { SchemaTooNewError } from '../errors/schema-too-new-error.js';
import type { Db, Sql } from './db.js';
import { MIGRATIONS } from './migrations/index.js';
import { quoteIdent } from './sql/statements.js';

/**
 * The migration ids in the schema's ledger. Throws SchemaTooNewError when it holds a migration this
 * version does not know (a newer slipway migrated the schema), before anything is applied
 * or started on tables whose meaning may have changed.
 */
async function readLedger(sql: Sql, schema: string): Promise<Set<number>> {
  const rows = (await sql.query<{ id: number; name: string }>(`SELECT id, name FROM ${quoteIdent(schema)}.migrations ORDER BY id`)).map((r) => ({ id: Number(r.id), name: r.name }));
  const known = new Set(MIGRATIONS.map((m) => m.id));
  const unknown = rows.filter((r) => !known.has(r.id));
  if (unknown.length > 0) {
    throw new SchemaTooNewError(schema, Math.max(...known), Math.max(...rows.map((r) => r.id)), unknown);
  }
  return new Set(rows.map((r) => r.id));
}

/**
 * Creates the schema and applies pending migrations in one transaction under an
 * advisory lock keyed on the schema name, so two processes starting at once both
 * succeed: the second waits, then finds nothing left to do. A schema a newer slipway
 * migrated is refused before anything is applied, and the transaction rolls back.
 */
export async function migrate(db: Db): Promise<number[]> {
  return db.transaction((tx) => migrateOn(tx, db.schema));
}

/**
 * `migrate`'s work inside a transaction the caller opened (slipwayMigrations runs it in
 * TypeORM's): the migrations up to `upTo` (all when omitted) that the ledger lacks.
 */
export async function migrateOn(tx: Sql, schema: string, upTo = Infinity): Promise<number[]> {
  const s = quoteIdent(schema);
  await tx.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`slipway:migrate:${schema}`]);
  await tx.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
  await tx.query(
    `CREATE TABLE IF NOT EXISTS ${s}.migrations (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
  );
  const done = await readLedger(tx, schema);
  const applied: number[] = [];
  for (const migration of MIGRATIONS) {
    if (migration.id > upTo || done.has(migration.id)) continue;
    await migration.up(tx, s);
    await tx.query(`INSERT INTO ${s}.migrations (id, name) VALUES ($1, $2)`, [migration.id, migration.name]);
    applied.push(migration.id);
  }
  return applied;
}

/**
 * For `migrate: false`: checks, without writing or locking anything, that the schema exists
 * and its ledger holds every migration of this version and none it does not know. Otherwise
 * the broker would start and fail later, on its first statement, with a bare "relation does
 * not exist", or run on tables a newer version gave another meaning.
 */
export async function checkMigrated(db: Db): Promise<void> {
  const [found] = await db.query<{ schema: boolean; ledger: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS schema, to_regclass($2) IS NOT NULL AS ledger`,
    [db.schema, `${quoteIdent(db.schema)}.migrations`],
  );
  const all = MIGRATIONS.map((m) => m.id);
  if (!found.schema) throw new SchemaNotMigratedError(db.schema, 'does not exist', all);
  if (!found.ledger) throw new SchemaNotMigratedError(db.schema, 'exists but has no migrations table (slipway never migrated it)', all);
  const done = await readLedger(db, db.schema);
  const missing = MIGRATIONS.filter((m) => !done.has(m.id));
  if (missing.length > 0) {
    throw new SchemaNotMigratedError(db.schema, `lacks migration${missing.length > 1 ? 's' : ''} ${missing.map((m) => `${m.id} (${m.name})`).join(', ')}`, missing.map((m) => m.id));
  }
}
