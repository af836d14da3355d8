import { EventEmitter } from 'node:events';
import type { PGlite } from '@electric-sql/pglite';

/**
 * A `pg`-shaped driver over one PGlite instance, handed to TypeORM's Postgres driver.
 *
 * PGlite is a single session: two transactions that interleave on it are one
 * transaction, and writes are silently lost (the failure of the off-the-shelf
 * typeorm-pglite adapter, which also shares one global instance per process). So this
 * pool has exactly one connection per PGlite instance, and `connect()` queues callers:
 * a unit of work (one query, or a whole transaction) owns the session from `connect`
 * until `release`, and the next one starts only then.
 */
export function pgliteDriver(pglite: PGlite): { Pool: new () => unknown; defaults: object } {
  const waiting: Array<() => void> = [];
  let busy = false;
  let ended = false;

  function acquire(): Promise<void> {
    if (!busy) {
      busy = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => waiting.push(resolve));
  }
  function releaseSession() {
    const next = waiting.shift();
    if (next) next();
    else busy = false;
  }

  class Connection extends EventEmitter {
    query(text: string, paramsOrCallback?: unknown, callback?: (err: unknown, result?: unknown) => void): Promise<unknown> | void {
      const params = typeof paramsOrCallback === 'function' ? undefined : (paramsOrCallback as unknown[] | undefined);
      const cb = typeof paramsOrCallback === 'function' ? (paramsOrCallback as typeof callback) : callback;
      const run = runQuery(text, params);
      if (cb) {
        run.then((result) => cb(null, result), (error) => cb(error));
        return;
      }
      return run;
    }
  }

  async function runQuery(text: string, params?: unknown[]) {
    const command = /^\s*(\w+)/.exec(text)?.[1]?.toUpperCase() ?? '';
    if (params && params.length > 0) {
      const result = await pglite.query(text, params);
      return { rows: result.rows, rowCount: result.affectedRows ?? result.rows.length, command };
    }
    // No parameters: allow several statements (migrations), as pg's simple protocol does.
    const results = await pglite.exec(text);
    const last = results[results.length - 1];
    return { rows: last?.rows ?? [], rowCount: last?.affectedRows ?? last?.rows.length ?? 0, command };
  }

  class Pool extends EventEmitter {
    connect(callback?: (err: unknown, connection?: Connection, release?: () => void) => void): Promise<Connection> | void {
      const ready = ended ? Promise.reject(new Error('the embedded database is closed')) : acquire();
      const connection = new Connection();
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        releaseSession();
      };
      if (callback) {
        ready.then(() => callback(null, connection, release), (error) => callback(error));
        return;
      }
      return ready.then(() => Object.assign(connection, { release }));
    }
    end(callback?: (err?: unknown) => void) {
      ended = true;
      callback?.();
      return Promise.resolve();
    }
  }

  return { Pool, defaults: {} };
}
