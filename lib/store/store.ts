import { randomUUID } from 'node:crypto';
import type { DateTime } from 'luxon';
import type { Clock } from '../clock.js';
import { IllegalTransitionError } from '../errors/illegal-transition-error.js';
import { SlotLockConflictError } from '../errors/slot-lock-conflict-error.js';
import type { LogDataByType, LogType } from '../logs/log-types.js';
import type { LeaseRecord, ResourceRecord } from '../model/lease.js';
import type { JsonObject } from '../model/spec.js';
import { isLegalTransition, type LeaseStatus, type ObjectKind, type ResourceStatus } from '../model/states.js';
import { fromDb, toDb } from '../time.js';
import type { Db, Sql } from './db.js';
import { encodeHint } from './notifier.js';
import { quoteIdent, statements, type Statements } from './sql.js';

export interface LeaseRow extends LeaseRecord {
  seq: number;
  blueprints: string[] | null;
  allocatingResourceId: string | null;
  childKey: string | null;
  deadlineAt: DateTime | null;
  waitLogId: number | null;
  phase: string | null;
  phaseAttempts: number;
}

export interface ResourceRow extends ResourceRecord {
  allocated: boolean;
  phase: string | null;
  phaseAttempts: number;
  reservedFor: string | null;
  idleSince: DateTime | null;
}

export interface CommandRow {
  id: number;
  targetKind: ObjectKind;
  targetId: string;
  command: 'release' | 'reclaim' | 'break';
  data: JsonObject;
  author: string | null;
}

export interface StatusEvent {
  kind: ObjectKind;
  id: string;
  from: string | null;
  to: string;
}

export interface LogInsert<T extends string = string> {
  type: T;
  data: T extends LogType ? LogDataByType[T] : JsonObject;
  lease?: string | null;
  resource?: string | null;
  blueprint?: string | null;
}

/** One short transaction, plus what to announce once it commits. */
export interface Unit {
  sql: Sql;
  now: DateTime;
  events: StatusEvent[];
  logs: Array<Record<string, unknown>>;
  woke: boolean;
}

export function mapLease(r: Record<string, any>): LeaseRow {
  return {
    id: r.id,
    seq: Number(r.seq),
    type: r.type,
    status: r.status,
    attributes: r.attributes ?? {},
    owner: r.owner ?? null,
    priority: Number(r.priority),
    resourceId: r.resource_id ?? null,
    parentResourceId: r.parent_resource_id ?? null,
    expiresAt: fromDb(r.expires_at),
    createdAt: fromDb(r.created_at)!,
    statusChangedAt: fromDb(r.status_changed_at)!,
    brokenReason: r.broken_reason ?? null,
    blueprints: r.blueprints ?? null,
    allocatingResourceId: r.allocating_resource_id ?? null,
    childKey: r.child_key ?? null,
    deadlineAt: fromDb(r.deadline_at),
    waitLogId: r.wait_log_id === null || r.wait_log_id === undefined ? null : Number(r.wait_log_id),
    phase: r.phase ?? null,
    phaseAttempts: Number(r.phase_attempts ?? 0),
  };
}

export function mapResource(r: Record<string, any>): ResourceRow {
  return {
    id: r.id,
    type: r.type,
    blueprint: r.blueprint,
    status: r.status,
    attributes: r.attributes ?? {},
    createdAt: fromDb(r.created_at)!,
    statusChangedAt: fromDb(r.status_changed_at)!,
    brokenReason: r.broken_reason ?? null,
    allocated: Boolean(r.allocated),
    phase: r.phase ?? null,
    phaseAttempts: Number(r.phase_attempts ?? 0),
    reservedFor: r.reserved_for ?? null,
    idleSince: fromDb(r.idle_since),
  };
}

/** Column updates that go with a CAS, as `column: value`. JSON values are passed as JSON text. */
type Sets = Record<string, unknown>;

