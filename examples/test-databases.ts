/**
 * The test-harness case: each jest worker gets a throwaway database of its own, on one
 * PostgreSQL server. A custom blueprint, written against the public API only:
 *
 * - the resource is the server (one, `maxResources: 1`); `allocateResource` checks that it
 *   answers, and asks to be called again later while it does not;
 * - each lease is one database, named after the lease: `CREATE DATABASE` in `activateLease`,
 *   `DROP DATABASE ... WITH (FORCE)` in `destroyLease` (which also ends any connection a
 *   test left open). Both are idempotent: an activation resumed after a crash drops what
 *   the interrupted one may have created, and dropping what is gone is success;
 * - `lease.interface('postgres').url` is the database's connection URL. It is built from
 *   the config on each call, so the server's password is never stored in slipway's tables.
 *
 * The server's login must be allowed to create databases (`CREATEDB`). Run it with one:
 *
 *   TEST_DATABASE_SERVER=postgres://user:password@127.0.0.1:5432/postgres npx tsx examples/test-databases.ts
 *
 * In jest, a global setup takes one lease per worker and hands each worker its URL through
 * the environment; the teardown releases them, which drops the databases. This is
 * examples/readme/jest-global-setup.js, the README's sample:
 *
 *   // jest.config.js: globalSetup: './jest-global-setup.js', globalTeardown: './jest-global-teardown.js',
 *   // where jest-global-teardown.js is: export { globalTeardown as default } from './jest-global-setup.js';
 *   import { createBroker } from 'slipway';
 *   import { testDatabases } from '../test-databases.js'; // examples/test-databases.ts, in your project
 *
 *   // One database per jest worker; a worker reads process.env[`TEST_DATABASE_URL_${process.env.JEST_WORKER_ID}`].
 *   export default async function globalSetup(config) {
 *     const serverUrl = process.env.TEST_DATABASE_SERVER; // a login that may CREATE DATABASE
 *     const broker = await createBroker({ blueprints: [testDatabases({ name: 'test-db', config: { serverUrl } })] });
 *     const workers = Array.from({ length: config.maxWorkers }, (_, i) => i + 1);
 *     const leases = await Promise.all(workers.map((id) => broker.acquire({ type: 'test-database', owner: `jest-worker-${id}`, timeout: { minutes: 1 } })));
 *     for (const [i, lease] of leases.entries()) process.env[`TEST_DATABASE_URL_${i + 1}`] = lease.interface('postgres').url;
 *     globalThis.testDatabases = { broker, leases }; // what globalTeardown sees
 *   }
 *
 *   // Drops the databases: each lease's destroy runs DROP DATABASE ... WITH (FORCE).
 *   export async function globalTeardown() {
 *     const { broker, leases } = globalThis.testDatabases;
 *     await Promise.all(leases.map((lease) => lease.release()));
 *     await broker.close();
 *   }
 */
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { createBroker, defineBlueprint, RetryLater, ValidationError } from 'slipway';

/** `testDatabases({ config })`. */
export type TestDatabasesConfig = {
  /** A connection URL of the server, as a login that may `CREATE DATABASE`. */
  serverUrl: string;
  /** The start of every database name. @defaultValue `test_` */
  prefix?: string;
};

/** What the lease's `postgres` interface offers. */
export interface PostgresInterface {
  /** The connection URL of the lease's own database. */
  url: string;
}

type ServerAttributes = { host: string; port: string };
type DatabaseAttributes = { database: string };

