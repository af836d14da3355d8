import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { observeNamedStatements } from '../../lib/store/embedded-driver.js';

/**
 * Counts the statements the broker sends, without pg_stat_statements: wraps
 * `pg.Client.prototype.query` (every pooled connection TypeORM opens on Postgres),
 * PGlite's `query`/`exec`, and the embedded driver's prepared statements (through its
 * bench-only observer). While a window is open it records, per statement text, the
 * calls, the rows that came back, the time from send to answer as the client sees it
 * (round trip plus server time), and how many of them were writes outside a transaction:
 * with each BEGIN, those are the commits (`transactions`).
 */
export interface StatementStat {
  key: string;
  calls: number;
  totalMs: number;
  rows: number;
  /** Calls that wrote outside a transaction: each committed by itself. */
  standalone: number;
  /** The full text and parameters of one call, for EXPLAIN ANALYZE. */
  sample: { text: string; params: unknown[] };
}

/** One statement as it was sent, in order, for a replay (see `StatementCounter.recordSequence`). */
export interface SequencedStatement {
  text: string;
  params: unknown[];
  rows: number;
  /** Sent as a named (prepared) statement by the embedded driver. */
  named: boolean;
  /** The pg client or PGlite instance it ran on. */
  session: object;
}

export interface CounterSnapshot {
  cycles: number;
  statements: number;
  transactions: number;
  /** Sum of statement times; statements of concurrent units overlap, so this can exceed the wall time. */
  statementMs: number;
  wallMs: number;
  perCycle: { statements: number; transactions: number; statementMs: number; wallMs: number };
  top: Array<{ statement: string; callsPerCycle: number; msPerCycle: number; rowsPerCall: number }>;
}

let current: StatementCounter | null = null;
let installed = false;
/** Connections (pg clients, PGlite instances) between a BEGIN and its COMMIT or ROLLBACK. */
const inTransaction = new WeakSet<object>();

function track(session: object, text: string): boolean {
  const within = inTransaction.has(session);
  if (/^\s*(BEGIN|START TRANSACTION)/i.test(text)) inTransaction.add(session);
  else if (/^\s*(COMMIT|ROLLBACK)/i.test(text)) inTransaction.delete(session);
  return within;
}

function install() {
  if (installed) return;
  installed = true;
  const proto = pg.Client.prototype as any;
  const pgQuery = proto.query;
  proto.query = function (config: any, values?: any, callback?: any) {
    const counter = current;
    if (!counter) return pgQuery.call(this, config, values, callback);
    const text = typeof config === 'string' ? config : config?.text;
    const params = Array.isArray(values) ? values : Array.isArray(config?.values) ? config.values : [];
    if (typeof text !== 'string') return pgQuery.call(this, config, values, callback);
    const within = track(this, text);
    const started = performance.now();
    const cb = typeof values === 'function' ? values : typeof callback === 'function' ? callback : null;
    if (cb) {
      const wrapped = (err: unknown, r: any) => {
        counter.record(text, params, performance.now() - started, r?.rows?.length ?? 0, within, this);
        cb(err, r);
      };
      return typeof values === 'function' ? pgQuery.call(this, config, wrapped) : pgQuery.call(this, config, values, wrapped);
    }
    const result = pgQuery.call(this, config, values, callback);
    if (result && typeof result.then === 'function') {
      result.then(
        (r: any) => counter.record(text, params, performance.now() - started, Array.isArray(r) ? 0 : (r?.rows?.length ?? 0), within, this),
        () => counter.record(text, params, performance.now() - started, 0, within, this),
      );
    } else counter.record(text, params, 0, 0, within, this);
    return result;
  };
  // The embedded driver's named (prepared) statements bypass PGlite's query().
  observeNamedStatements((text, params, ms, rows, session) => current?.record(text, params, ms, rows, inTransaction.has(session), session, true));
  // PGlite's methods live on its base class.
  let owner: any = PGlite.prototype;
  while (owner && !Object.prototype.hasOwnProperty.call(owner, 'query')) owner = Object.getPrototypeOf(owner);
  if (!owner) return;
  const liteQuery = owner.query;
  const liteExec = owner.exec;
  owner.query = async function (text: string, params?: unknown[], options?: unknown) {
    const counter = current;
    const within = track(this, text);
    if (!counter) return liteQuery.call(this, text, params, options);
    const started = performance.now();
    try {
      const r = await liteQuery.call(this, text, params, options);
      counter.record(text, params ?? [], performance.now() - started, r?.rows?.length ?? 0, within, this);
      return r;
    } catch (error) {
      counter.record(text, params ?? [], performance.now() - started, 0, within, this);
      throw error;
    }
  };
  owner.exec = async function (text: string, options?: unknown) {
    const counter = current;
    const within = track(this, text);
    if (!counter) return liteExec.call(this, text, options);
    const started = performance.now();
    try {
      const r = await liteExec.call(this, text, options);
      counter.record(text, [], performance.now() - started, r?.[r.length - 1]?.rows?.length ?? 0, within, this);
      return r;
    } catch (error) {
      counter.record(text, [], performance.now() - started, 0, within, this);
      throw error;
    }
  };
}

