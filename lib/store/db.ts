import { createHash } from 'node:crypto';
import { CommitOutcomeUnknownError } from '../errors/commit-outcome-unknown-error.js';
import type { DataSource } from 'typeorm';
import { isConnectionError, isStalePlan, isTransientConflict } from './connection-errors.js';

/** One statement runner: the whole database, or one open transaction. */
export interface Sql {
  /** Runs one statement and returns its rows (for `UPDATE ... RETURNING`, the updated rows). */
  query<T = Record<string, any>>(text: string, params?: unknown[]): Promise<T[]>;
  /** Runs one statement and returns the number of rows it affected. */
  execute(text: string, params?: unknown[]): Promise<number>;
}

/**
 * The store's handle on a database: TypeORM's DataSource for schema and repository
 * reads, plus short units of work. A unit of work never spans a blueprint hook.
 */
export interface Db extends Sql {
  readonly dataSource: DataSource;
  readonly schema: string;
  readonly embedded: boolean;
  transaction<T>(work: (tx: Sql) => Promise<T>): Promise<T>;
  /**
   * Runs one write statement on its own (it commits by itself: one round trip instead of
   * BEGIN, statement, COMMIT). Retried while the server is unreachable only if it was
   * never sent; a connection lost while it ran leaves its outcome unknown and throws
   * CommitOutcomeUnknownError, as a lost COMMIT does.
   */
  write<T = Record<string, any>>(text: string, params?: unknown[]): Promise<{ rows: T[]; rowCount: number }>;
  close(): Promise<void>;
}

export interface DbOptions {
  embedded: boolean;
  onClose?: () => Promise<void>;
  /** The DataSource is the host app's (`database: { dataSource }`): close leaves it initialized. */
  shared?: boolean;
  /**
   * How long a statement or unit of work keeps retrying while the server is
   * unreachable (a restart, a failover). 0 turns retrying off.
   */
  reconnectFor?: number;
  /** Told once per outage, when the first retry starts and when the server answers again. */
  onOutage?: (state: 'lost' | 'back', error?: unknown) => void;
}

type QueryResult = { rows: any[]; rowCount: number | null };

/** A connection of the driver's pool, as `pg` (and our PGlite driver) hand it out. */
interface PoolClient {
  query(text: string, params?: unknown[]): Promise<QueryResult>;
  query(query: { name: string; text: string; values: unknown[] }): Promise<QueryResult>;
  on?(event: 'error', listener: (error: unknown) => void): unknown;
  off?(event: 'error', listener: (error: unknown) => void): unknown;
}

/** Statement names by text: the same text always gets the same name, on every connection. */
const names = new Map<string, string>();