/** The server URL with another database in its path. */
function urlOf(serverUrl: string, database: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

/** One statement on the server's own database, on a connection of its own. */
async function onServer(serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

// Lease ids are letters, digits and "_"; a quoted identifier keeps their case.
const databaseName = (prefix: string, leaseId: string) => `${prefix}${leaseId}`;
const quoted = (name: string) => `"${name.replaceAll('"', '""')}"`;

const implementation = defineBlueprint<TestDatabasesConfig, ServerAttributes, DatabaseAttributes>({
  type: 'test-database',
  description: 'A throwaway PostgreSQL database per lease, on one server: created when the lease activates, dropped when it is destroyed.',

  validateConfig(config) {
    const c = (config ?? {}) as Partial<TestDatabasesConfig>;
    if (typeof c.serverUrl !== 'string' || !/^postgres(ql)?:\/\//.test(c.serverUrl)) throw new ValidationError('config.serverUrl', 'must be a postgres:// URL');
    const prefix = c.prefix ?? 'test_';
    if (!/^[a-z_][a-z0-9_]{0,29}$/.test(prefix)) throw new ValidationError('config.prefix', 'must be 1 to 30 lower-case letters, digits and "_", not starting with a digit');
    return { serverUrl: c.serverUrl, prefix };
  },

  async allocateResource(ctx) {
    try {
      await onServer(ctx.blueprint.config.serverUrl, 'SELECT 1');
    } catch (error) {
      throw new RetryLater(`the server does not answer yet: ${(error as Error).message}`, { seconds: 2 });
    }
    const { hostname, port } = new URL(ctx.blueprint.config.serverUrl);
    return { attributes: { host: hostname, port: port || '5432' } };
  },

  async activateLease(ctx) {
    const { serverUrl, prefix } = ctx.blueprint.config;
    const database = databaseName(prefix!, ctx.lease.id);
    // The interrupted activation may have created it: start from nothing, so it is empty.
    if (ctx.resume) await onServer(serverUrl, `DROP DATABASE IF EXISTS ${quoted(database)} WITH (FORCE)`);
    await onServer(serverUrl, `CREATE DATABASE ${quoted(database)}`);
    await ctx.log('test-databases.created', { database });
    return { attributes: { database } };
  },

  // Named after the lease, not read from its attributes: the requester writes those too.
  async destroyLease(ctx) {
    const database = databaseName(ctx.blueprint.config.prefix!, ctx.lease.id);
    await onServer(ctx.blueprint.config.serverUrl, `DROP DATABASE IF EXISTS ${quoted(database)} WITH (FORCE)`);
    await ctx.log('test-databases.dropped', { database });
  },

  interfaces: {
    postgres: (ctx): PostgresInterface => ({ url: urlOf(ctx.blueprint.config.serverUrl, databaseName(ctx.blueprint.config.prefix!, ctx.lease.id)) }),
  },

  logTypes: {
    'test-databases.created': (data) => `Database ${String(data.database)} created.`,
    'test-databases.dropped': (data) => `Database ${String(data.database)} dropped.`,
  },
});

/** Throwaway databases (type `test-database`) on one server: `testDatabases({ name: 'test-db', config: { serverUrl } })`. */
export const testDatabases = (options: Parameters<typeof implementation>[0]) => implementation({ ...options, limits: { maxResources: 1, ...options.limits } });

// Run as a program: three databases at once, each used, then dropped.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const serverUrl = process.env.TEST_DATABASE_SERVER;
  if (!serverUrl) throw new Error('set TEST_DATABASE_SERVER to a postgres:// URL of a login that may CREATE DATABASE');
  await using broker = await createBroker({ blueprints: [testDatabases({ name: 'test-db', config: { serverUrl } })] });
  const leases = await Promise.all([1, 2, 3].map((worker) => broker.acquire({ type: 'test-database', owner: `worker-${worker}`, timeout: { minutes: 1 } })));
  for (const lease of leases) {
    const client = new pg.Client({ connectionString: lease.interface<PostgresInterface>('postgres').url });
    await client.connect();
    const { rows } = await client.query<{ db: string }>('SELECT current_database() AS db');
    await client.end();
    console.log(`${lease.owner} has database ${rows[0]!.db}`);
  }
  await Promise.all(leases.map((lease) => lease.release()));
  console.log('released: the three databases are dropped');
}
