import pg from 'pg';

/**
 * An outside session that takes row locks in a transaction and holds them, so that a test
 * can stop the broker at a write, and count the sessions that wait for those locks.
 *
 * The count is read on a second connection. `pg_stat_activity` is read once per
 * transaction and kept until it ends: read inside the holding transaction, it never listed
 * a session that connected after the first read, so a pool's new connection waiting for
 * the lock went uncounted (a flake under load, where the pool grows at that moment).
 */
export interface LockHolder {
  /** Runs a statement in the holding transaction (begun by `lockHolder`). */
  query(text: string, params?: unknown[]): Promise<pg.QueryResult>;
  /**
   * The sessions that wait for the holder's locks; with `queued`, also those in line behind
   * one of them (the second to want a row waits for the first waiter's tuple lock).
   */
  waiters(options?: { queued?: boolean }): Promise<number>;
  commit(): Promise<void>;
  /** Rolls back what is still open and closes both connections. */
  end(): Promise<void>;
}

export async function lockHolder(url: string, applicationName: string): Promise<LockHolder> {
  const holder = new pg.Client({ connectionString: url, application_name: applicationName });
  const observer = new pg.Client({ connectionString: url, application_name: `${applicationName}-observer` });
  await holder.connect();
  await observer.connect().catch(async (e) => {
    await holder.end();
    throw e;
  });
  const [{ pid }] = (await holder.query('SELECT pg_backend_pid() AS pid')).rows;
  await holder.query('BEGIN');
  return {
    query: (text, params) => holder.query(text, params),
    async waiters({ queued = false } = {}) {
      const { rows } = await observer.query(
        `WITH first AS (SELECT pid FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))
         SELECT (SELECT count(*) FROM first)
           + CASE WHEN $2 THEN (SELECT count(*) FROM pg_stat_activity WHERE NOT $1::int = ANY (pg_blocking_pids(pid)) AND pg_blocking_pids(pid) && ARRAY(SELECT pid FROM first)) ELSE 0 END AS n`,
        [pid, queued],
      );
      return Number(rows[0].n);
    },
    async commit() {
      await holder.query('COMMIT');
    },
    async end() {
      await holder.query('ROLLBACK').catch(() => undefined);
      await Promise.all([holder.end(), observer.end()]);
    },
  };
}
