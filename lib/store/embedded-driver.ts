import { EventEmitter } from 'node:events';
import { protocol, type PGlite } from '@electric-sql/pglite';

/** A statement as `pg` takes it: with a `name`, it is parsed and planned once per session and then only bound and executed. */
export interface NamedQuery {
  name: string;
  text: string;
  values?: unknown[];
}

interface Prepared {
  name: string;
  paramTypes: number[];
  fields: Array<{ name: string; dataTypeID: number }>;
}

/**
 * Bench-only: told of every named statement run (text, parameters, milliseconds, rows, and
 * the PGlite instance it ran on).
 * Not reachable from the package exports; with none set it costs one comparison.
 */
let observer: ((text: string, params: unknown[], ms: number, rows: number, session: PGlite) => void) | null = null;

export function observeNamedStatements(fn: typeof observer): void {
  observer = fn;
}

/** More distinct statement texts than the library has means something generates them: stop keeping them. */
const MAX_PREPARED = 1_000;

/**
 * A `pg`-shaped driver over one PGlite instance, handed to TypeORM's Postgres driver.
 *
 * PGlite is a single session: two transactions that interleave on it are one
 * transaction, and writes are silently lost (the failure of the off-the-shelf
 * typeorm-pglite adapter, which also shares one global instance per process). So this
 * pool has exactly one connection per PGlite instance, and `connect()` queues callers:
 * a unit of work (one query, or a whole transaction) owns the session from `connect`
 * until `release`, and the next one starts only then.
 *
 * A named query (`{ name, text, values }`, as `pg` takes it) is parsed and planned once
 * per instance and then runs as one Bind/Execute/Sync exchange with the WASM backend:
 * PGlite's own `query()` makes six exchanges and re-parses every time, which costs
 * several times the statement itself.
 */
export function pgliteDriver(pglite: PGlite): { Pool: new () => unknown; defaults: object } {
  const waiting: Array<() => void> = [];
  let busy = false;
  let ended = false;
  const prepared = new Map<string, Prepared>();

  // PGlite answers without any I/O, on the microtask queue: a worker that ran unit after
  // unit on it would never let the host's timers or sockets run. Each unit of work takes
  // the session on a new turn of the event loop (setImmediate) instead (invariant 8).
  function acquire(): Promise<void> {
    if (!busy) {
      busy = true;
      return new Promise((resolve) => setImmediate(resolve));
    }
    return new Promise((resolve) => waiting.push(resolve));
  }
  function releaseSession() {
    const next = waiting.shift();
    if (next) setImmediate(next);
    else busy = false;
  }

  class Connection extends EventEmitter {
    query(query: string | NamedQuery, paramsOrCallback?: unknown, callback?: (err: unknown, result?: unknown) => void): Promise<unknown> | void {
      const params = typeof paramsOrCallback === 'function' ? undefined : (paramsOrCallback as unknown[] | undefined);
      const cb = typeof paramsOrCallback === 'function' ? (paramsOrCallback as typeof callback) : callback;
      const run = typeof query === 'string' ? runQuery(query, params) : runNamed(query);
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

  async function prepare(query: NamedQuery): Promise<Prepared | null> {
    const known = prepared.get(query.text);
    if (known) return known;
    if (prepared.size >= MAX_PREPARED) return null;
    const name = `${query.name}_${prepared.size}`;
    const messages = await pglite.execProtocolStream(concat(protocol.serialize.parse({ name, text: query.text }), protocol.serialize.describe({ type: 'S', name }), protocol.serialize.sync()), { syncToFs: false });
    const entry: Prepared = {
      name,
      paramTypes: (messages.find((m) => m.name === 'parameterDescription') as { dataTypeIDs?: number[] } | undefined)?.dataTypeIDs ?? [],
      fields: (messages.find((m) => m.name === 'rowDescription') as { fields?: Prepared['fields'] } | undefined)?.fields ?? [],
    };
    prepared.set(query.text, entry);
    return entry;
  }

  async function runNamed(query: NamedQuery) {
    if (!observer) return runPrepared(query);
    const started = performance.now();
    const values = query.values ?? [];
    let rows = 0;
    try {
      const result = await runPrepared(query);
      rows = result.rows.length;
      return result;
    } finally {
      observer?.(query.text, values, performance.now() - started, rows, pglite);
    }
  }

  async function runPrepared(query: NamedQuery) {
    const values = query.values ?? [];
    const statement = await prepare(query);
    if (!statement) return runQuery(query.text, values);
    const bound = values.map((value, i) => {
      if (value === null || value === undefined) return null;
      const serializer = pglite.serializers[statement.paramTypes[i]!];
      return serializer ? serializer(value) : String(value);
    });
    const messages = await pglite.execProtocolStream(concat(protocol.serialize.bind({ statement: statement.name, values: bound }), protocol.serialize.execute({}), protocol.serialize.sync()));
    const rows: Array<Record<string, unknown>> = [];
    let rowCount = 0;
    let command = '';
    for (const message of messages as Array<{ name: string; fields?: Array<string | null>; text?: string }>) {
      if (message.name === 'dataRow') {
        const row: Record<string, unknown> = {};
        message.fields!.forEach((value, i) => {
          const field = statement.fields[i]!;
          const parser = pglite.parsers[field.dataTypeID];
          row[field.name] = value === null ? null : parser ? parser(value, field.dataTypeID) : value;
        });
        rows.push(row);
      } else if (message.name === 'commandComplete') {
        // "INSERT 0 3", "UPDATE 2", "SELECT 5": the last number is the row count.
        const words = message.text!.split(' ');
        command = words[0]!;
        rowCount = Number(words[words.length - 1]) || 0;
      }
    }
    return { rows, rowCount, command };
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

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
