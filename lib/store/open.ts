import { existsSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { DataSource } from 'typeorm';
import type { PostgresDataSourceOptions as PostgresConnectionOptions } from 'typeorm/driver/postgres/PostgresDataSourceOptions.js';
import { ValidationError } from '../errors/validation-error.js';
import { parseDuration, type DurationInput } from '../time.js';
import { localDirectory, LOCK_FILE, lockDataDir, type StaleLock } from './data-dir-lock.js';
import { createDb, type Db, type DbOptions } from './db.js';
import { pgliteAssets } from './embedded-assets.js';
import { pgliteDriver } from './embedded-driver.js';
import { checkMigrated, migrate } from './migrate.js';
import { templateCache } from './template-cache.js';
import { quoteIdent } from './sql/statements.js';

export type DatabaseOptions =
  | {
      /** PGlite in this process. */
      embedded: true;
      /**
       * Keep the data here; in memory when omitted. One broker per directory at a time: a
       * second opener, in any process, gets DataDirLockedError (the lock file is `slipway.lock`
       * in the directory; the lock of a process that died is taken over).
       */
      dataDir?: string;
      /** @defaultValue 'slipway' */
      schema?: string;
      /** @defaultValue true */
      migrate?: boolean;
    }
  | {
      /** A PostgreSQL connection string. */
      url: string;
      /** @defaultValue 'slipway' */
      schema?: string;
      /** Create the schema and run migrations on start. @defaultValue true */
      migrate?: boolean;
      /** Connections in the pool for claims and units of work; the broker opens one more for LISTEN. @defaultValue 10 */
      poolSize?: number;
      /**
       * How long a statement keeps retrying while the server is unreachable (a restart,
       * a failover) before the error surfaces. @defaultValue 60 seconds
       */
      reconnectTimeout?: DurationInput;
      /** `application_name` of every connection, as seen in `pg_stat_activity`. @defaultValue 'slipway' */
      applicationName?: string;
    }
  | {
      /**
       * The host app's TypeORM DataSource: PostgreSQL (`type: 'postgres'`), already
       * initialized. slipway runs its units of work on that DataSource's pool instead of
       * opening a second one, and neither destroys it on close nor changes its settings.
       * Its LISTEN connection is a dedicated `pg` client made from the DataSource's
       * connection options (`url`, or `host`, `port`, `username`, `password`, `database`, `ssl`).
       * With `migrate: false`, run `slipwayMigrations()` of `slipway/typeorm` in the app's
       * own migrations first.
       */
      dataSource: DataSource;
      /** @defaultValue 'slipway' */
      schema?: string;
      /** Create the schema and run migrations on start. @defaultValue true */
      migrate?: boolean;
      /** How long a statement keeps retrying while the server is unreachable. @defaultValue 60 seconds */
      reconnectTimeout?: DurationInput;
      /** `application_name` of the LISTEN connection (the pool's connections keep the DataSource's). @defaultValue 'slipway' */
      applicationName?: string;
    };

const URL_KEYS = new Set(['url', 'schema', 'migrate', 'poolSize', 'reconnectTimeout', 'applicationName']);
const DATA_SOURCE_KEYS = new Set(['dataSource', 'schema', 'migrate', 'reconnectTimeout', 'applicationName']);
const EMBEDDED_KEYS = new Set(['embedded', 'dataDir', 'schema', 'migrate']);

export function checkDatabaseOptions(options: unknown): DatabaseOptions {
  if (options === undefined) return { embedded: true };
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw new ValidationError('database', 'must be { embedded: true, dataDir? } or { url, schema? }');
  const o = options as Record<string, unknown>;
  if ('url' in o && 'embedded' in o) throw new ValidationError('database.embedded', 'give database.url or database.embedded, not both');
  if ('dataSource' in o && ('url' in o || 'embedded' in o)) throw new ValidationError('database.dataSource', `give database.dataSource or database.${'url' in o ? 'url' : 'embedded'}, not both`);
  const known = 'dataSource' in o ? DATA_SOURCE_KEYS : 'url' in o ? URL_KEYS : EMBEDDED_KEYS;
  for (const key of Object.keys(o)) {
    if (!known.has(key)) {
      throw new ValidationError(`database.${key}`, `is not an option of ${'dataSource' in o ? 'a TypeORM DataSource' : 'url' in o ? 'a database url' : 'the embedded database'} (known: ${[...known].join(', ')})`);
    }
  }
  if (o.schema !== undefined) {
    if (typeof o.schema !== 'string') throw new ValidationError('database.schema', `must be a string (got ${typeof o.schema})`);
    try {
      quoteIdent(o.schema);
    } catch {
      throw new ValidationError('database.schema', `must be a plain identifier (got ${JSON.stringify(o.schema)})`);
    }
    // CREATE SCHEMA refuses these: the names are reserved for the system catalogs.
    if (/^pg_/i.test(o.schema)) throw new ValidationError('database.schema', `must not start with pg_, which PostgreSQL reserves (got ${JSON.stringify(o.schema)})`);
  }
  if (o.migrate !== undefined && typeof o.migrate !== 'boolean') throw new ValidationError('database.migrate', 'must be a boolean');
  if ('dataSource' in o) {
    checkDataSource(o.dataSource);
    if (o.reconnectTimeout !== undefined) parseDuration(o.reconnectTimeout as DurationInput, 'database.reconnectTimeout');
    if (o.applicationName !== undefined && (typeof o.applicationName !== 'string' || o.applicationName.length > 63 || o.applicationName.includes('\0'))) {
      throw new ValidationError('database.applicationName', 'must be a string of at most 63 characters, without NUL');
    }
    return o as DatabaseOptions;
  }
  if ('url' in o) {
    if (typeof o.url !== 'string' || !/^postgres(ql)?:\/\//.test(o.url)) throw new ValidationError('database.url', 'must be a postgres:// connection string');
    checkConnectionString(o.url);
    if (o.poolSize !== undefined && !(Number.isInteger(o.poolSize) && (o.poolSize as number) >= 1 && (o.poolSize as number) <= 1000)) {
      throw new ValidationError('database.poolSize', 'must be an integer from 1 to 1000');
    }
    if (o.reconnectTimeout !== undefined) parseDuration(o.reconnectTimeout as DurationInput, 'database.reconnectTimeout');
    if (o.applicationName !== undefined && (typeof o.applicationName !== 'string' || o.applicationName.length > 63)) {
      throw new ValidationError('database.applicationName', 'must be a string of at most 63 characters');
    }
    if (typeof o.applicationName === 'string' && o.applicationName.includes('\0')) throw new ValidationError('database.applicationName', 'must not contain a NUL character');
    return o as DatabaseOptions;
  }
  if (o.embedded !== true) throw new ValidationError('database.embedded', 'must be true (or give database.url)');
  if (o.dataDir !== undefined) {
    if (typeof o.dataDir !== 'string' || o.dataDir === '') throw new ValidationError('database.dataDir', 'must be a directory path');
    if (o.dataDir.includes('\0')) throw new ValidationError('database.dataDir', 'must not contain a NUL character');
    // PGlite reports a file in the way as an opaque ErrnoError; a scheme (memory://) is PGlite's own business.
    if (!/^[a-z]+:\/\//i.test(o.dataDir) && existsSync(o.dataDir) && !statSync(o.dataDir).isDirectory()) {
      throw new ValidationError('database.dataDir', `${o.dataDir} exists and is not a directory`);
    }
  }
  return o as DatabaseOptions;
}

function checkDataSource(value: unknown): void {
  const ds = value as Partial<DataSource> | null;
  if (ds === null || typeof ds !== 'object' || typeof ds.createQueryRunner !== 'function' || typeof ds.options !== 'object') {
    throw new ValidationError('database.dataSource', 'must be a TypeORM DataSource');
  }
  if (ds.options.type !== 'postgres') throw new ValidationError('database.dataSource', `must be a PostgreSQL DataSource (type 'postgres'; got ${JSON.stringify(ds.options.type)})`);
  if (!ds.isInitialized) throw new ValidationError('database.dataSource', 'must be initialized: await dataSource.initialize() before createBroker');
}

/**
 * The LISTEN connection's settings: a connection string, or pg's client options, taken
 * from the database options (a DataSource's connection options for `{ dataSource }`).
 */
/** pg client settings of the LISTEN connection: pg's ClientConfig, declared here so that slipway's public types need no @types/pg. */
export interface ListenClientConfig {
  connectionString?: string;
  host?: string;
  port?: number;
  user?: string;
  password?: unknown;
  database?: string;
  ssl?: unknown;
}

export function listenConnection(options: DatabaseOptions): string | ListenClientConfig | undefined {
  if ('url' in options) return options.url;
  if (!('dataSource' in options)) return undefined;
  const o = options.dataSource.options as PostgresConnectionOptions;
  if (o.url) return { connectionString: o.url, ...(o.ssl !== undefined && { ssl: o.ssl as pg.ClientConfig['ssl'] }) };
  return {
    host: o.host,
    port: o.port,
    user: o.username,
    password: o.password as pg.ClientConfig['password'],
    database: o.database,
    ...(o.ssl !== undefined && { ssl: o.ssl as pg.ClientConfig['ssl'] }),
  };
}

/** What pg would otherwise fail on with a bare TypeError or URIError: a malformed URL, a bad port, broken %-escapes. */
function checkConnectionString(url: string): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ValidationError('database.url', 'is not a valid URL (check the port and the characters of the password)');
  }
  for (const [part, value] of [['user name', parsed.username], ['password', parsed.password], ['database name', parsed.pathname]] as const) {
    try {
      decodeURIComponent(value);
    } catch {
      throw new ValidationError('database.url', `has a malformed %-escape in its ${part}`);
    }
  }
}

