import { readFileSync } from 'node:fs';
import pg from 'pg';
import type { Broker, DatabaseOptions } from '../../lib/index.js';
// The in-memory embedded database has no door but the broker's own handle; the test
// suite reaches it the same way (see lib/broker.ts `internals`). Used only to seed rows.
import { internals } from '../../lib/broker/index.js';
import { postgresBin, startPostgres, type ThrowawayPostgres } from '../../test/helpers/postgres.js';
import type { TierName } from './config.js';


/** Statements outside the broker: seeding rows, EXPLAIN ANALYZE of the hot statements. */
export interface RawSql {
  query<T = Record<string, any>>(text: string, params?: unknown[]): Promise<T[]>;
  /** EXPLAIN (ANALYZE) of one statement inside a transaction that is rolled back. */
  explain(text: string, params: unknown[]): Promise<any>;
  close(): Promise<void>;
}

export interface Tier {
  name: TierName;
  /** Database options for one broker of one workload: a fresh schema (postgres) or a fresh in-memory database (embedded). */
  database(label: string): DatabaseOptions;
  /** The schema `database(label)` chose. */
  schemaOf(options: DatabaseOptions): string;
  raw(broker: Broker, options: DatabaseOptions): RawSql;
  url?: string;
  info: Record<string, unknown>;
  stop(): Promise<void>;
}

let counter = 0;

class Rollback extends Error {}

export async function openTier(name: TierName): Promise<Tier> {
  if (name === 'embedded') {
    return {
      name,
      // Every embedded broker has a database of its own, so one schema name serves all
      // (and the migrated template is built once per process).
      database: () => ({ embedded: true, schema: 'bench' }),
      schemaOf: () => 'bench',
      raw(broker) {
        const { db } = internals.get(broker)!;
        return {
          query: (text, params) => db.query(text, params),
          async explain(text, params) {
            let plan: any;
            await db
              .transaction(async (tx) => {
                plan = (await tx.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params))[0]['QUERY PLAN'];
                throw new Rollback();
              })
              .catch((e) => {
                if (!(e instanceof Rollback)) throw e;
              });
            return typeof plan === 'string' ? JSON.parse(plan) : plan;
          },
          close: async () => undefined,
        };
      },
      info: { driver: 'PGlite (in memory, one session)', pglite: packageVersion('@electric-sql/pglite') },
      stop: async () => undefined,
    };
  }
  const cluster: ThrowawayPostgres = await startPostgres({ fsync: true });
  const client = new pg.Client({ connectionString: cluster.url });
  await client.connect();
  const settings = await client.query(
    `SELECT name, setting FROM pg_settings WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'wal_sync_method', 'shared_buffers', 'max_connections')`,
  );
  await client.end();
  return postgresTier(cluster.url, {
    driver: 'pg via TypeORM, throwaway local cluster on loopback',
    settings: Object.fromEntries(settings.rows.map((r) => [r.name, r.setting])),
    pgBin: postgresBin(),
  }, () => cluster.stop());
}

/** The tier in a child process: the embedded one, or the parent's running cluster. */
export function attachTier(name: TierName, url?: string): Tier | Promise<Tier> {
  if (name === 'embedded') return openTier('embedded');
  if (!url) throw new Error('bench: the postgres tier needs the cluster url');
  return postgresTier(url, {}, async () => undefined);
}

function postgresTier(url: string, info: Record<string, unknown>, stop: () => Promise<void>): Tier {
  return {
    name: 'postgres',
    url,
    database: (label) => ({ url, schema: `bench_${label}_${process.pid}_${++counter}`.slice(0, 63) }),
    schemaOf: (options) => (options as { schema: string }).schema,
    raw(_broker, options) {
      const pool = new pg.Pool({ connectionString: (options as { url: string }).url, max: 2 });
      return {
        query: async (text, params) => (await pool.query(text, params)).rows,
        async explain(text, params) {
          const c = await pool.connect();
          try {
            await c.query('BEGIN');
            const result = await c.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, params);
            return result.rows[0]['QUERY PLAN'];
          } finally {
            await c.query('ROLLBACK').catch(() => undefined);
            c.release();
          }
        },
        close: () => pool.end(),
      };
    },
    info,
    stop,
  };
}

/** The installed version of a dependency, read from node_modules (some packages do not export their package.json). */
export function packageVersion(name: string): string {
  try {
    return JSON.parse(readFileSync(new URL(`../../node_modules/${name}/package.json`, import.meta.url), 'utf8')).version;
  } catch {
    return 'unknown';
  }
}

export function pgBin(cmd: string): string {
  const dir = postgresBin();
  if (!dir) throw new Error(`bench: ${cmd} needs the PostgreSQL server binaries (initdb on PATH, /usr/lib/postgresql/<version>/bin or SLIPWAY_PG_BIN)`);
  return `${dir}/${cmd}`;
}
