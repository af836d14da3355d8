import type { MigrationInterface, QueryRunner } from 'typeorm';
import type { Sql } from './db.js';
import { migrateOn } from './migrate.js';
import { MIGRATIONS } from './migrations/index.js';

/**
 * A QueryRunner as the migrations' statement runner. TypeORM runs a migration inside its
 * own transaction on this runner, so slipway's statements and its ledger row commit with
 * the app's migrations table row, or not at all.
 */
function runnerSql(runner: QueryRunner): Sql {
  return {
    async query(text, params) {
      return (await runner.query(text, params, true)).records ?? [];
    },
    async execute(text, params) {
      return (await runner.query(text, params, true)).affected ?? 0;
    },
  };
}

/** 1700000000000 + id: TypeORM orders migrations by the 13-digit timestamp that ends a name. */
const TIMESTAMP_BASE = 1_700_000_000_000;

/**
 * slipway's migrations as TypeORM migration classes, for an app that runs its schema
 * changes in its own pipeline (`dataSource.runMigrations()`, the TypeORM CLI) and then
 * starts the broker with `migrate: false`.
 *
 * slipway's ledger (`<schema>.migrations`) wins: each class applies its migration through
 * the same code as `createBroker({ migrate: true })`, under the same advisory lock, and
 * records it in slipway's ledger; a migration the ledger already holds is skipped. TypeORM's
 * table only records that its class ran. So both agree, a broker started with
 * `migrate: true` later finds nothing to do, and one started by a newer slipway first
 * still leaves the classes nothing to do.
 *
 * `down` is not supported: slipway's migrations are append-only.
 *
 * @defaultValue schema `'slipway'`
 */
export function slipwayMigrations(options: { schema?: string } = {}): Array<new () => MigrationInterface> {
  const schema = options.schema ?? 'slipway';
  const suffix = schema === 'slipway' ? '' : `_${schema.replace(/[^A-Za-z0-9]/g, '_')}`;
  return MIGRATIONS.map((migration) => {
    const name = `Slipway${String(migration.id).padStart(4, '0')}${migration.name.replace(/(^|[-_ ])([a-z])/g, (_, __, c: string) => c.toUpperCase()).replace(/[^A-Za-z0-9]/g, '')}${suffix}${TIMESTAMP_BASE + migration.id}`;
    const Class = class implements MigrationInterface {
      name = name;
      async up(runner: QueryRunner): Promise<void> {
        await migrateOn(runnerSql(runner), schema, migration.id);
      }
      async down(): Promise<void> {
        throw new Error(`slipway's migrations are append-only: ${name} cannot be reverted`);
      }
    };
    Object.defineProperty(Class, 'name', { value: name });
    return Class;
  });
}
