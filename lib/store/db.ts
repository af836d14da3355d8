import type { DataSource, QueryRunner } from 'typeorm';

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

export function createDb(dataSource: DataSource, schema: string, embedded: boolean, onClose?: () => Promise<void>): Db {
  async function withRunner<T>(work: (runner: QueryRunner) => Promise<T>): Promise<T> {
    const runner = dataSource.createQueryRunner();
    try {
      return await work(runner);
    } finally {
      await runner.release();
    }
  }
  return {
    dataSource,
    schema,
    embedded,
    query: (text, params) => withRunner((runner) => runnerSql(runner).query(text, params)),
    execute: (text, params) => withRunner((runner) => runnerSql(runner).execute(text, params)),
    transaction: (work) =>
      withRunner(async (runner) => {
        await runner.startTransaction();
        try {
          const result = await work(runnerSql(runner));
          await runner.commitTransaction();
          return result;
        } catch (error) {
          if (runner.isTransactionActive) await runner.rollbackTransaction().catch(() => undefined);
          throw error;
        }
      }),
    async close() {
      if (dataSource.isInitialized) await dataSource.destroy();
      await onClose?.();
    },
  };
}