export class Store {
  readonly sql: Statements;
  readonly s: string;

  constructor(
    readonly db: Db,
    private readonly clock: Clock,
    private readonly afterCommit: (unit: Unit) => void,
    /** On a shared server: NOTIFY the other brokers of the schema inside each unit that woke work or moved a lease. */
    private readonly notify?: { channel: string; from: string },
  ) {
    this.sql = statements(db.schema);
    this.s = quoteIdent(db.schema);
  }

  private readonly running = new Set<Promise<unknown>>();

  /** Resolves once every unit of work started before the call has committed or failed. */
  async settled(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  /** Runs one short unit of work; announces its status changes and logs after commit. */
  unit<T>(work: (unit: Unit) => Promise<T>): Promise<T> {
    const running = this.runUnit(work);
    this.running.add(running);
    const forget = () => void this.running.delete(running);
    running.then(forget, forget);
    return running;
  }

  private async runUnit<T>(work: (unit: Unit) => Promise<T>): Promise<T> {
    let done: Unit | undefined;
    const result = await this.db.transaction(async (sql) => {
      const unit: Unit = { sql, now: this.clock.now(), events: [], logs: [], woke: false };
      const value = await work(unit);
      const leases = unit.events.filter((e) => e.kind === 'lease').map((e) => e.id);
      if (this.notify && (unit.woke || leases.length > 0)) {
        // Transactional: delivered at COMMIT, never for a unit that rolled back.
        await sql.query(`SELECT pg_notify($1, $2)`, [this.notify.channel, encodeHint({ from: this.notify.from, work: unit.woke, leases: [...new Set(leases)] })]);
      }
      done = unit;
      return value;
    });
    if (done) this.afterCommit(done);
    return result;
  }

  newId(prefix: 'lease' | 'res'): string {
    return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 20)}`;
  }

  // --- reads -------------------------------------------------------------------------

  async lease(id: string, sql: Sql = this.db): Promise<LeaseRow | null> {
    const rows = await sql.query(`SELECT * FROM ${this.s}.leases WHERE id = $1`, [id]);
    return rows[0] ? mapLease(rows[0]) : null;
  }

  async resource(id: string, sql: Sql = this.db): Promise<ResourceRow | null> {
    const rows = await sql.query(`SELECT * FROM ${this.s}.resources WHERE id = $1`, [id]);
    return rows[0] ? mapResource(rows[0]) : null;
  }

  async liveLeaseCount(resourceId: string, sql: Sql = this.db): Promise<number> {
    const rows = await sql.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${this.s}.leases WHERE resource_id = $1 AND status <> 'destroyed'`, [resourceId]);
    return Number(rows[0].n);
  }

  async leasesOnResource(resourceId: string, sql: Sql = this.db): Promise<LeaseRow[]> {
    const rows = await sql.query(`SELECT * FROM ${this.s}.leases WHERE resource_id = $1 AND status <> 'destroyed' ORDER BY seq`, [resourceId]);
    return rows.map(mapLease);
  }

  async commands(kind: ObjectKind, id: string, sql: Sql = this.db): Promise<CommandRow[]> {
    const rows = await sql.query(this.sql.unconsumedCommands, [kind, id]);
    return rows.map((r) => ({ id: Number(r.id), targetKind: r.target_kind, targetId: r.target_id, command: r.command, data: r.data ?? {}, author: r.author ?? null }));
  }

  // --- writes ------------------------------------------------------------------------

  /** CAS a lease's status, checked against the transition table; refuses if the row moved on. */
  async casLease(unit: Unit, id: string, from: LeaseStatus, to: LeaseStatus, sets: Sets = {}): Promise<LeaseRow> {
    return mapLease(await this.cas(unit, 'lease', id, from, to, sets));
  }

  async casResource(unit: Unit, id: string, from: ResourceStatus, to: ResourceStatus, sets: Sets = {}): Promise<ResourceRow> {
    return mapResource(await this.cas(unit, 'resource', id, from, to, sets));
  }

  private async cas(unit: Unit, kind: ObjectKind, id: string, from: string, to: string, sets: Sets) {
    if (!isLegalTransition(kind, from, to)) throw new IllegalTransitionError(kind, id, from, to);
    const { clause, values } = setClause(sets, 5);
    const text = kind === 'lease' ? this.sql.casLease(clause) : this.sql.casResource(clause);
    const rows = await unit.sql.query(text, [id, from, to, toDb(unit.now), ...values]);
    if (!rows[0]) {
      const table = kind === 'lease' ? 'leases' : 'resources';
      const actual = await unit.sql.query(`SELECT status FROM ${this.s}.${table} WHERE id = $1`, [id]);
      throw new IllegalTransitionError(kind, id, from, to, actual[0]?.status ?? 'missing');
    }
    unit.events.push({ kind, id, from, to });
    // A child lease's owner resource may be suspended waiting for it: wake it when the child
    // is settled (active, or on its way out), not on pending/acquired, which it would only wait on again.
    if (kind === 'lease' && rows[0].parent_resource_id && to !== 'pending' && to !== 'acquired') {
      await this.wake(unit, 'resource', [rows[0].parent_resource_id]);
    }
    await this.log(unit, { type: 'status.changed', data: { kind, from, to }, [kind]: id, blueprint: rows[0].blueprint ?? null });
    return rows[0];
  }

  /** Updates columns of an object whose status must still be `status` (the single writer's own bookkeeping). */
  async update(unit: Unit, kind: ObjectKind, id: string, status: string, sets: Sets): Promise<boolean> {
    const { clause, values } = setClause(sets, 3);
    const table = kind === 'lease' ? 'leases' : 'resources';
    return (await unit.sql.execute(`UPDATE ${this.s}.${table} SET ${clause.slice(2)} WHERE id = $1 AND status = $2`, [id, status, ...values])) > 0;
  }

  async log<T extends string>(unit: Unit, entry: LogInsert<T>): Promise<number> {
    const rows = await unit.sql.query(this.sql.insertLog, [
      entry.type,
      entry.blueprint ?? null,
      entry.resource ?? null,
      entry.lease ?? null,
      JSON.stringify(entry.data ?? {}),
      toDb(unit.now),
    ]);
    unit.logs.push(rows[0]);
    return Number(rows[0].id);
  }

  async bumpLog(unit: Unit, id: number, data: JsonObject): Promise<boolean> {
    const rows = await unit.sql.query(this.sql.bumpLog, [id, toDb(unit.now), JSON.stringify(data)]);
    if (rows[0]) unit.logs.push(rows[0]);
    return rows.length > 0;
  }

  async ensureWork(unit: Unit, kind: ObjectKind, id: string, runAt: DateTime | null, priority = 0, seq = 0): Promise<void> {
    await unit.sql.query(this.sql.ensureWork, [kind, id, toDb(runAt), priority, seq]);
    unit.woke = true;
  }

  async wake(unit: Unit, kind: ObjectKind, ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    await unit.sql.query(this.sql.wake, [kind, ids, toDb(unit.now)]);
    unit.woke = true;
  }

  /** Hands a freed-capacity wake to the best-ranked waiting lease that may use these blueprints. */
  async wakeNextWaiting(unit: Unit, types: string[], blueprints: string[], after?: { priority: number; seq: number }): Promise<string | null> {
    const rows = await unit.sql.query(this.sql.wakeNextWaiting, [types, blueprints, toDb(unit.now), after?.seq ?? null, after?.priority ?? null]);
    if (rows[0]) unit.woke = true;
    return rows[0]?.object_id ?? null;
  }

  /**
   * Freed capacity on an active resource goes to the best-ranked waiting lease: it is
   * woken and the resource is reserved for it, so a newcomer cannot jump the queue.
   * If it cannot use the resource it drops the reservation and passes the wake on.
   */
  async handOff(unit: Unit, resourceId: string, type: string, blueprint: string): Promise<string | null> {
    const next = await this.wakeNextWaiting(unit, [type], [blueprint]);
    if (!next) return null;
    const reserved = await unit.sql.execute(
      `UPDATE ${this.s}.resources SET reserved_for = $2 WHERE id = $1 AND status = 'active' AND reserved_for IS NULL`,
      [resourceId, next],
    );
    if (reserved > 0) {
      const pointed = await unit.sql.execute(`UPDATE ${this.s}.leases SET allocating_resource_id = $2 WHERE id = $1 AND status = 'pending' AND allocating_resource_id IS NULL`, [next, resourceId]);
      if (pointed === 0) await unit.sql.execute(`UPDATE ${this.s}.resources SET reserved_for = NULL WHERE id = $1 AND reserved_for = $2`, [resourceId, next]);
    }
    return next;
  }

  /** Bookkeeping when a lease stops being live: a reservation it held frees its resource for the next waiter, and its resource looks again. */
  async leaseLeftLive(unit: Unit, lease: LeaseRow): Promise<void> {
    if (lease.allocatingResourceId) {
      const freed = await unit.sql.query(`UPDATE ${this.s}.resources SET reserved_for = NULL WHERE id = $1 AND reserved_for = $2 RETURNING type, blueprint`, [lease.allocatingResourceId, lease.id]);
      if (freed[0]) await this.wakeNextWaiting(unit, [freed[0].type], [freed[0].blueprint]);
    }
    if (lease.resourceId) await this.wake(unit, 'resource', [lease.resourceId]);
  }

  async command(unit: Unit, kind: ObjectKind, id: string, command: CommandRow['command'], data: JsonObject = {}, author: string | null = null): Promise<void> {
    await unit.sql.query(this.sql.insertCommand, [kind, id, command, JSON.stringify(data), author, toDb(unit.now)]);
    // An upsert, not a wake: if the object's work item was just deleted (it reached
    // destroyed), the command still gets a driver that consumes it.
    await this.ensureWork(unit, kind, id, unit.now);
  }

  async consume(unit: Unit, commandId: number, outcome: string): Promise<boolean> {
    return (await unit.sql.execute(this.sql.consumeCommand, [commandId, toDb(unit.now), outcome])) > 0;
  }

  /** Takes every key or none: on a conflict the caller's transaction must roll back. */
  async lockSlots(unit: Unit, kind: ObjectKind, id: string, keys: string[]): Promise<void> {
    if (keys.length === 0) return;
    await unit.sql.query(this.sql.lockSlots, [keys, kind, id, toDb(unit.now)]);
    const holders = await unit.sql.query(this.sql.slotHolders, [keys]);
    const foreign = holders.filter((h) => h.holder_kind !== kind || h.holder_id !== id).map((h) => h.key as string);
    if (foreign.length > 0) throw new SlotLockConflictError(foreign);
  }

  async releaseSlots(unit: Unit, kind: ObjectKind, id: string): Promise<void> {
    await unit.sql.query(this.sql.releaseSlots, [kind, id]);
  }
}

function setClause(sets: Sets, firstParam: number): { clause: string; values: unknown[] } {
  const values: unknown[] = [];
  let clause = '';
  for (const [column, value] of Object.entries(sets)) {
    values.push(value && typeof value === 'object' && !Array.isArray(value) && !('toISO' in value) ? JSON.stringify(value) : isDateTime(value) ? toDb(value) : value);
    const cast = column === 'attributes' ? '::jsonb' : '';
    clause += `, ${column} = $${firstParam + values.length - 1}${cast}`;
  }
  return { clause, values };
}

function isDateTime(value: unknown): value is DateTime {
  return !!value && typeof value === 'object' && 'toISO' in value;
}
