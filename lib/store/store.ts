import { randomUUID } from 'node:crypto';
import type { DateTime, Duration } from 'luxon';
import type { Clock } from '../clock.js';
import { IllegalTransitionError } from '../errors/illegal-transition-error.js';
import { SlotLockConflictError } from '../errors/slot-lock-conflict-error.js';
import type { AuthorizationRecord, AuthorizationState } from '../model/authorizations.js';
import type { JsonObject } from '../model/spec.js';
import type { Quota } from '../model/quotas.js';
import { isLegalTransition, type LeaseStatus, type ObjectKind, type ResourceStatus } from '../model/states.js';
import { fromDb, toDb } from '../time.js';
import type { Db, Sql } from './db.js';
import { Params } from './params.js';
import { quoteIdent, statements, type Statements } from './sql/statements.js';
import type { LeaseRow, LeaseStatusRow, LeaseWithResource, ResourceRow, CommandRow, LogInsert, Unit, AlsoWrite, CasOptions, Acquisition, CasResult, BlueprintFailure, NewLease, Retirement, LeftResource, ReleasedBy, Sets, IdSource, ClaimedWork, WorkRef, StoreBackend, Page, ActivatedLease, DestroyHandOff, DestroyedLease } from './backend.js';
export type { LeaseRow, LeaseStatusRow, LeaseWithResource, ResourceRow, CommandRow, StatusEvent, LogInsert, Unit, AlsoWrite, CasOptions, Acquisition, CasResult, BlueprintFailure, NewLease, Retirement, LeftResource, ReleasedBy, IdSource, ClaimedWork, WorkRef, StoreBackend, ActivatedLease, DestroyHandOff, DestroyedLease } from './backend.js';

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
    allocationFailures: Number(r.allocation_failures ?? 0),
    lastFailure: r.last_failure ?? null,
    allocateAfter: fromDb(r.allocate_after),
    endCause: r.end_cause ?? null,
    authorizingOwner: r.authorizing_owner ?? null,
    hasCommands: Boolean(r.has_commands),
  };
}

/** A lease as `leaseWithCommands` returns it: with its unconsumed commands, its resource and the one it drives or has reserved. */
function leaseWithCommands(r: Record<string, any>): LeaseRow {
  const commands = ((r.unconsumed ?? []) as Array<Record<string, any>>).map((c) => mapCommand({ ...c, target_kind: 'lease', target_id: r.id }));
  return {
    ...mapLease(r),
    hasCommands: commands.length > 0,
    commands,
    resource: r.resource_row ? mapResource(r.resource_row) : null,
    reserved: r.reserved_row ? mapResource(r.reserved_row) : null,
  };
}

/**
 * The waiter a destroy's hand-off claimed, as its pass would read it first, from the
 * statement's own rows (see `handedWaiter` in the SQL): its row as the hand-off left it,
 * its commands, and the resource reserved for it. None when the hand-off did not claim it,
 * did not reserve the resource for it, or a wake or a write of the lease landed after the
 * statement's snapshot.
 */
function handedWaiter(woke: Record<string, any>, also: Record<string, Array<Record<string, any>>>): LeaseRow | undefined {
  const [ptr] = also.ptr ?? [];
  const [handed] = also.handed ?? [];
  const [counted] = also.counted ?? [];
  if (!woke.claimed || !ptr?.lease_row || !handed?.unchanged || counted?.reserved_for !== woke.object_id) return undefined;
  if (Number(woke.wake_count) !== Number(handed.seen_wake_count) + 1) return undefined;
  return { ...leaseWithCommands({ ...ptr.lease_row, unconsumed: handed.unconsumed }), reserved: mapResource(counted.resource_row) };
}

function mapCommand(r: Record<string, any>): CommandRow {
  return { id: Number(r.id), targetKind: r.target_kind, targetId: r.target_id, command: r.command, data: r.data ?? {}, author: r.author ?? null };
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
    leaseCount: Number(r.lease_count ?? 0),
    buildFailed: Boolean(r.build_failed),
    authorizingOwner: r.authorizing_owner ?? null,
    hasCommands: Boolean(r.has_commands),
    leasesServed: Number(r.leases_served ?? 0),
    blueprintDraining: Boolean(r.blueprint_draining),
  };
}

/** The keys of a slot lock conflict that undid an acquiring statement (SQLSTATE SW001, see `Store.takeResource`), or null. */
export function slotConflictKeys(error: unknown): string[] | null {
  const e = error as { code?: unknown; detail?: unknown } | null;
  if (e?.code !== 'SW001') return null;
  try {
    const keys = JSON.parse(String(e.detail));
    return Array.isArray(keys) ? keys.map(String) : [];
  } catch {
    return [];
  }
}

export function mapAuthorization(r: Record<string, any>): AuthorizationRecord {
  return { blueprint: r.blueprint, owner: r.owner_pattern, state: r.state, createdAt: fromDb(r.created_at)!, changedAt: fromDb(r.changed_at)!, changedBy: r.changed_by ?? null };
}

export function mapBlueprintFailure(r: Record<string, any>): BlueprintFailure {
  return { blueprint: r.blueprint, streak: Number(r.streak), lastError: r.last_error, lastFailureAt: fromDb(r.last_failure_at)!, retryAt: fromDb(r.retry_at)! };
}

/** A statement that issued more than one statement where one was promised (`Store.single`). */
class SingleStatementError extends Error {
  constructor() {
    super('a single-statement unit ran a second statement');
  }
}

/**
 * The createBroker option under which `slipway/testing` passes an IdSource (numbered ids
 * for stable snapshots). A symbol, so it is no option a user can name or misspell.
 */
export const ID_SOURCE = Symbol('slipway.idSource');

/** Above any lease priority (an integer column): a resource's pass is queued first. */
const RESOURCE_PRIORITY = 2 ** 31;

export class Store implements StoreBackend {
  readonly sql: Statements;
  readonly s: string;

  /** The IdSource given to createBroker under ID_SOURCE, if any. */
  static idSourceOf(options: object): IdSource | undefined {
    return (options as { [ID_SOURCE]?: IdSource })[ID_SOURCE];
  }

  constructor(
    readonly db: Db,
    private readonly clock: Clock,
    private readonly afterCommit: (unit: Unit) => void,
    /** Random ids when absent. */
    private readonly ids?: IdSource,
    /** The broker's `priorityAging.every`: waiters are ranked by their aged priority. Null: strict priority. */
    private readonly priorityAging: Duration | null = null,
  ) {
    this.sql = statements(db.schema, priorityAging === null ? null : priorityAging.toMillis());
    this.s = quoteIdent(db.schema);
  }

  private readonly running = new Set<Promise<unknown>>();