/** `afterClose` runs once PGlite is closed, whether or not it closed cleanly (the dataDir lock's release). */
async function embeddedDb(pglite: PGlite, schema: string, afterClose?: () => void): Promise<Db> {
  const dataSource = new DataSource({ type: 'postgres', driver: pgliteDriver(pglite), installExtensions: false });
  try {
    await dataSource.initialize();
  } catch (error) {
    await pglite.close();
    throw error;
  }
  const onClose = async () => {
    try {
      await pglite.close();
    } finally {
      afterClose?.();
    }
  };
  return createDb(dataSource, schema, { embedded: true, onClose });
}

/**
 * An in-memory PGlite costs seconds to initdb but well under one to load from a dump.
 * Each in-memory broker still gets its own database: a copy of one migrated, empty
 * template per schema name, made once per process, or once per machine and user where
 * the template cache on disk (`template-cache.ts`) has it.
 */
const templates = new Map<string, Promise<Blob>>();

function migratedTemplate(schema: string): Promise<Blob> {
  let template = templates.get(schema);
  if (!template) {
    template = (async () => {
      const cache = await templateCache(schema);
      const cached = cache?.read();
      if (cached) return cached;
      const pglite = await PGlite.create(await pgliteAssets());
      const db = await embeddedDb(pglite, schema);
      try {
        await migrate(db);
        const made = (await pglite.dumpDataDir('none')) as Blob;
        await cache?.write(made);
        return made;
      } finally {
        await db.close();
      }
    })();
    templates.set(schema, template);
    template.catch(() => templates.delete(schema));
  }
  return template;
}