/** A statement's identity: whitespace folded, the schema name replaced by `S`. */
export function statementKey(text: string): string {
  return text.replace(/\s+/g, ' ').trim().replace(/"[A-Za-z0-9_]+"\./g, 'S.').slice(0, 110);
}

export class StatementCounter {
  readonly stats = new Map<string, StatementStat>();
  /** Every statement in the order it answered, once `recordSequence()` was called. */
  sequence: SequencedStatement[] | null = null;
  private startedAt = 0;
  private wallMs = 0;

  constructor() {
    install();
  }

  /** Opens a window; windows of one counter add up (stats are kept until `reset`). */
  start(): this {
    if (current && current !== this) throw new Error('bench: one statement counter at a time');
    this.startedAt = performance.now();
    current = this;
    return this;
  }

  stop(): this {
    if (current === this) {
      this.wallMs += performance.now() - this.startedAt;
      current = null;
    }
    return this;
  }

  /** Keeps every statement in order as well (for a replay); PGlite answers one at a time, so on the embedded tier that is the order they ran in. */
  recordSequence(): this {
    this.sequence ??= [];
    return this;
  }

  reset(): this {
    this.stats.clear();
    if (this.sequence) this.sequence = [];
    this.wallMs = 0;
    return this;
  }

  record(text: string, params: unknown[], ms: number, rows: number, inTransaction: boolean, session: object, named = false) {
    this.sequence?.push({ text, params, rows, named, session });
    const key = statementKey(text);
    let s = this.stats.get(key);
    if (!s) this.stats.set(key, (s = { key, calls: 0, totalMs: 0, rows: 0, standalone: 0, sample: { text, params } }));
    s.calls++;
    if (!inTransaction && /^(INSERT|UPDATE|DELETE|WITH)/i.test(key)) s.standalone++;
    s.totalMs += ms;
    s.rows += rows;
  }

  snapshot(cycles: number, topN = 12): CounterSnapshot {
    const all = [...this.stats.values()];
    const statements = all.reduce((a, s) => a + s.calls, 0);
    // Commits: each transaction, and each write sent on its own (it commits by itself).
    const transactions = all.reduce((a, s) => a + (/^(START TRANSACTION|BEGIN)/i.test(s.key) ? s.calls : s.standalone), 0);
    const statementMs = all.reduce((a, s) => a + s.totalMs, 0);
    const wallMs = this.wallMs;
    const n = Math.max(1, cycles);
    const r = (v: number) => Math.round(v * 100) / 100;
    return {
      cycles,
      statements,
      transactions,
      statementMs: r(statementMs),
      wallMs: r(wallMs),
      perCycle: { statements: r(statements / n), transactions: r(transactions / n), statementMs: r(statementMs / n), wallMs: r(wallMs / n) },
      top: all
        .sort((a, b) => b.totalMs - a.totalMs)
        .slice(0, topN)
        .map((s) => ({ statement: s.key, callsPerCycle: r(s.calls / n), msPerCycle: r(s.totalMs / n), rowsPerCall: r(s.rows / Math.max(1, s.calls)) })),
    };
  }

  /** The statements worth an EXPLAIN: the most expensive ones that are not transaction control. */
  heaviest(count: number): StatementStat[] {
    return [...this.stats.values()]
      .filter((s) => !/^(START TRANSACTION|BEGIN|COMMIT|ROLLBACK|SELECT pg_notify)/i.test(s.key))
      .sort((a, b) => b.totalMs - a.totalMs)
      .slice(0, count);
  }
}
