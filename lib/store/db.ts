import type { DataSource, QueryRunner } from 'typeorm';
import { isConnectionError, isTransientConflict } from './connection-errors.js';

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
  close(): Promise<void>;
}

export interface DbOptions {
  embedded: boolean;
  onClose?: () => Promise<void>;
  /**
   * How long a statement or unit of work keeps retrying while the server is
   * unreachable (a restart, a failover). 0 turns retrying off.
   */
  reconnectFor?: number;
  /** Told once per outage, when the first retry starts and when the server answers again. */
  onOutage?: (state: 'lost' | 'back', error?: unknown) => void;
}

function runnerSql(runner: QueryRunner): Sql {
  return {
    async query(text, params) {
      const result = await runner.query(text, params, true);
      return result.records as any[];
    },
    async execute(text, params) {
      const result = await runner.query(text, params, true);
      return result.affected ?? 0;
    },
  };
}

/** Thrown when a COMMIT's outcome is unknown: the connection died while it was in flight. */
export class CommitOutcomeUnknownError extends Error {
  constructor(cause: unknown) {
    super('the connection was lost while committing; the transaction may or may not have committed', { cause });
    this.name = 'CommitOutcomeUnknownError';
  }
}

export function createDb(dataSource: DataSource, schema: string, options: DbOptions): Db {
  const { embedded, onClose, reconnectFor = 0, onOutage } = options;
  let closed = false;
  let outage = false;

  async function withRunner<T>(work: (runner: QueryRunner) => Promise<T>): Promise<T> {
    const runner = dataSource.createQueryRunner();
    let failure: unknown;
    try {
      return await work(runner);
    } catch (error) {
      failure = error;
      throw error;
    } finally {
      // A connection that failed goes back with its error, so the pool drops it instead of reusing it.
      await (runner as any).release(failure && isConnectionError(failure) ? failure : undefined).catch?.(() => undefined);
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
        if (!closed && isTransientConflict(error) && conflicts++ < 5) {
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
    query: (text, params) => retrying(() => withRunner((runner) => runnerSql(runner).query(text, params))),
    execute: (text, params) => retrying(() => withRunner((runner) => runnerSql(runner).execute(text, params))),
    transaction: (work) =>
      retrying(() =>
        withRunner(async (runner) => {
          await runner.startTransaction();
          let result: Awaited<ReturnType<typeof work>>;
          try {
            result = await work(runnerSql(runner));
          } catch (error) {
            if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
            throw error;
          }
          try {
            await runner.commitTransaction();
          } catch (error) {
            throw isConnectionError(error) ? new CommitOutcomeUnknownError(error) : error;
          }
          return result;
        }),
      ),
    async close() {
      closed = true;
      if (dataSource.isInitialized) await dataSource.destroy();
      await onClose?.();
    },
  };
}