/** Left in a data directory while it is being made from the template: its presence means the copy did not finish. */
export const INCOMPLETE_MARKER = 'slipway-init.incomplete';

/**
 * A PGlite on `dataDir`. A new local directory is not initdb'd (seconds) but loaded from the
 * migrated template (well under one). The load writes many files: until it has finished,
 * the directory holds INCOMPLETE_MARKER, and an open that finds the marker (the process
 * died mid-copy) empties the directory and copies again. Nothing can be lost that way: the
 * marker goes only once the copy is whole, before any broker has written a row.
 */
async function openDataDir(dataDir: string, schema: string, migrated: boolean): Promise<PGlite> {
  const shared = await pgliteAssets();
  const dir = localDirectory(dataDir);
  // Another storage (memory://, idb://), or a database a user migrates himself: PGlite as it is.
  if (dir === null || !migrated) return PGlite.create({ ...shared, dataDir });
  const marker = join(dir, INCOMPLETE_MARKER);
  if (existsSync(marker)) {
    for (const name of readdirSync(dir)) if (name !== LOCK_FILE && name !== INCOMPLETE_MARKER) rmSync(join(dir, name), { recursive: true, force: true });
  } else if (existsSync(join(dir, 'PG_VERSION'))) {
    return PGlite.create({ ...shared, dataDir });
  }
  writeFileSync(marker, 'slipway is making this data directory; if this file is still here, the next open starts it over\n');
  const pglite = await PGlite.create({ ...shared, dataDir, loadDataDir: await migratedTemplate(schema) });
  rmSync(marker, { force: true });
  return pglite;
}