  /** Resolves once every unit of work started before the call has committed or failed. */
  async settled(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  private track<T>(running: Promise<T>): Promise<T> {
    this.running.add(running);
    const forget = () => void this.running.delete(running);
    running.then(forget, forget);
    return running;
  }

  /** Runs one short unit of work in a transaction; announces its status changes and logs after commit. */
  unit<T>(work: (unit: Unit) => Promise<T>): Promise<T> {
    return this.track(
      (async () => {
        let done: Unit | undefined;
        const result = await this.db.transaction(async (sql) => {
          const unit = this.newUnit(sql);
          const value = await work(unit);
          done = unit;
          return value;
        });
        if (done) this.afterCommit(done);
        return result;
      })(),
    );
  }

  /**
   * A unit of work that is one statement, so it needs no transaction: the statement
   * commits by itself (one round trip instead of three). Its writes are all in that
   * statement (a CAS with its logs and wake-ups, an insert with its work item), so it is
   * exactly as atomic as a transaction. A second statement is a bug and throws.
   */
  single<T>(work: (unit: Unit) => Promise<T>): Promise<T> {
    return this.track(
      (async () => {
        let issued = 0;
        const once = <R>(run: () => Promise<R>) => {
          if (issued++ > 0) throw new SingleStatementError();
          return run();
        };
        const sql: Sql = {
          query: <R>(text: string, params?: unknown[]) => once(async () => (await this.db.write<R>(text, params)).rows),
          execute: (text, params) => once(async () => (await this.db.write(text, params)).rowCount),
        };
        const unit: Unit = { ...this.newUnit(sql), single: true };
        const value = await work(unit);
        this.afterCommit(unit);
        return value;
      })(),
    );
  }

  private newUnit(sql: Sql): Unit {
    return { sql, now: this.clock.now(), events: [], logs: [], woke: false };
  }

  newId(prefix: 'lease' | 'res'): string {
    if (this.ids) return this.ids(prefix);
    return `${prefix}_${randomUUID().replaceAll('-', '').slice(0, 20)}`;
  }

  // --- reads -------------------------------------------------------------------------

  /** A lease, with the commands that wait for it, in order. */
  async lease(id: string, sql: Sql = this.db): Promise<LeaseRow | null> {
    const [r] = await sql.query(this.sql.leaseWithCommands, [id]);
    return r ? leaseWithCommands(r) : null;
  }

  /**
   * In `unit`, claims the lease's work item for `workerId` if no one holds it (a row
   * another transaction locks is skipped, not waited for), and reads the lease as `lease`
   * does. Null when it cannot be claimed now, or a wake landed as it was claimed (the read
   * may have missed its command). The claim ends with the unit's writes: the
   * destroy deletes the item, and a rollback undoes the claim.
   */
  async claimLease(unit: Unit, id: string, workerId: string, until: DateTime): Promise<{ lease: LeaseRow; wakeCount: number } | null> {
    const [r] = await unit.sql.query(this.sql.claimLeaseWithCommands, [id, workerId, toDb(unit.now), toDb(until)]);
    return r ? { lease: leaseWithCommands(r), wakeCount: Number(r.claimed_wake_count) } : null;
  }

  /**
   * The holder's release run inline on a blueprint with a hook at the lease's end, in one
   * statement of `unit`: the lease's work item claimed for `workerId` if no one holds it
   * (a row another transaction locks is skipped), and the lease released with the intent to
   * destroy, its release command written already consumed. Only while the lease is active,
   * no command waits for it, no wake landed as the item was claimed, and its resource is of
   * `blueprint`; otherwise nothing is written (the statement is undone if it had claimed the
   * item) and the result is null. The claim is then the destroy phase's pass's.
   */
  async releaseClaimed(
    unit: Unit,
    leaseId: string,
    blueprint: string,
    claim: { workerId: string; until: DateTime },
    released: { written: { data: JsonObject; author: string | null }; logs: LogInsert[] },
  ): Promise<{ lease: LeaseRow; resource: ResourceRow; wakeCount: number } | null> {
    let result: CasResult<LeaseRow> | null;
    try {
      result = await this.casIf(unit, 'lease', leaseId, 'active', 'released', { phase: 'destroy', phase_attempts: 1 }, {
        logs: released.logs,
        before: [
          { name: 'seen', sql: (p) => this.sql.inlineReleaseSeen(p, leaseId) },
          { name: 'claim', returning: true, sql: (p) => this.sql.inlineReleaseClaim(p, leaseId, claim.workerId, toDb(unit.now), toDb(claim.until)) },
        ],
        guard: (p) => this.sql.inlineReleaseGuard(p, leaseId, blueprint),
        also: [this.releaseWrittenConsumed(released.written, unit.now), { name: 'resource', returning: true, sql: this.sql.inlineReleaseResource }],
        failIf: this.sql.inlineReleaseFails(),
      });
    } catch (error) {
      if ((error as { code?: unknown } | null)?.code === 'SW002') return null;
      throw error;
    }
    const resource = result?.also.resource?.[0] as Record<string, any> | undefined;
    const claimed = result?.also.claim?.[0] as { wake_count: number | string } | undefined;
    if (!result || !resource || !claimed) return null;
    return { lease: result.row, resource: mapResource(resource), wakeCount: Number(claimed.wake_count) };
  }

  /** A lease and, in the same read, its resource (what `acquire()` hands over). */
  async leaseWithResource(id: string): Promise<LeaseWithResource | null> {
    const rows = await this.db.query(this.sql.leaseWithResource, [id]);
    if (!rows[0]) return null;
    const resource = rows[0].resource_row;
    return { ...mapLease(rows[0]), resource: resource ? mapResource(resource) : null };
  }

  /** The status of each of these leases that still has a row (history is collected after `retention`). */
  async leaseStatuses(ids: string[], settled = false): Promise<LeaseStatusRow[]> {
    const rows = await this.db.query(settled ? this.sql.leaseStatusesSettled : this.sql.leaseStatuses, [ids]);
    return rows.map((r) => ({ id: r.id, status: r.status, brokenReason: r.broken_reason ?? null, expiresAt: fromDb(r.expires_at), statusChangedAt: fromDb(r.status_changed_at)! }));
  }

  /** A resource, with whether commands wait for it. */
  async resource(id: string, sql: Sql = this.db): Promise<ResourceRow | null> {
    const rows = await sql.query(this.sql.resourceWithCommands, [id]);
    return rows[0] ? mapResource(rows[0]) : null;
  }

  async leasesOnResource(resourceId: string, sql: Sql = this.db): Promise<LeaseRow[]> {
    const rows = await sql.query(`SELECT * FROM ${this.s}.leases WHERE resource_id = $1 AND status <> 'destroyed' ORDER BY seq`, [resourceId]);
    return rows.map(mapLease);
  }

  /** How many leases are active, how many of them have no expiry, and since when the oldest is active. */
  async activeLeases(): Promise<{ active: number; withoutTtl: number; oldestSince: DateTime | null }> {
    const [r] = await this.db.query(this.sql.activeLeases);
    return { active: Number(r.active), withoutTtl: Number(r.without_ttl), oldestSince: fromDb(r.oldest) };
  }

  async commands(kind: ObjectKind, id: string, sql: Sql = this.db): Promise<CommandRow[]> {
    const rows = await sql.query(this.sql.unconsumedCommands, [kind, id]);
    return rows.map(mapCommand);
  }

  // --- writes ------------------------------------------------------------------------

  /** CAS a lease's status, checked against the transition table; refuses (throws) if the row moved on. */
  async casLease(unit: Unit, id: string, from: LeaseStatus, to: LeaseStatus, sets: Sets = {}, options: CasOptions = {}): Promise<LeaseRow> {
    return (await this.casWith(unit, 'lease', id, from, to, sets, options)).row as LeaseRow;
  }

  async casResource(unit: Unit, id: string, from: ResourceStatus, to: ResourceStatus, sets: Sets = {}, options: CasOptions = {}): Promise<ResourceRow> {
    return (await this.casWith(unit, 'resource', id, from, to, sets, options)).row as ResourceRow;
  }

  /** A CAS whose `guard` may refuse it: null when refused (the caller reads why), the row otherwise. */
  async casIf<K extends ObjectKind>(unit: Unit, kind: K, id: string, from: string, to: string, sets: Sets, options: CasOptions): Promise<CasResult<K extends 'lease' ? LeaseRow : ResourceRow> | null> {
    return (await this.cas(unit, kind, id, from, to, sets, options)) as CasResult<K extends 'lease' ? LeaseRow : ResourceRow> | null;
  }

  /** A CAS that must apply, with the RETURNING rows of its `also` writes. */
  async casWith(unit: Unit, kind: ObjectKind, id: string, from: string, to: string, sets: Sets = {}, options: CasOptions = {}): Promise<CasResult<LeaseRow | ResourceRow>> {
    const result = await this.cas(unit, kind, id, from, to, sets, options);
    if (!result) {
      const table = kind === 'lease' ? 'leases' : 'resources';
      // Outside a transaction the refused statement has committed nothing: the read that says why is a statement of its own.
      const actual = await (unit.single ? this.db : unit.sql).query(`SELECT status FROM ${this.s}.${table} WHERE id = $1`, [id]);
      throw new IllegalTransitionError(kind, id, from, to, actual[0]?.status ?? 'missing');
    }
    return result;
  }

  /**
   * One statement: the status CAS, its `status.changed` log and the caller's logs, a
   * wake of the owner resource of a child lease, and any `also` writes. Nothing of it
   * happens unless the CAS matched.
   */
  private async cas(unit: Unit, kind: ObjectKind, id: string, from: string, to: string, sets: Sets, options: CasOptions): Promise<CasResult<LeaseRow | ResourceRow> | null> {
    const via = options.via;
    const steps: Array<[string, string]> = via ? [[from, via.status], [via.status, to]] : [[from, to]];
    for (const [a, b] of steps) if (!isLegalTransition(kind, a, b)) throw new IllegalTransitionError(kind, id, a, b);
    const p = new Params();
    const table = kind === 'lease' ? 'leases' : 'resources';
    const now = p.add(toDb(unit.now));
    const guard = options.guard ? ` AND (${options.guard(p)})` : '';
    const changed = ([a, b]: [string, string]): LogInsert => ({ type: 'status.changed', data: { kind, from: a, to: b }, [kind]: id });
    const logs: LogInsert[] = [...(via ? [changed(steps[0]), ...via.logs] : []), changed(steps.at(-1)!), ...(options.logs ?? [])];
    // A child lease's owner resource may be suspended waiting for it: wake it when the child
    // is settled (active, or on its way out), not on pending/acquired, which it would only wait on again.
    const wakesParent = kind === 'lease' && to !== 'pending' && to !== 'acquired';
    const also = options.also ?? [];
    const before = options.before ?? [];
    const text = `
      WITH ${before.map((a) => `${a.name} AS (${a.sql(p)}), `).join('')}upd AS (
        UPDATE ${this.s}.${table} SET status = ${p.add(to)}, status_changed_at = ${now}${setClause(sets, p)}
        WHERE id = ${p.add(id)} AND status = ${p.add(from)}${guard}
        RETURNING *
      ), lg AS (${this.logsFrom('upd', logs, p, now, kind === 'resource')})${
        wakesParent
          ? `, pw AS (
        UPDATE ${this.s}.work_items w SET run_at = LEAST(COALESCE(w.run_at, ${now}), ${now}), wake_count = w.wake_count + 1
        FROM upd WHERE w.object_kind = 'resource' AND w.object_id = upd.parent_resource_id
        RETURNING 1)`
          : ''
      }${also.map((a) => `, ${a.name} AS (${a.sql(p)})`).join('')}
      SELECT upd.*,
        EXISTS (SELECT 1 FROM ${this.s}.commands c WHERE c.target_kind = '${kind}' AND c.target_id = upd.id AND c.consumed_at IS NULL) AS has_commands,
        (SELECT json_agg(lg ORDER BY lg.id) FROM lg) AS written_logs${wakesParent ? ', EXISTS (SELECT 1 FROM pw) AS woke_parent' : ''}${also
          .filter((a) => a.returning)
          .map((a) => `, (SELECT json_agg(${a.name}) FROM ${a.name}) AS ${a.name}`)
          .join('')}${before
          .filter((a) => a.returning)
          .map((a) => `, (SELECT json_agg(${a.name}) FROM ${a.name}) AS ${a.name}`)
          .join('')}${options.failIf ? `, ${options.failIf} AS failed` : ''}
      FROM (SELECT 1) AS one LEFT JOIN upd ON true`;
    const rows = await unit.sql.query(text, p.values);
    const r = rows[0];
    if (!r || r.id === null || r.id === undefined) return null;
    const result: CasResult<LeaseRow | ResourceRow> = { row: kind === 'lease' ? mapLease(r) : mapResource(r), also: {} };
    for (const [a, b] of steps) unit.events.push({ kind, id, from: a, to: b, row: result.row, resource: options.resource });
    unit.logs.push(...(r.written_logs ?? []));
    if (r.woke_parent) unit.woke = true;
    for (const a of [...before, ...also]) if (a.returning) result.also[a.name] = r[a.name] ?? [];
    return result;
  }

  /**
   * The writes that take a resource for lease `leaseId`, as CTEs of the statement that
   * acquires the lease: `taken`, the resource row (still active, not reserved for another
   * lease, below `maxLeases`; its row lock keeps it so until the statement commits); the
   * slot locks; and `conflicts`, the keys held by others. The statement's `failIf`
   * (`acquisitionFails`) then undoes everything if there is any conflict.
   */
  takeResource(leaseId: string, a: Acquisition, now: DateTime): AlsoWrite[] {
    const keys = [...new Set(a.slots)];
    return [
      {
        name: 'taken',
        returning: true,
        sql: (p) => `
        UPDATE ${this.s}.resources r SET lease_count = lease_count + 1, leases_served = leases_served + 1, idle_since = NULL, reserved_for = NULL
        WHERE id = ${p.add(a.resourceId)} AND status = 'active' AND (reserved_for IS NULL OR reserved_for = ${p.add(leaseId)})
          AND (${p.add(a.maxLeases)}::integer IS NULL OR lease_count < ${p.add(a.maxLeases)}::integer)
          AND ${this.sql.notRetired('r', p.add(a.retirement.maxServed), p.add(toDb(a.retirement.bornAfter)))}
          AND (${p.add(a.unlessWaiting ?? null)}::text IS NULL
               OR NOT EXISTS (SELECT 1 FROM ${this.s}.leases w WHERE w.status = 'pending' AND w.type = ${p.add(a.unlessWaiting ?? null)}::text))
          AND (NOT ${p.add(Boolean(a.unexpired))}::boolean
               OR NOT EXISTS (SELECT 1 FROM ${this.s}.leases x WHERE x.id = ${p.add(leaseId)} AND x.expires_at <= ${p.add(toDb(now))}::timestamptz))
        RETURNING *`,
      },
      {
        name: 'locked',
        sql: (p) => `
        INSERT INTO ${this.s}.slot_locks (key, holder_kind, holder_id, created_at)
        SELECT k, 'lease', ${p.add(leaseId)}, ${p.add(toDb(now))}::timestamptz FROM unnest(${p.add(keys)}::text[]) AS k WHERE EXISTS (SELECT 1 FROM taken)
        ON CONFLICT (key) DO NOTHING
        RETURNING key`,
      },
      {
        name: 'conflicts',
        sql: (p) => `
        SELECT k FROM unnest(${p.add(keys)}::text[]) AS k
        WHERE EXISTS (SELECT 1 FROM taken) AND k NOT IN (SELECT key FROM locked)
          AND NOT EXISTS (SELECT 1 FROM ${this.s}.slot_locks l WHERE l.key = k AND l.holder_kind = 'lease' AND l.holder_id = ${p.add(leaseId)})`,
      },
    ];
  }

  /**
   * One statement: a new lease created already acquired on a free resource (the fast path
   * of a request, when nothing waits ahead of it). It takes the resource and the slot
   * locks as `takeResource` does (only if no lease of the type waits: `unlessWaiting`),
   * inserts the lease (`acquired`, with the intent to activate it recorded) and its work
   * item, claimed by `claimedBy`, and logs what a lease that queued and was then acquired
   * would log. With `active` (a blueprint with no `activateLease`: no hook whose intent
   * must be recorded first) the lease is created active instead, and its work item is not
   * claimed: it is due at the lease's expiry. Null when the resource is no longer free or
   * a lease waits (nothing was written); slot locks held by others raise SW001.
   */
  async insertAcquired(
    unit: Unit,
    lease: NewLease,
    a: Acquisition,
    attributes: JsonObject,
    blueprint: string,
    claimedBy: { worker: string; until: DateTime },
    active = false,
  ): Promise<{ lease: LeaseRow; resource: ResourceRow } | null> {
    const p = new Params();
    const now = p.add(toDb(unit.now));
    const take = this.takeResource(lease.id, a, unit.now);
    const logs: LogInsert[] = [
      { type: 'lease.queued', data: { type: lease.type, owner: lease.owner, priority: lease.priority }, lease: lease.id },
      { type: 'status.changed', data: { kind: 'lease', from: 'pending', to: 'acquired' }, lease: lease.id },
      { type: 'lease.acquired', data: { resource: a.resourceId, blueprint }, lease: lease.id, resource: a.resourceId, blueprint },
      ...(active
        ? [
            { type: 'status.changed', data: { kind: 'lease', from: 'acquired', to: 'active' }, lease: lease.id },
            { type: 'lease.activated', data: { resource: a.resourceId }, lease: lease.id, resource: a.resourceId, blueprint },
          ]
        : []),
    ];
    // Active: no worker needs to see it before its expiry (or, with none, a command).
    const work = active
      ? { runAt: `${p.add(toDb(lease.expiresAt))}::timestamptz`, claimedBy: 'NULL', claimUntil: 'NULL' }
      : { runAt: now, claimedBy: p.add(claimedBy.worker), claimUntil: `${p.add(toDb(claimedBy.until))}::timestamptz` };
    const text = `
      WITH ${take.map((t) => `${t.name} AS (${t.sql(p)})`).join(', ')},
      l AS (
        INSERT INTO ${this.s}.leases (id, type, status, attributes, blueprints, owner, priority, expires_at, deadline_at, parent_resource_id, child_key,
                                      authorizing_owner, resource_id, phase, phase_attempts, created_at, status_changed_at)
        SELECT ${p.add(lease.id)}, ${p.add(lease.type)}, ${p.add(active ? 'active' : 'acquired')}, ${p.add(JSON.stringify(attributes))}::jsonb, ${p.add(lease.blueprints)}::text[], ${p.add(lease.owner)},
               ${p.add(lease.priority)}::integer, ${p.add(toDb(lease.expiresAt))}::timestamptz, ${p.add(toDb(lease.deadlineAt))}::timestamptz,
               ${p.add(lease.parentResourceId)}, ${p.add(lease.childKey)}, ${this.authorizingOwner(p, lease)}, taken.id,
               ${p.add(active ? null : 'activate')}, ${p.add(active ? 0 : 1)}::integer, ${now}, ${now}
        FROM taken WHERE NOT EXISTS (SELECT 1 FROM conflicts)
        RETURNING *
      ), w AS (
        INSERT INTO ${this.s}.work_items (object_kind, object_id, run_at, priority, seq, claimed_by, claim_expires_at)
        SELECT 'lease', l.id, ${work.runAt}, l.priority, l.seq, ${work.claimedBy}, ${work.claimUntil} FROM l
        RETURNING 1
      ), lg AS (${this.logsFrom('l', logs, p, now, false)})
      SELECT l.*, false AS has_commands, (SELECT json_agg(lg ORDER BY lg.id) FROM lg) AS written_logs,
        (SELECT to_jsonb(taken) FROM taken) AS taken_row, ${this.acquisitionFails('l')} AS failed
      FROM (SELECT 1) AS one LEFT JOIN l ON true`;
    const [r] = await unit.sql.query(text, p.values);
    // The resource is no longer free, or a lease waits: nothing was written.
    if (!r?.id) return null;
    const row = mapLease(r);
    const resource = mapResource(r.taken_row);
    unit.events.push({ kind: 'lease', id: lease.id, from: null, to: 'pending' }, { kind: 'lease', id: lease.id, from: 'pending', to: 'acquired' });
    if (active) unit.events.push({ kind: 'lease', id: lease.id, from: 'acquired', to: 'active', row, resource });
    unit.logs.push(...(r.written_logs ?? []));
    return { lease: row, resource };
  }

  /**
   * See `takeResource`: undoes the statement when slot locks are held by others (SW001,
   * with their keys), or when the resource was taken but `lease` (the CTE that records
   * the acquisition) wrote nothing (SW002: the lease moved on meanwhile).
   */
  acquisitionFails(lease: string): string {
    return `COALESCE(
        (SELECT ${this.s}.undo('SW001', 'slot locks are held: ' || string_agg(k, ', '), to_json(array_agg(k))::text) FROM conflicts HAVING count(*) > 0),
        (SELECT ${this.s}.undo('SW002', 'the lease moved on while the resource was taken for it', '') WHERE EXISTS (SELECT 1 FROM taken) AND NOT EXISTS (SELECT 1 FROM ${lease})))`;
  }

  /**
   * The authorizing owner of a new lease: its own owner, or for a child lease the one its
   * parent resource was built for (read in the inserting statement, so it is the row's).
   */
  private authorizingOwner(p: Params, lease: NewLease): string {
    if (lease.parentResourceId === null) return `${p.add(lease.owner)}::text`;
    return `(SELECT r.authorizing_owner FROM ${this.s}.resources r WHERE r.id = ${p.add(lease.parentResourceId)})`;
  }

  /** The INSERT of log entries, one row per entry for each row of `source`, in the entries' order. */
  private logsFrom(source: string, entries: LogInsert[], p: Params, at: string, blueprintFromSource: boolean): string {
    const json = entries.map((e, ord) => ({ ord, type: e.type, blueprint: e.blueprint ?? null, resource_id: e.resource ?? null, lease_id: e.lease ?? null, data: e.data ?? {} }));
    const blueprint = blueprintFromSource ? `COALESCE(x.blueprint, ${source}.blueprint)` : 'x.blueprint';
    return `
        INSERT INTO ${this.s}.logs (type, blueprint, resource_id, lease_id, data, at, last_at)
        SELECT x.type, ${blueprint}, x.resource_id, x.lease_id, x.data, ${at}, ${at}
        FROM ${source} CROSS JOIN jsonb_to_recordset(${p.add(JSON.stringify(json))}::jsonb)
          AS x(ord integer, type text, blueprint text, resource_id text, lease_id text, data jsonb)
        ORDER BY x.ord
        RETURNING *`;
  }

  /**
   * One statement: a new pending lease, its work item (claimed by `claimedBy` when this
   * broker's workers run it at once), and its `lease.queued` log. Idempotent per id: run
   * again after an unknown outcome, it inserts nothing and returns null.
   */
  async insertLease(unit: Unit, lease: NewLease, claimedBy: { worker: string; until: DateTime } | null): Promise<LeaseRow | null> {
    const p = new Params();
    const now = p.add(toDb(unit.now));
    const text = `
      WITH l AS (
        INSERT INTO ${this.s}.leases (id, type, status, attributes, blueprints, owner, priority, expires_at, deadline_at, parent_resource_id, child_key,
                                      authorizing_owner, created_at, status_changed_at)
        VALUES (${p.add(lease.id)}, ${p.add(lease.type)}, 'pending', ${p.add(JSON.stringify(lease.attributes))}::jsonb, ${p.add(lease.blueprints)}::text[], ${p.add(lease.owner)},
                ${p.add(lease.priority)}::integer, ${p.add(toDb(lease.expiresAt))}::timestamptz, ${p.add(toDb(lease.deadlineAt))}::timestamptz,
                ${p.add(lease.parentResourceId)}, ${p.add(lease.childKey)}, ${this.authorizingOwner(p, lease)}, ${now}, ${now})
        ON CONFLICT (id) DO NOTHING
        RETURNING *
      ), w AS (
        INSERT INTO ${this.s}.work_items (object_kind, object_id, run_at, priority, seq, claimed_by, claim_expires_at)
        SELECT 'lease', l.id, ${now}, l.priority, l.seq, ${p.add(claimedBy?.worker ?? null)}, ${p.add(toDb(claimedBy?.until))}::timestamptz FROM l
        RETURNING 1
      ), lg AS (${this.logsFrom('l', [{ type: 'lease.queued', data: { type: lease.type, owner: lease.owner, priority: lease.priority }, lease: lease.id }], p, now, false)})
      SELECT l.*, false AS has_commands, (SELECT json_agg(lg ORDER BY lg.id) FROM lg) AS written_logs, (SELECT count(*) FROM w) AS work
      FROM l`;
    const [r] = await unit.sql.query(text, p.values);
    if (!r) return null;
    unit.events.push({ kind: 'lease', id: lease.id, from: null, to: 'pending' });
    unit.logs.push(...(r.written_logs ?? []));
    // Claimed by this broker's workers, the item is theirs: no worker anywhere needs a wake.
    if (!claimedBy) unit.woke = true;
    return mapLease(r);
  }

  /**
   * One statement: a command to an object that is not destroyed, and a wake (or a new
   * work item) for the object's worker. Returns the object's status, or null if there is
   * no such object; on `destroyed` nothing is written.
   */
  /**
   * Writes a command and wakes its object's work item, if the object exists in one of
   * `statuses` (default: anything but destroyed). Returns the status found (null: no such
   * object) and the command's id (null: not written).
   */
  async writeCommand(unit: Unit, kind: ObjectKind, id: string, command: CommandRow['command'], data: JsonObject, author: string | null, statuses?: readonly string[]): Promise<{ status: string | null; commandId: number | null }> {
    const p = new Params();
    const now = p.add(toDb(unit.now));
    const table = kind === 'lease' ? 'leases' : 'resources';
    const when = statuses ? `t.status = ANY(${p.add([...statuses])}::text[])` : `t.status <> 'destroyed'`;
    const text = `
      WITH t AS (SELECT status FROM ${this.s}.${table} WHERE id = ${p.add(id)}),
      c AS (
        INSERT INTO ${this.s}.commands (target_kind, target_id, command, data, author, created_at)
        SELECT ${p.add(kind)}, ${p.add(id)}, ${p.add(command)}, ${p.add(JSON.stringify(data))}::jsonb, ${p.add(author)}, ${now}
        FROM t WHERE ${when}
        RETURNING id, target_kind, target_id
      ), w AS (${this.sql.ensureWorkFrom('c', now)})
      SELECT (SELECT status FROM t) AS status, (SELECT id FROM c) AS command_id`;
    const [r] = await unit.sql.query(text, p.values);
    const commandId = r?.command_id == null ? null : Number(r.command_id);
    if (commandId !== null) unit.woke = true;
    return { status: r?.status ?? null, commandId };
  }

  /** Whether a command was consumed yet, and with what outcome; null if there is no such command. */
  async commandOutcome(commandId: number): Promise<{ consumedAt: DateTime | null; outcome: string | null } | null> {
    const [r] = await this.db.query(this.sql.commandOutcome, [commandId]);
    return r ? { consumedAt: fromDb(r.consumed_at), outcome: r.outcome ?? null } : null;
  }

  /**
   * Locks a lease's row for a renewal, until the unit commits, and reads its expiry; undefined
   * when the lease left `status` meanwhile. A renewal judged before this could commit after
   * the holder's signal, reading the row at the old expiry, had aborted.
   */
  async lockLeaseExpiry(unit: Unit, id: string, status: string): Promise<DateTime | null | undefined> {
    const [r] = await unit.sql.query(this.sql.lockLeaseExpiry, [id, status]);
    return r ? fromDb(r.expires_at) : undefined;
  }

  /**
   * The lease's own worker moves its expiry (an `extend` command) in one transaction with
   * the command's consumption and the log entry (coalesced per author). Null if the lease
   * left `status` meanwhile.
   * Watchers in this process get the row as an event whose status did not change.
   */
  async extendLease(unit: Unit, lease: LeaseRow, until: DateTime, commandId: number, log: LogInsert): Promise<LeaseRow | null> {
    const [r] = await unit.sql.query(this.sql.extendLease, [lease.id, lease.status, toDb(until)]);
    if (!r) return null;
    await this.consume(unit, commandId, 'applied');
    // A keepalive renews again and again: one row per author, its count the renewals.
    await this.logCoalesced(unit, log, ['author']);
    const row = { ...mapLease(r), hasCommands: lease.hasCommands };
    unit.events.push({ kind: 'lease', id: lease.id, from: lease.status, to: lease.status, row });
    return row;
  }

  /** Updates columns of an object whose status must still be `status` (the single writer's own bookkeeping). */
  async update(unit: Unit, kind: ObjectKind, id: string, status: string, sets: Sets): Promise<boolean> {
    const p = new Params();
    const where = `WHERE id = ${p.add(id)} AND status = ${p.add(status)}`;
    const table = kind === 'lease' ? 'leases' : 'resources';
    return (await unit.sql.execute(`UPDATE ${this.s}.${table} SET ${setClause(sets, p).slice(2)} ${where}`, p.values)) > 0;
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

  /**
   * Logs `entry`, or bumps the count of the newest entry of its type about the same
   * object (since `since`) when that one has the same values under `same`: a condition
   * met again and again is one row (invariant 5), not a row per retry.
   */
  async logCoalesced<T extends string>(unit: Unit, entry: LogInsert<T>, same: string[], since?: DateTime): Promise<void> {
    const [last] = await unit.sql.query(
      `SELECT id, data FROM ${this.s}.logs WHERE type = $1 AND lease_id IS NOT DISTINCT FROM $2 AND resource_id IS NOT DISTINCT FROM $3
         AND ($4::timestamptz IS NULL OR at >= $4) ORDER BY id DESC LIMIT 1`,
      [entry.type, entry.lease ?? null, entry.resource ?? null, toDb(since ?? null)],
    );
    const data = entry.data as JsonObject;
    const matches = last !== undefined && same.every((key) => JSON.stringify(last.data?.[key]) === JSON.stringify(data[key]));
    if (!(matches && (await this.bumpLog(unit, Number(last.id), data)))) await this.log(unit, entry);
  }

  async bumpLog(unit: Unit, id: number, data: JsonObject, type: string | null = null): Promise<boolean> {
    const rows = await unit.sql.query(this.sql.bumpLog, [id, toDb(unit.now), JSON.stringify(data), type]);
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

  /**
   * Hands a freed-capacity wake to the best-ranked waiting lease that may use these
   * blueprints. `after` passes a wake on down the queue: to leases ranked after the one
   * that could not use it, and only to those that ask for something else (type,
   * attributes, blueprints), since a lease that asks for the same would be refused the same.
   */
  async wakeNextWaiting(unit: Unit, types: string[], blueprints: string[], after?: Pick<LeaseRow, 'priority' | 'seq' | 'type' | 'attributes' | 'blueprints' | 'authorizingOwner' | 'createdAt'>): Promise<string | null> {
    const rows = await unit.sql.query(this.sql.wakeNextWaiting, [
      types,
      blueprints,
      toDb(unit.now),
      after?.seq ?? null,
      after ? this.rank(after, unit.now) : null,
      after ? after.type : null,
      after ? JSON.stringify(after.attributes) : null,
      after?.blueprints ?? null,
      after?.authorizingOwner ?? null,
    ]);
    if (rows[0]) unit.woke = true;
    return rows[0]?.object_id ?? null;
  }

  /** A waiting lease's rank among waiters: its priority, plus one per `priorityAging` it has waited (as the SQL ranks them). */
  private rank(lease: Pick<LeaseRow, 'priority' | 'createdAt'>, now: DateTime): number {
    if (this.priorityAging === null) return lease.priority;
    return lease.priority + Math.floor(Math.max(0, now.toMillis() - lease.createdAt.toMillis()) / this.priorityAging.toMillis());
  }

  /**
   * Freed capacity on an active resource goes to the best-ranked waiting lease: it is
   * woken and the resource is reserved for it, so a newcomer cannot jump the queue.
   * If it cannot use the resource it drops the reservation and passes the wake on. That
   * lease is chosen by rank alone, a wake already due for it or a statement holding it
   * notwithstanding: passed over, it lost its turn to the lease after it. One statement
   * (`handOff` of the SQL) wakes it and reserves the resource, and with `claimFor` claims
   * its work item for that worker when no live claim holds it.
   */
  async handOff(unit: Unit, resourceId: string, type: string, blueprint: string, claimFor?: { worker: string; until: DateTime }): Promise<{ lease: string; claimed: ClaimedWork | null } | null> {
    const p = new Params();
    const text = this.sql.handOff(p, { type, blueprint, resourceId, now: toDb(unit.now), claimFor: claimFor && { worker: claimFor.worker, until: toDb(claimFor.until) } });
    const [row] = await unit.sql.query(text, p.values);
    return row ? this.handedOff(unit, row) : null;
  }

  /** What a hand-off's `woke` row says: the waiter, and its work item if this hand-off claimed it (else the waiter was woken, and the unit says so). */
  private handedOff(unit: Unit, row: Record<string, any>): { lease: string; claimed: ClaimedWork | null } {
    const lease: string = row.object_id;
    if (!row.claimed) {
      unit.woke = true;
      return { lease, claimed: null };
    }
    return { lease, claimed: { kind: 'lease', id: lease, wakeCount: Number(row.wake_count), chained: true, attempts: Number(row.attempts), priority: Number(row.priority ?? 0) } };
  }

  /** A reservation held by a lease that stops waiting frees its resource for the next waiter. */
  async dropReservation(unit: Unit, lease: Pick<LeaseRow, 'id' | 'allocatingResourceId'>): Promise<void> {
    if (!lease.allocatingResourceId) return;
    const freed = await unit.sql.query(`UPDATE ${this.s}.resources SET reserved_for = NULL WHERE id = $1 AND reserved_for = $2 RETURNING type, blueprint`, [lease.allocatingResourceId, lease.id]);
    if (freed[0]) await this.wakeNextWaiting(unit, [freed[0].type], [freed[0].blueprint]);
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

  /** Which of `keys`, in their order, no object but this holder holds now (a read: see `freeSlots`). */
  async freeSlots(kind: ObjectKind, id: string, keys: string[]): Promise<string[]> {
    return (await this.db.query<{ key: string }>(this.sql.freeSlots, [keys, kind, id])).map((r) => r.key);
  }

  /** Takes every key or none: on a conflict the caller's transaction must roll back. */
  async lockSlots(unit: Unit, kind: ObjectKind, id: string, keys: string[]): Promise<void> {
    if (keys.length === 0) return;
    const conflicts = await unit.sql.query<{ key: string }>(this.sql.lockSlots, [[...new Set(keys)], kind, id, toDb(unit.now)]);
    if (conflicts.length > 0) throw new SlotLockConflictError(conflicts.map((c) => c.key));
  }

  /**
   * One statement: blueprint `name` failed once more (a build hook or a policy function
   * threw). Its streak grows, and no new allocation of it starts before now plus the
   * capped exponential backoff of the streak. The upsert serializes concurrent failures
   * of one blueprint on its row, so no increment is lost.
   */
  async blueprintFailed(unit: Unit, name: string, error: string, backoff: { initial: Duration; max: Duration }): Promise<{ streak: number; retryAt: DateTime }> {
    const [row] = await unit.sql.query(this.sql.blueprintFailed, [name, error, toDb(unit.now), backoff.initial.toMillis(), backoff.max.toMillis()]);
    return { streak: Number(row.streak), retryAt: fromDb(row.retry_at)! };
  }

  /** A resource of the blueprint activated: its failure streak is over. */
  async blueprintRecovered(unit: Unit, name: string): Promise<void> {
    await unit.sql.execute(this.sql.blueprintRecovered, [name]);
  }

  async blueprintFailure(name: string, sql: Sql = this.db): Promise<BlueprintFailure | null> {
    const [row] = await sql.query(this.sql.blueprintFailure, [name]);
    return row ? mapBlueprintFailure(row) : null;
  }

  async blueprintFailures(): Promise<BlueprintFailure[]> {
    return (await this.db.query(`SELECT * FROM ${this.s}.blueprint_failures`)).map(mapBlueprintFailure);
  }

  async releaseSlots(unit: Unit, kind: ObjectKind, id: string): Promise<void> {
    await unit.sql.query(this.sql.releaseSlots, [kind, id]);
  }

  // --- work items: claims and the end of a pass ----------------------------------------

  /** Claims up to `limit` due work items for `workerId` (SKIP LOCKED), none of `skip` (`kind:id`, already running here). */
  async claimWork(now: DateTime, limit: number, workerId: string, skip: string[], until: DateTime): Promise<ClaimedWork[]> {
    const rows = await this.db.query(this.sql.claim, [toDb(now), limit, workerId, skip, toDb(until)]);
    return rows.map((row) => ({ kind: row.object_kind, id: row.object_id, wakeCount: Number(row.wake_count), chained: Boolean(row.chained), attempts: Number(row.attempts), priority: row.object_kind === 'resource' ? RESOURCE_PRIORITY : Number(row.priority ?? 0) }));
  }

  /** When the earliest work item scheduled after `now` is due, if any. */
  async nextDueAt(now: DateTime): Promise<DateTime | null> {
    const rows = await this.db.query(this.sql.nextDue, [toDb(now)]);
    return fromDb(rows[0]?.at);
  }

  /** Whether any work item is due at `now`. */
  async anyWorkDue(now: DateTime): Promise<boolean> {
    return (await this.db.query(this.sql.anyWorkDue, [toDb(now)])).length > 0;
  }

  /** Deletes a finished object's work item, unless a wake arrived during the pass (its wake count moved) or the claim is lost. */
  async deleteWork(item: WorkRef): Promise<boolean> {
    return (await this.db.execute(`${this.sql.deleteWork} AND claimed_by = $3 AND wake_count = $4`, [item.kind, item.id, item.workerId, item.wakeCount])) > 0;
  }

  /**
   * Ends a pass: the claim goes, and the item runs again at `runAt` (null: parked until
   * a wake), or at once if a wake arrived during the pass. Null if the claim was lost.
   */
  async finishWork(item: WorkRef, now: DateTime, runAt: DateTime | null, attempts: number): Promise<{ due: boolean } | null> {
    const [row] = await this.db.query(this.sql.finish, [item.kind, item.id, item.workerId, item.wakeCount, toDb(now), toDb(runAt), attempts]);
    return row ? { due: Boolean(row.due) } : null;
  }

  /** Extends the claims of `items` (`kind:id`) that `workerId` holds and no transaction is writing now; resolves with those extended. */
  async heartbeat(items: string[], workerId: string, until: DateTime): Promise<Set<string>> {
    const split = items.map((key) => key.split(/:(.*)/s));
    const rows = await this.db.query(this.sql.heartbeat, [split.map(([kind]) => kind), split.map(([, id]) => id), workerId, toDb(until)]);
    return new Set(rows.map((r) => `${r.object_kind}:${r.object_id}`));
  }

  /** Gives up the claims of one worker, or of every worker (an embedded database has one owner: claims of an earlier one are dead). */
  async releaseClaims(workerId?: string): Promise<void> {
    if (workerId === undefined) await this.db.execute(this.sql.releaseAllClaims);
    else await this.db.execute(this.sql.releaseClaims, [workerId]);
  }

  // --- the allocator's reads and writes -----------------------------------------------

  /** A lease lets go of the resource it drove or had reserved, or that resource of the lease (both rows, one statement). */
  async forgetReservation(unit: Unit, leaseId: string, resourceId: string): Promise<void> {
    await unit.sql.query(this.sql.forgetReservation, [leaseId, resourceId]);
  }

  /** One page of a blueprint's active resources that lease `leaseId` might take, lease count within [low, high], after `after`, not retired. */
  async freeResources(blueprint: string, leaseId: string, low: number, high: number, after: ResourceRow | null, limit: number, retirement: Retirement): Promise<ResourceRow[]> {
    const rows = await this.db.query(this.sql.freeResources, [blueprint, leaseId, low, high, after?.leaseCount ?? null, after ? toDb(after.createdAt) : null, after?.id ?? null, limit, retirement.maxServed, toDb(retirement.bornAfter)]);
    return rows.map(mapResource);
  }

  /**
   * One statement: a pending lease takes an active resource (see `takeResource`), with its
   * slot locks, and moves to acquired with `sets`; a reservation it held elsewhere is freed
   * (`freed`: the resources, and whether each is free now). With `activated` (a blueprint
   * with no `activateLease`) it goes on to active in the same statement, logging that too.
   * Null when the resource is no longer available; slot locks held by others raise SW001.
   */
  async acquireOnResource(
    unit: Unit,
    leaseId: string,
    a: Acquisition,
    sets: Sets,
    logs: LogInsert[],
    activated?: { log: LogInsert; resource: ResourceRow },
  ): Promise<{ lease: LeaseRow; resource: ResourceRow; freed: Array<{ type: string; blueprint: string; free: boolean }> } | null> {
    const result = await this.casIf(unit, 'lease', leaseId, 'pending', activated ? 'active' : 'acquired', sets, {
      before: this.takeResource(leaseId, a, unit.now),
      guard: this.sql.acquisitionGuard,
      ...(activated ? { via: { status: 'acquired', logs }, logs: [activated.log], resource: activated.resource } : { logs }),
      also: [{ name: 'freed', returning: true, sql: (p) => this.sql.acquisitionFreed(p, a.resourceId) }],
      failIf: this.acquisitionFails('upd'),
    });
    if (!result) return null;
    return { lease: result.row, resource: mapResource(result.also.taken[0]), freed: result.also.freed };
  }

  /** Under the lease's row lock: whether it is still pending and drives no allocation nor holds a reservation. */
  async lockLeaseForAllocation(unit: Unit, leaseId: string): Promise<boolean> {
    const [pointer] = await unit.sql.query(this.sql.lockLeasePointer, [leaseId]);
    return !!pointer && !pointer.allocating_resource_id;
  }

  /**
   * Serializes the allocation decisions of one blueprint for the rest of the transaction,
   * and reads what they decide on: resources allocating and active, its failure streak, and whether it drains.
   */
  async lockAllocations(unit: Unit, blueprint: string): Promise<{ allocating: number; active: number; failure: BlueprintFailure | null; draining: boolean }> {
    await unit.sql.query(this.sql.allocationLock, [`slipway:alloc:${this.db.schema}:${blueprint}`]);
    const [counts] = await unit.sql.query(this.sql.allocationCounts, [blueprint]);
    return { allocating: Number(counts.allocating), active: Number(counts.active), failure: counts.failure ? mapBlueprintFailure(counts.failure) : null, draining: Boolean(counts.draining) };
  }

  /** Takes the first free one of a blueprint's `maxResources` capacity slots for a new resource; false when all are held. */
  async takeCapacitySlot(unit: Unit, blueprint: string, maxResources: number, resourceId: string): Promise<boolean> {
    const keys = Array.from({ length: maxResources }, (_, i) => `slipway:capacity:${blueprint}:${i}`);
    return (await unit.sql.query(this.sql.takeCapacitySlot, [keys, resourceId, toDb(unit.now)])).length > 0;
  }

  /** A new pending resource, reserved for the lease that drives it (none: a warm pool's), with its work item. */
  async insertPendingResource(unit: Unit, resource: { id: string; type: string; blueprint: string; reservedFor: string | null; authorizingOwner: string | null }): Promise<void> {
    await unit.sql.query(this.sql.insertPendingResource, [resource.id, resource.type, resource.blueprint, resource.reservedFor, toDb(unit.now), resource.authorizingOwner]);
    unit.events.push({ kind: 'resource', id: resource.id, from: null, to: 'pending' });
    await this.ensureWork(unit, 'resource', resource.id, unit.now);
  }

  /** The idle resource of a full blueprint that lease `leaseId` may reclaim (idle since `idleBefore` or earlier, not retired); with a unit, row-locked (SKIP LOCKED). */
  async reclaimable(blueprint: string, idleBefore: DateTime, leaseId: string, retirement: Retirement, unit?: Unit): Promise<string | null> {
    const text = unit ? this.sql.lockReclaimable(this.sql.reclaimable) : this.sql.reclaimable;
    const rows = await (unit?.sql ?? this.db).query(text, [blueprint, toDb(idleBefore), leaseId, retirement.maxServed, toDb(retirement.bornAfter)]);
    return (rows[0]?.id as string | undefined) ?? null;
  }

  /** Whether a lease still wants a resource of `blueprint` being built: the one it is reserved for, or a waiting lease of the type. */
  async demandFor(type: string, blueprint: string, reservedFor: string | null): Promise<boolean> {
    return (await this.db.query(this.sql.demandFor, [type, blueprint, reservedFor])).length > 0;
  }

  // --- the workers' other writes ------------------------------------------------------

  /** A requeued lease no longer counts on its resource. */
  async uncountLease(unit: Unit, resourceId: string): Promise<void> {
    await unit.sql.query(this.sql.uncountLease, [resourceId]);
  }

  /** Marks an active resource idle from now, if it has no lease and no mark yet. */
  async markIdle(unit: Unit, resourceId: string): Promise<void> {
    await unit.sql.execute(this.sql.markIdle, [resourceId, toDb(unit.now)]);
  }

  /** A resource's status, reservation and lease count, read under its row lock (a reclaim decides on them). */
  async lockResource(unit: Unit, id: string): Promise<{ status: ResourceStatus; reservedFor: string | null; leaseCount: number } | null> {
    const [row] = await unit.sql.query(this.sql.lockResource, [id]);
    return row ? { status: row.status, reservedFor: row.reserved_for ?? null, leaseCount: Number(row.lease_count ?? 0) } : null;
  }

  /**
   * One statement: acquired → active, unless the lease expired by `unit.now`, its resource
   * is no longer active, or a release or break waits for it (see `activationGuard`).
   */
  async activateLease(unit: Unit, leaseId: string, resource: ResourceRow, sets: Sets, logs: LogInsert[], claim?: { workerId: string; wakeCount: number }): Promise<ActivatedLease | null> {
    const result = await this.casIf(unit, 'lease', leaseId, 'acquired', 'active', sets, {
      guard: (p) => this.sql.activationGuard(p, leaseId, resource.id, toDb(unit.now)),
      logs,
      resource,
      also: claim ? [{ name: 'finished', returning: true, sql: (p) => this.sql.activatedLeaseWork(p, claim.workerId, claim.wakeCount, toDb(unit.now)) }] : [],
    });
    if (!result) return null;
    const [finished] = result.also.finished ?? [];
    return { row: result.row, finished: finished ? { due: Boolean(finished.due), at: fromDb(finished.run_at) } : null };
  }

  /**
   * One statement: the lease is destroyed, its slot locks go, a reservation it held goes
   * back (`freed`), its resource counts one lease fewer (`left`: what it is now), and,
   * given the claim of its worker's pass, its work item goes (`dropped`) if that claim
   * still holds it and no wake came since; `waiting`: whether a lease may wait for the
   * resource (without one, a hand-off has no one to hand it to).
   *
   * Given `handOff`, the same statement also hands the resource on (as `handOff` does,
   * its steps the same CTEs): when the lease was destroyed and its resource is active and
   * not retired, the best-ranked waiter is woken (its work item claimed for
   * `handOff.claimFor`) and the resource reserved for it; and the resource, left idle, is
   * woken where it has more to do. Nothing about the resource is then left for another
   * statement, and the destroy needs no transaction of its own.
   */
  async destroyLease(
    unit: Unit,
    leaseId: string,
    from: LeaseStatus,
    logs: LogInsert[],
    claim?: { workerId: string; wakeCount: number },
    releasedBy?: ReleasedBy,
    handOff?: DestroyHandOff,
    wakeIdle = false,
  ): Promise<DestroyedLease> {
    const command: AlsoWrite[] = !releasedBy
      ? []
      : 'commandId' in releasedBy
        ? [this.consumedWith(releasedBy.commandId, unit.now)]
        : [this.releaseWrittenConsumed(releasedBy.written, unit.now)];
    // The hand-off's CTEs share their parameters: the first one's `sql` makes all three, in
    // the order the statement lists them.
    let steps: { next: string; woke: string; ptr: string } | null = null;
    // Embedded, the statement also returns what the waiter's pass would read first, and the
    // pass skips its read: a statement fewer per queued lease. Not on a server: there the
    // pass, started that much sooner, met the row locks of the other releases, and the
    // destroy and the acquisition each took twice as long under 8 acquirers (bench/README.md).
    const withWaiter = this.db.embedded;
    const handing: AlsoWrite[] = handOff
      ? [
          {
            name: 'next',
            sql: (p) => {
              const when = this.sql.destroyedLeaseHandable(p, handOff.resourceId, handOff.retirement.maxServed, toDb(handOff.retirement.bornAfter));
              const made = this.sql.handOffSteps(p, { type: handOff.type, blueprint: handOff.blueprint, resourceId: handOff.resourceId, now: toDb(unit.now), claimFor: handOff.claimFor && { worker: handOff.claimFor.worker, until: toDb(handOff.claimFor.until) } }, when, withWaiter);
              steps = made;
              return made.next;
            },
          },
          { name: 'woke', returning: true, sql: () => steps!.woke },
          { name: 'ptr', returning: withWaiter, sql: () => steps!.ptr },
          ...(withWaiter ? [{ name: 'handed', returning: true, sql: this.sql.handedWaiter }] : []),
        ]
      : [];
    const { also } = await this.casWith(unit, 'lease', leaseId, from, 'destroyed', { phase: null, phase_attempts: 0 }, {
      logs,
      ...(releasedBy ? { via: { status: 'released', logs: releasedBy.logs } } : {}),
      also: [
        ...command,
        { name: 'slots', sql: this.sql.destroyedLeaseSlots },
        { name: 'freed', returning: true, sql: this.sql.destroyedLeaseFreed },
        ...handing,
        { name: 'counted', returning: true, sql: (p) => this.sql.destroyedLeaseCounted(p, toDb(unit.now), handOff !== undefined, withWaiter) },
        { name: 'idle', returning: true, sql: (p: Params) => this.sql.destroyedLeaseIdleWake(p, wakeIdle, toDb(unit.now)) },
        ...(handOff ? [] : [{ name: 'waiter', returning: true, sql: this.sql.destroyedLeaseWaiter }]),
        ...(claim ? [{ name: 'dropped', returning: true, sql: (p: Params) => this.sql.destroyedLeaseWork(p, claim.workerId, claim.wakeCount) }] : []),
      ],
    });
    const left = also.counted[0];
    const [woke] = also.woke ?? [];
    if ((also.idle?.length ?? 0) > 0) unit.woke = true;
    return {
      dropped: (also.dropped?.length ?? 0) > 0,
      waiting: handOff ? woke !== undefined : also.waiter.length > 0,
      freed: also.freed,
      left: left
        ? {
            id: left.id, status: left.status, leaseCount: Number(left.lease_count), type: left.type, blueprint: left.blueprint,
            leasesServed: Number(left.leases_served), statusChangedAt: fromDb(left.status_changed_at)!, blueprintDraining: Boolean(left.blueprint_draining),
          }
        : null,
      ...(handOff ? { handedTo: woke ? { ...this.handedOff(unit, woke), ...(withWaiter ? { waiter: handedWaiter(woke, also) } : {}) } : null } : {}),
    };
  }

  /** A write of the CAS statement that records the holder's release command already consumed (only if the CAS applies). */
  releaseWrittenConsumed(written: { data: JsonObject; author: string | null }, now: DateTime): AlsoWrite {
    return { name: 'consumed', sql: (p) => this.sql.consumedRelease(p, JSON.stringify(written.data), written.author, toDb(now)) };
  }

  /** A write of the CAS statement that consumes `commandId` (exactly once, only if the CAS applies). */
  consumedWith(commandId: number, now: DateTime): AlsoWrite {
    return { name: 'consumed', sql: (p) => this.sql.consumedWith(p, commandId, toDb(now)) };
  }

  /** The guard of an idle expiry: no lease was acquired or reserved since the read. */
  readonly idleGuard = () => this.sql.idleGuard();

  // --- pool policies -------------------------------------------------------------------

  /**
   * Sets whether a blueprint drains, for every broker of the schema; returns whether it
   * drained before. A drain wakes the workers of its idle resources (each releases its
   * own), in the same transaction: nothing of it lives only in memory.
   */
  async setDraining(unit: Unit, blueprint: string, draining: boolean, author: string | null): Promise<{ wasDraining: boolean; idle: string[] }> {
    const [row] = await unit.sql.query(this.sql.setDraining, [blueprint, draining, toDb(unit.now), author]);
    const idle = draining ? (await unit.sql.query(this.sql.idleResourcesOf, [blueprint])).map((r) => r.id as string) : [];
    if (idle.length > 0) await this.wake(unit, 'resource', idle);
    return { wasDraining: Boolean(row?.was_draining), idle };
  }

  /**
   * A blueprint's spare resources, for its warm pool (`minIdle`): active with no lease, not
   * reserved and not retired (`idle`), and pending with no lease waiting for them
   * (`warming`). Read in the unit that holds the blueprint's allocation lock, so that the
   * decisions taken on it (build more, let one expire) are serialized.
   */
  async spareResources(unit: Unit, blueprint: string, retirement: Retirement): Promise<{ idle: number; warming: number }> {
    const [row] = await unit.sql.query(this.sql.spareResources, [blueprint, retirement.maxServed, toDb(retirement.bornAfter)]);
    return { idle: Number(row?.idle ?? 0), warming: Number(row?.warming ?? 0) };
  }

  /**
   * How many leases a quota counts now. With a unit, under the quota's lock (held to the
   * end of the unit), which every acquisition the quota counts takes: then the count is
   * exact until the unit ends, and an acquisition in it keeps the quota.
   */
  async quotaCount(quota: Quota, unit?: Unit): Promise<number> {
    if (unit) await unit.sql.query(this.sql.allocationLock, [`slipway:quota:${this.db.schema}:${quota.key}`]);
    const [row] = await (unit?.sql ?? this.db).query(this.sql.quotaCount, [...this.quotaParams(quota), this.quotaIsPrefix(quota)]);
    return Number(row?.n ?? 0);
  }

  /** A lease the quota counted is gone: its best-ranked waiting lease is woken. */
  async wakeQuotaWaiter(unit: Unit, quota: Quota): Promise<string | null> {
    const rows = await unit.sql.query(this.sql.wakeQuotaWaiter, [...this.quotaParams(quota), toDb(unit.now), this.quotaIsPrefix(quota)]);
    if (rows[0]) unit.woke = true;
    return rows[0]?.object_id ?? null;
  }

  private quotaParams(quota: Quota): [string | null, string | null] {
    return [quota.type, quota.owner === null ? null : this.quotaIsPrefix(quota) ? quota.owner.slice(0, -1) : quota.owner];
  }

  private quotaIsPrefix(quota: Quota): boolean {
    return quota.owner !== null && quota.owner.endsWith('/*');
  }

  /** The blueprints whose `blueprint_states` row says they drain. */
  async drainingBlueprints(): Promise<Set<string>> {
    return new Set((await this.db.query(this.sql.blueprintStates)).filter((r) => r.draining).map((r) => r.blueprint as string));
  }

  /** The types resources of `blueprint` had: what a drain or resume concerns when this broker does not know the blueprint. */
  async typesOfBlueprint(blueprint: string, sql: Sql = this.db): Promise<string[]> {
    return (await sql.query(this.sql.typesOfBlueprint, [blueprint])).map((r) => r.type as string);
  }

  // --- child leases --------------------------------------------------------------------

  /** The child lease a resource took under `key`, if any (the newest). */
  async childLease(resourceId: string, key: string): Promise<LeaseRow | null> {
    const [row] = await this.db.query(this.sql.childLease, [resourceId, key]);
    return row ? mapLease(row) : null;
  }

  /** The ids of a resource's child leases that are not on their way out yet. */
  async liveChildLeases(unit: Unit, resourceId: string): Promise<string[]> {
    return (await unit.sql.query(this.sql.liveChildLeases, [resourceId])).map((r) => r.id as string);
  }

  // --- authorizations -------------------------------------------------------------------

  /** The deciding authorization row of `owner` on each of `blueprints` that has one (a snapshot read). */
  async authorizationStates(blueprints: string[], owner: string): Promise<Map<string, AuthorizationRecord>> {
    const rows = await this.db.query(this.sql.authorizationStates, [blueprints, owner]);
    return new Map(rows.map((r) => [r.blueprint as string, mapAuthorization(r)]));
  }

  /**
   * Inside the allocator's transaction: the state that decides for `owner` on `blueprint`,
   * read under the blueprint's authorization lock, held shared until the transaction ends.
   */
  async authorizationGate(unit: Unit, blueprint: string, owner: string | null): Promise<AuthorizationState | null> {
    await unit.sql.query(this.sql.authorizationLockShared, [this.authorizationLockKey(blueprint)]);
    if (owner === null) return null;
    const [row] = await unit.sql.query(this.sql.authorizationStates, [[blueprint], owner]);
    return row ? (row.state as AuthorizationState) : null;
  }

  /** Serializes the changes of a blueprint's authorizations with each other and with the allocator's checks, until the unit ends. */
  async lockAuthorizations(unit: Unit, blueprint: string): Promise<void> {
    await unit.sql.query(this.sql.authorizationLock, [this.authorizationLockKey(blueprint)]);
  }

  private authorizationLockKey(blueprint: string): string {
    return `slipway:auth:${this.db.schema}:${blueprint}`;
  }

  /** The row of exactly this blueprint and owner pattern, if any. */
  async authorizationRow(unit: Unit, blueprint: string, pattern: string): Promise<AuthorizationRecord | null> {
    const [row] = await unit.sql.query(this.sql.authorizationRow, [blueprint, pattern]);
    return row ? mapAuthorization(row) : null;
  }

  /** A `requested` row for the pattern unless it has one already; the row, and whether this call wrote it. */
  async requestAuthorization(unit: Unit, blueprint: string, pattern: string, author: string | null): Promise<{ record: AuthorizationRecord; created: boolean }> {
    const [row] = await unit.sql.query(this.sql.requestAuthorization, [blueprint, pattern, toDb(unit.now), author]);
    if (row) return { record: mapAuthorization(row), created: true };
    return { record: (await this.authorizationRow(unit, blueprint, pattern))!, created: false };
  }

  /** Sets the pattern's state (creating its row); null when it already was in that state. */
  async setAuthorization(unit: Unit, blueprint: string, pattern: string, state: AuthorizationState, author: string | null): Promise<AuthorizationRecord | null> {
    const [row] = await unit.sql.query(this.sql.setAuthorization, [blueprint, pattern, state, toDb(unit.now), author]);
    return row ? mapAuthorization(row) : null;
  }

  /** Wakes the pending leases a change of the pattern on the blueprint concerns (see the statement); their ids. */
  async wakeForAuthorization(unit: Unit, blueprint: string, pattern: string, type: string | null): Promise<string[]> {
    const rows = await unit.sql.query(this.sql.wakeForAuthorization, [blueprint, pattern, type, toDb(unit.now)]);
    if (rows.length > 0) unit.woke = true;
    return rows.map((r) => r.object_id as string);
  }

  async listAuthorizations(q: { blueprint?: string; owner?: string; state?: AuthorizationState }): Promise<AuthorizationRecord[]> {
    return (await this.db.query(this.sql.listAuthorizations, [q.blueprint ?? null, q.owner ?? null, q.state ?? null])).map(mapAuthorization);
  }

  /** Pending leases whose wait is for an authorization, by type. */
  async waitingForAuthorization(): Promise<Array<{ type: string; n: number }>> {
    return (await this.db.query(this.sql.waitingForAuthorization)).map((r) => ({ type: r.type, n: Number(r.n) }));
  }

  /** Rows in state `requested`, by blueprint. */
  async requestedAuthorizations(): Promise<Array<{ blueprint: string; n: number }>> {
    return (await this.db.query(this.sql.requestedAuthorizations)).map((r) => ({ blueprint: r.blueprint, n: Number(r.n) }));
  }

  // --- the public API's reads --------------------------------------------------------

  /** Leases oldest request first; `limit` undefined reads every match. */
  async listLeases(q: { statuses: string[] | null; type?: string; owner?: string; resource?: string; parentResource?: string } & Page): Promise<LeaseRow[]> {
    const params = [q.statuses, q.type ?? null, q.owner ?? null, q.resource ?? null, q.parentResource ?? null, q.limit ?? null, q.offset ?? 0];
    return (await this.db.query(this.sql.listLeases, params)).map(mapLease);
  }

  /** Resources oldest first; `limit` undefined reads every match. */
  async listResources(q: { statuses: string[] | null; type?: string; blueprint?: string } & Page): Promise<ResourceRow[]> {
    return (await this.db.query(this.sql.listResources, [q.statuses, q.type ?? null, q.blueprint ?? null, q.limit ?? null, q.offset ?? 0])).map(mapResource);
  }

  /** Log rows, oldest first, raw (the broker renders them). */
  async listLogs(f: { lease?: string; resource?: string; blueprint?: string; type?: string }): Promise<Array<Record<string, any>>> {
    return this.db.query(this.sql.listLogs, [f.lease ?? null, f.resource ?? null, f.blueprint ?? null, f.type ?? null]);
  }

  /** Resources counted by blueprint, type, status and whether their destroy is under way, with the oldest status change of each group. */
  async resourceCounts(): Promise<Array<{ blueprint: string; type: string; status: ResourceStatus; destroying: boolean; n: number; idle: number; oldest: DateTime | null }>> {
    return (await this.db.query(this.sql.resourceCounts)).map((r) => ({ blueprint: r.blueprint, type: r.type, status: r.status, destroying: Boolean(r.destroying), n: Number(r.n), idle: Number(r.idle), oldest: fromDb(r.oldest) }));
  }

  /** Leases counted by type and status, with the oldest status change of each group. */
  async leaseCounts(): Promise<Array<{ type: string; status: LeaseStatus; n: number; oldest: DateTime | null }>> {
    return (await this.db.query(this.sql.leaseCounts)).map((r) => ({ type: r.type, status: r.status, n: Number(r.n), oldest: fromDb(r.oldest) }));
  }
}

function setClause(sets: Sets, p: Params): string {
  let clause = '';
  for (const [column, value] of Object.entries(sets)) {
    const v = value && typeof value === 'object' && !Array.isArray(value) && !isDateTime(value) ? JSON.stringify(value) : isDateTime(value) ? toDb(value) : value;
    clause += `, ${column} = ${p.add(v)}${column === 'attributes' ? '::jsonb' : ''}`;
  }
  return clause;
}

function isDateTime(value: unknown): value is DateTime {
  return !!value && typeof value === 'object' && 'toISO' in value;
}
