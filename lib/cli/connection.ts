import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { Broker, DatabaseOptions } from '../index.js';
import type { SlipwayConfig } from './config.js';
import { parseCliDuration } from './durations.js';
import { CliFailure, UsageError } from './errors.js';
import { library } from './library.js';

/** The connection flags every command that opens the database takes. */
export interface ConnectionFlags {
  database?: string;
  schema?: string;
  dataDir?: string;
  connectTimeout?: string;
}

export function addConnectionOptions(command: Command): Command {
  return command
    .option('--database <url>', 'a PostgreSQL connection string (default: $SLIPWAY_DATABASE_URL)')
    .option('--schema <name>', 'the schema of slipway\'s tables on --database (default: slipway)')
    .option('--data-dir <dir>', 'an embedded database on disk instead (one process at a time)')
    .option('--connect-timeout <duration>', 'how long to retry an unreachable server', '10s');
}

/** `postgres://user:secret@host/db` without the password, for messages. */
export function redactUrl(url: string): string {
  return url.replace(/^(\w+:\/\/[^:/@]+):[^@]*@/, '$1:***@');
}

/**
 * The database the flags name: `--database` (or $SLIPWAY_DATABASE_URL), or `--data-dir`,
 * else the config module's `database`. `mustExist`: a read or a command on a data
 * directory that is not there is a typo, not a request for a new empty database.
 */
export function databaseFrom(flags: ConnectionFlags, config: SlipwayConfig | undefined, mustExist: boolean): DatabaseOptions {
  if (flags.database && flags.dataDir) throw new UsageError('give --database or --data-dir, not both');
  const url = flags.database ?? (flags.dataDir ? undefined : process.env.SLIPWAY_DATABASE_URL || undefined);
  const reconnectTimeout = parseCliDuration(flags.connectTimeout ?? '10s', '--connect-timeout');
  if (url) {
    if (!/^postgres(ql)?:\/\//.test(url)) throw new UsageError(`--database: ${JSON.stringify(redactUrl(url))} is not a postgres:// connection string`);
    return { url, schema: flags.schema ?? 'slipway', poolSize: 4, reconnectTimeout, applicationName: 'slipway-cli' };
  }
  if (flags.dataDir) {
    const dataDir = resolve(flags.dataDir);
    if (mustExist && !existsSync(dataDir)) throw new CliFailure(`--data-dir: ${dataDir} does not exist (slipway migrate --data-dir ${flags.dataDir} creates a database there)`);
    if (flags.schema) throw new UsageError('--schema goes with --database; an embedded --data-dir has one schema');
    return { embedded: true, dataDir };
  }
  if (config?.database) return config.database;
  throw new UsageError('no database: give --database URL (or set SLIPWAY_DATABASE_URL) or --data-dir DIR');
}

/** Opens a broker, turning the errors of opening into one line a person can act on. */
export async function openBroker(database: DatabaseOptions, options: Omit<SlipwayConfig, 'database'> & { migrate?: boolean } = {}): Promise<Broker> {
  const { migrate, ...rest } = options;
  const db = migrate === undefined ? database : { ...database, migrate };
  const { createBroker, DataDirLockedError, SchemaNotMigratedError } = await library();
  try {
    return await createBroker({ workers: false, gcInterval: false, ...rest, database: db } as SlipwayConfig);
  } catch (error) {
    if (error instanceof DataDirLockedError) {
      throw new CliFailure(`${error.dataDir} is in use by process ${error.pid} on ${error.hostname}: an embedded data directory is open in one process at a time (stop that process, or share a --database URL)`, { cause: error });
    }
    if (error instanceof SchemaNotMigratedError) {
      throw new CliFailure(`schema ${JSON.stringify(error.schema)} is not migrated for this version of slipway: run slipway migrate first`, { cause: error });
    }
    if ('url' in database && isUnreachable(error)) {
      throw new CliFailure(`cannot reach the database at ${redactUrl(database.url)}: ${(error as Error).message}`, { cause: error });
    }
    throw error;
  }
}

function isUnreachable(error: unknown): boolean {
  for (let e: any = error, depth = 0; e && depth < 5; e = e.cause ?? e.driverError, depth++) {
    const code = typeof e.code === 'string' ? e.code : '';
    if (/^(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|EHOSTUNREACH|ECONNRESET)$/.test(code) || code.startsWith('08') || code === '28P01' || code === '3D000') return true;
  }
  return false;
}