function statementName(text: string): string {
  let name = names.get(text);
  if (!name) {
    name = `slipway_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
    if (names.size < 10_000) names.set(text, name);
  }
  return name;
}

/** Names whose prepared form a connection must not use again (see `run`). */
const stale = new WeakMap<PoolClient, Set<string>>();

/**
 * Runs one statement. With parameters it is a named (prepared) statement: parsed and
 * planned once per connection, then only bound and executed, which halves the cost of
 * the library's larger statements. A prepared `SELECT *` whose table gained a column
 * (a newer version migrated the schema while this one runs) fails with "cached plan must
 * not change result type"; that connection then sends the text each time.
 */
async function run(client: PoolClient, text: string, params?: unknown[]): Promise<QueryResult> {
  if (!params || params.length === 0) return client.query(text, params);
  const name = statementName(text);
  if (stale.get(client)?.has(name)) return client.query(text, params);
  try {
    return await client.query({ name, text, values: params });
  } catch (error) {
    if (!isStalePlan(error)) throw error;
    let names = stale.get(client);
    if (!names) stale.set(client, (names = new Set()));
    names.add(name);
    throw error;
  }
}

function clientSql(client: PoolClient): Sql {
  return {
    async query(text, params) {
      return (await run(client, text, params)).rows;
    },
    async execute(text, params) {
      return (await run(client, text, params)).rowCount ?? 0;
    },
  };
}

export { CommitOutcomeUnknownError };

export function createDb(dataSource: DataSource, schema: string, options: DbOptions): Db {
  const { embedded, onClose, shared = false, reconnectFor = 0, onOutage } = options;
  let closed = false;
  let outage = false;

  /**
   * One unit of work on a connection of TypeORM's pool, through a QueryRunner. Statements
   * go to the runner's underlying connection (`connect()` resolves to the driver's own
   * client: pg's, or our PGlite driver's) as named prepared statements: the hot path
   * needs none of `runner.query`'s logging and event broadcasting, which cost as much as
   * the statement itself on PGlite.
   */
  async function withClient<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    if (!dataSource.isInitialized) throw new Error('the database is closed');
    const runner = dataSource.createQueryRunner('master');
    let failure: unknown;
    // A connection that dies while lent out reports it as an 'error' event (the pool
    // listens only to idle ones): note it, so the connection is dropped on release.
    const onError = (error: unknown) => (failure ??= error);
    let client: PoolClient;
    try {
      client = (await runner.connect()) as PoolClient;
    } catch (error) {
      await runner.release().catch(() => undefined);
      throw error;
    }
    client.on?.('error', onError);
    try {
      return await work(client);
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      client.off?.('error', onError);
      // A connection that failed goes back with its error, so the pool drops it instead of
      // reusing it. Only the Postgres runner's (private) release takes the error.
      const dead = failure && isConnectionError(failure) ? failure : undefined;
      const withError = (runner as unknown as { releasePostgresConnection?: (err?: unknown) => Promise<void> }).releasePostgresConnection;
      await (dead && withError ? withError.call(runner, dead) : runner.release());
    }
  }

  /**
   * Runs `attempt` again, with backoff, while the error is a lost connection and the
   * outcome is known not to have happened: a statement outside a transaction that is
   * safe to repeat, or a transaction that failed before its COMMIT was sent.
   */
  async function retrying<T>(attempt: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + reconnectFor;
    let conflicts = 0;
    for (let delay = 50; ; delay = Math.min(delay * 2, 2_000)) {
      try {
        const result = await attempt();
        if (outage) {
          outage = false;
          onOutage?.('back');
        }
        return result;
      } catch (error) {
        // A deadlock or serialization failure rolled the whole transaction back: run it again.
        // So did a statement prepared before a schema change: it runs again unprepared.
        if (!closed && (isTransientConflict(error) || isStalePlan(error)) && conflicts++ < 5) {
          await new Promise((r) => setTimeout(r, 5 + Math.random() * 45));
          continue;
        }
        if (closed || error instanceof CommitOutcomeUnknownError || !isConnectionError(error) || Date.now() + delay > deadline) throw error;
        if (!outage) {
          outage = true;
          onOutage?.('lost', error);
        }
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  return {
    dataSource,
    schema,
    embedded,
    query: (text, params) => retrying(() => withClient((client) => clientSql(client).query(text, params))),
    write: (text, params) =>
      retrying(() =>
        withClient(async (client) => {
          try {
            const result = await run(client, text, params);
            return { rows: result.rows, rowCount: result.rowCount ?? 0 };
          } catch (error) {
            throw isConnectionError(error) ? new CommitOutcomeUnknownError(error) : error;
          }
        }),
      ),
    execute: (text, params) => retrying(() => withClient((client) => clientSql(client).execute(text, params))),
    transaction: (work) =>
      retrying(() =>
        withClient(async (client) => {
          await client.query('BEGIN');
          let result: Awaited<ReturnType<typeof work>>;
          try {
            result = await work(clientSql(client));
          } catch (error) {
            await client.query('ROLLBACK').catch(() => undefined);
            throw error;
          }
          try {
            await client.query('COMMIT');
          } catch (error) {
            throw isConnectionError(error) ? new CommitOutcomeUnknownError(error) : error;
          }
          return result;
        }),
      ),
    async close() {
      closed = true;
      if (!shared && dataSource.isInitialized) await dataSource.destroy();
      await onClose?.();
    },
  };
}

/** For a write that is run again after an unknown outcome: swallows that error only. */
export function unlessOutcomeUnknown(error: unknown): null {
  if (error instanceof CommitOutcomeUnknownError) return null;
  throw error;
}

/**
 * Runs an idempotent write again while the connection dies as it runs (its outcome
 * unknown): each new run finds what an earlier one may have written. A server that
 * restarts can kill more than one connection, the pool's idle ones included, so one
 * second run is not enough; the pauses let the pool drop the dead ones. Connections that
 * cannot be opened at all are waited for inside each run, up to reconnectTimeout.
 */
export async function writeAgainIfUnknown<T>(write: () => Promise<T>, attempts = 6): Promise<T> {
  for (let attempt = 1, pause = 50; ; attempt++, pause *= 2) {
    try {
      return await write();
    } catch (error) {
      if (!(error instanceof CommitOutcomeUnknownError) || attempt >= attempts) throw error;
      await new Promise((r) => setTimeout(r, pause));
    }
  }
}
