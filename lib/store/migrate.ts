import type { Db } from './db.js';
import { MIGRATIONS } from './migrations/index.js';
import { quoteIdent } from './sql.js';

/**
 * Creates the schema and applies pending migrations in one transaction under an
 * advisory lock keyed on the schema name, so two processes starting at once both
 * succeed: the second waits, then finds nothing left to do.
 */
export async function migrate(db: Db): Promise<number[]> {
  const s = quoteIdent(db.schema);
  return db.transaction(async (tx) => {
    await tx.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`slipway:migrate:${db.schema}`]);
    await tx.query(`CREATE SCHEMA IF NOT EXISTS ${s}`);
    await tx.query(
      `CREATE TABLE IF NOT EXISTS ${s}.migrations (id integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const done = new Set((await tx.query<{ id: number }>(`SELECT id FROM ${s}.migrations`)).map((r) => Number(r.id)));
    const applied: number[] = [];
    for (const migration of MIGRATIONS) {
      if (done.has(migration.id)) continue;
      await migration.up(tx, s);
      await tx.query(`INSERT INTO ${s}.migrations (id, name) VALUES ($1, $2)`, [migration.id, migration.name]);
      applied.push(migration.id);
    }
    return applied;
  });
}