/**
 * Opens the database and brings its schema up to date (with `migrate: false`, checks that it is). Every embedded broker gets
 * its own PGlite instance, and holds the lock of its dataDir until it closes; `onStaleLock` hears of a lock taken over from
 * a process that is gone.
 */
export async function openDatabase(
  options: DatabaseOptions,
  onOutage?: DbOptions['onOutage'],
  onStaleLock?: (stale: StaleLock & { dataDir: string }) => void,
): Promise<Db> {
  const schema = options.schema ?? 'slipway';
  let db: Db;
  if ('dataSource' in options) {
    const reconnectFor = options.reconnectTimeout === undefined ? 60_000 : parseDuration(options.reconnectTimeout, 'database.reconnectTimeout').toMillis();
    db = createDb(options.dataSource, schema, { embedded: false, shared: true, reconnectFor, onOutage });
  } else if ('url' in options) {
    const dataSource = new DataSource({
      type: 'postgres',
      url: options.url,
      driver: pg,
      poolSize: options.poolSize ?? 10,
      applicationName: options.applicationName ?? 'slipway',
      installExtensions: false,
      // Tell a dead server apart from a slow one; a unit of work is short by design.
      connectTimeoutMS: 10_000,
    });
    await dataSource.initialize();
    const reconnectFor = options.reconnectTimeout === undefined ? 60_000 : parseDuration(options.reconnectTimeout, 'database.reconnectTimeout').toMillis();
    db = createDb(dataSource, schema, { embedded: false, reconnectFor, onOutage });
  } else {
    // Before PGlite touches the directory: a refused opener has written nothing.
    const lock = options.dataDir ? lockDataDir(options.dataDir) : null;
    if (lock?.tookOver) onStaleLock?.({ dataDir: options.dataDir!, ...lock.tookOver });
    try {
      const shared = await pgliteAssets();
      const pglite = options.dataDir
        ? await openDataDir(options.dataDir, schema, options.migrate !== false)
        : options.migrate === false
          ? await PGlite.create(shared)
          : await PGlite.create({ ...shared, loadDataDir: await migratedTemplate(schema) });
      db = await embeddedDb(pglite, schema, lock?.release);
    } catch (error) {
      lock?.release();
      throw error;
    }
  }
  try {
    if (options.migrate === false) await checkMigrated(db);
    else await migrate(db);
  } catch (error) {
    await db.close();
    throw error;
  }
  return db;
}
