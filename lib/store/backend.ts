import type { DateTime, Duration } from 'luxon';
import type { LogDataByType, LogType } from '../logs/log-types.js';
import type { AuthorizationRecord, AuthorizationState } from '../model/authorizations.js';
import type { LeaseRecord, ResourceRecord } from '../model/lease.js';
import type { JsonObject } from '../model/spec.js';
import type { Quota } from '../model/quotas.js';
import type { LeaseStatus, ObjectKind, ResourceStatus } from '../model/states.js';
import type { Sql } from './db.js';
import type { Params } from './params.js';

/** One page of a list: at most `limit` rows (undefined: all) after skipping `offset`. */
export interface Page {
  limit?: number;
  offset?: number;
}

/*
 * What the engine and the broker ask of storage, in one place: `StoreBackend`, with the rows
 * it reads and writes. `Store` (store.ts) implements it on PostgreSQL or PGlite, with every
 * statement in lib/store/sql/. Nothing above lib/store/ sees SQL, a schema name or a driver.
 *
 * A *unit of work* (`unit`, `single`) is one transaction, or one statement that commits by
 * itself. Each write method takes the unit it joins; the status change it makes commits
 * together with the work item, command and log rows that follow from it, or not at all.
 * Status events and log rows are announced to this process's listeners after the commit.
 */

export interface LeaseRow extends LeaseRecord {
  seq: number;
  blueprints: string[] | null;
  allocatingResourceId: string | null;
  childKey: string | null;
  deadlineAt: DateTime | null;
  waitLogId: number | null;
  phase: string | null;
  phaseAttempts: number;
  /** Allocations this lease drove that failed in a row, and the last one's error. */
  allocationFailures: number;
  lastFailure: string | null;
  /** No new allocation for this lease before then (its own backoff). */
  allocateAfter: DateTime | null;
  /** Why the lease's own worker released it, when the clock did. */
  endCause: 'expired' | 'timeout' | null;
  /** Whether unconsumed commands to this lease existed when the row was read. */
  hasCommands: boolean;
  /** Those commands in order, when the read returned them too (`Store.lease`); a worker then need not read them again. */
  commands?: CommandRow[];
  /** Its resource as the same read found it (`Store.lease`), or null when it has none; absent from rows a write returned. */
  resource?: ResourceRow | null;
  /** The resource it drives or has reserved (`allocatingResourceId`) as the same read found it (`Store.lease`), or null; absent from rows a write returned. */
  reserved?: ResourceRow | null;
  /**
   * The owner whose authorization the allocator checks: the lease's own owner, or for a
   * child lease the authorizing owner of its parent resource. Null: none (never authorized).
   */
  authorizingOwner: string | null;
}

/** What `lease.signal` needs to know of a lease. */
export type LeaseStatusRow = Pick<LeaseRow, 'id' | 'status' | 'brokenReason' | 'expiresAt' | 'statusChangedAt'>;

export interface LeaseWithResource extends LeaseRow {
  resource: ResourceRow | null;
}

export interface ResourceRow extends ResourceRecord {
  allocated: boolean;
  phase: string | null;
  phaseAttempts: number;
  reservedFor: string | null;
  idleSince: DateTime | null;
  /** Leases on this resource that are not destroyed yet. */
  leaseCount: number;
  /** It broke because a build hook (allocateResource, activateResource) failed. */
  buildFailed: boolean;
  /** Whether unconsumed commands to this resource existed when the row was read. */
  hasCommands: boolean;
  /** The authorizing owner of the lease that drove its allocation: what its child leases are authorized as. */
  authorizingOwner: string | null;
  /** Leases it has taken in its life (`maxLeasesPerResourceLifetime`). */
  leasesServed: number;
  /** Whether its blueprint drains; read only with the worker's read of the resource (`Store.resource`), else false. */
  blueprintDraining: boolean;
}

export interface CommandRow {
  id: number;
  targetKind: ObjectKind;
  targetId: string;
  command: 'release' | 'reclaim' | 'break' | 'extend';
  data: JsonObject;
  author: string | null;
}

/** A status change; or, with `from` equal to `to`, a lease whose expiry moved (an extend). */
export interface StatusEvent {
  kind: ObjectKind;
  id: string;
  from: string | null;
  to: string;
  /** The row as the change left it, and for a lease its resource when the writer had it: watchers in this process need not read them. */
  row?: LeaseRow | ResourceRow;
  resource?: ResourceRow;
}

export interface LogInsert<T extends string = string> {
  type: T;
  data: T extends LogType ? LogDataByType[T] : JsonObject;
  lease?: string | null;
  resource?: string | null;
  blueprint?: string | null;
}

/** One short transaction (or one statement on its own), plus what to announce once it commits. */
export interface Unit {
  sql: Sql;
  now: DateTime;
  events: StatusEvent[];
  logs: Array<Record<string, unknown>>;
  /** Work became due: this broker's workers, and the other brokers of the schema, should look. */
  woke: boolean;
  /** One statement on its own (`Store.single`): a read after it, to say why it was refused, is not part of it. */
  single?: true;
}

/** More writes in the statement of a compare-and-set; they see the updated row as `upd`. */
export interface AlsoWrite {
  name: string;
  sql: (p: Params) => string;
  /** Hand back its RETURNING rows (`CasResult.also[name]`). */
  returning?: boolean;
}

/**
 * The hand-off a lease's destroy makes in its own statement (`destroyLease`): the lease's
 * resource, its type and blueprint, the blueprint's recycling limits (a retired resource is
 * handed to no one), the worker that claims the waiter's work item (none: the waiter is only
 * woken).
 */
export interface DestroyHandOff {
  resourceId: string;
  type: string;
  blueprint: string;
  retirement: Retirement;
  claimFor?: { worker: string; until: DateTime };
}

/**
 * What a lease's destroy did: reservations it held elsewhere went back (`freed`), its
 * resource counts one lease fewer (`left`: what it is now), its work item went
 * (`dropped`), and whether a lease may wait for the resource (`waiting`). Given a hand-off
 * (`DestroyHandOff`), `handedTo` is the waiter it went to (null: none), with its work item
 * when the hand-off claimed it, and then (`waiter`, embedded only) the lease as its pass
 * would read it first, when the statement's own rows say it all.
 */
export interface DestroyedLease {
  freed: Array<{ type: string; blueprint: string }>;
  left: LeftResource | null;
  dropped: boolean;
  waiting: boolean;
  handedTo?: { lease: string; claimed: ClaimedWork | null; waiter?: LeaseRow } | null;
}

export interface CasOptions {
  /** Log entries written with the status change, after its `status.changed` entry. */
  logs?: LogInsert[];
  /** Writes before the CAS, which `guard` may name (the resource row an acquisition takes). */
  before?: AlsoWrite[];
  /** A further condition of the write (the resource is still active, no release is waiting). Refused: `casIf` returns null. */
  guard?: (p: Params) => string;
  also?: AlsoWrite[];
  /** An expression evaluated last that may raise, undoing the whole statement (slot locks held by others). */
  failIf?: string;
  /** A lease's resource as the writer has it, handed to watchers in this process with the event. */
  resource?: ResourceRow;
  /**
   * A status the object passes through in this one write, with the logs of reaching it: a
   * lease released and destroyed at once goes active → released → destroyed, and its log
   * and events say so, each step a legal transition.
   */
  via?: { status: string; logs: LogInsert[] };
}

/**
 * The release a destroy also records (`destroyLease`): a release command already written,
 * consumed by the statement, or one the statement writes consumed (the holder's own
 * release, run inline); with the logs of the `released` step.
 */
/**
 * An activation (`activateLease`): the lease as activated, and, given the claim of the pass
 * that activated it, whether the same statement released that claim on its work item
 * (null: commands wait for the lease, or the claim was lost, and the pass goes on).
 */
export interface ActivatedLease {
  row: LeaseRow;
  finished: { due: boolean; at: DateTime | null } | null;
}

export type ReleasedBy = ({ commandId: number } | { written: { data: JsonObject; author: string | null } }) & { logs: LogInsert[] };

/** What an acquisition takes, in the statement that also moves the lease to acquired (`Store.takeResource`). */
export interface Acquisition {
  resourceId: string;
  /** `maxLeasesPerResource` of the resource's blueprint. */
  maxLeases: number | null;
  /** Slot locks the lease holds until it is destroyed: all of them, or the statement does nothing. */
  slots: string[];
  /** Take the resource only if no lease of this type waits (first come, first served for a newcomer). */
  unlessWaiting?: string;
  /**
   * Take the resource only if the lease has not expired by the statement's time: the
   * statement activates it too (a blueprint with no `activateLease`), and no lease is
   * activated past its expiry.
   */
  unexpired?: boolean;
  /** The blueprint's recycling limits (see `retirement`): a resource past them takes no lease. */
  retirement: Retirement;
}

/** A resource as the statement that destroyed one of its leases left it. */
export interface LeftResource {
  id: string;
  status: ResourceStatus;
  leaseCount: number;
  type: string;
  blueprint: string;
  leasesServed: number;
  /** While active: when it became active, from which `maxResourceAge` counts. */
  statusChangedAt: DateTime;
  blueprintDraining: boolean;
}

/** What a resource must not be past to take a new lease: it takes none either while its blueprint drains. */
export interface Retirement {
  /** `maxLeasesPerResourceLifetime`: it must have served fewer. */
  maxServed: number | null;
  /** `now - maxResourceAge`: it must have become active after. */
  bornAfter: DateTime | null;
}

export interface CasResult<Row> {
  row: Row;
  also: Record<string, any[]>;
}

/** A blueprint whose builds fail in a row (`Store.blueprintFailed`). */
export interface BlueprintFailure {
  blueprint: string;
  streak: number;
  lastError: string;
  lastFailureAt: DateTime;
  retryAt: DateTime;
}

/** What a new lease row holds (`Store.insertLease`). */
export interface NewLease {
  id: string;
  type: string;
  attributes: JsonObject;
  blueprints: string[] | null;
  owner: string | null;
  priority: number;
  expiresAt: DateTime | null;
  deadlineAt: DateTime | null;
  parentResourceId: string | null;
  childKey: string | null;
}

/** Column updates that go with a CAS, as `column: value`. JSON values are passed as JSON text. */
export type Sets = Record<string, unknown>;

/** Names a new lease or resource. */
export type IdSource = (prefix: 'lease' | 'res') => string;

/** A work item claimed by this worker (`Store.claimWork`). */
export interface ClaimedWork {
  kind: ObjectKind;
  id: string;
  wakeCount: number;
  chained: boolean;
  attempts: number;
  /** The queue's order: resources first (their progress frees leases), then the lease's priority. */
  priority: number;
}

/** A work item as its claim holds it: the pass's end writes only if the claim is still this worker's. */
export interface WorkRef {
  kind: ObjectKind;
  id: string;
  workerId: string;
  wakeCount: number;
}

/**
 * The storage the engine and the broker use, as named domain operations. Methods that take
 * a `Unit` write in it; the others read outside any transaction.
 */
export interface StoreBackend {
  /** Resolves once every unit of work started before the call has committed or failed. */
  settled(): Promise<void>;
  /** Runs one short unit of work in a transaction; announces its status changes and logs after commit. */
  unit<T>(work: (unit: Unit) => Promise<T>): Promise<T>;
  /**
   * A unit of work that is one statement, so it needs no transaction: the statement
   * commits by itself (one round trip instead of three). Its writes are all in that
   * statement (a CAS with its logs and wake-ups, an insert with its work item), so it is
   * exactly as atomic as a transaction. A second statement is a bug and throws.
   */
  single<T>(work: (unit: Unit) => Promise<T>): Promise<T>;
  /** A new id for a lease or resource: random, or from the IdSource the broker was given. */
  newId(prefix: 'lease' | 'res'): string;

  // --- Reads of one object

  /** A lease, with the commands that wait for it, in order. */
  lease(id: string, sql?: Sql): Promise<LeaseRow | null>;
  /** A lease and, in the same read, its resource (what `acquire()` hands over). */
  leaseWithResource(id: string): Promise<LeaseWithResource | null>;
  /**
   * The status of each of these leases that still has a row (history is collected after
   * `retention`). `settled` waits for a renewal being written and reads its outcome.
   */
  leaseStatuses(ids: string[], settled?: boolean): Promise<LeaseStatusRow[]>;
  /** A resource, with whether commands wait for it. */
  resource(id: string, sql?: Sql): Promise<ResourceRow | null>;
  /** The leases on a resource that are not destroyed yet, oldest first. */
  leasesOnResource(resourceId: string, sql?: Sql): Promise<LeaseRow[]>;
  /** How many leases are active, how many of them have no expiry, and since when the oldest is active. */
  activeLeases(): Promise<{ active: number; withoutTtl: number; oldestSince: DateTime | null }>;
  /** The unconsumed commands to an object, oldest first. */
  commands(kind: ObjectKind, id: string, sql?: Sql): Promise<CommandRow[]>;

  // --- Status changes (compare-and-set), logs, wake-ups, commands, slot locks, failure streaks

  /** CAS a lease's status, checked against the transition table; refuses (throws) if the row moved on. */
  casLease(unit: Unit, id: string, from: LeaseStatus, to: LeaseStatus, sets?: Sets, options?: CasOptions): Promise<LeaseRow>;
  /** CAS a resource's status, checked against the transition table; refuses (throws) if the row moved on. */
  casResource(unit: Unit, id: string, from: ResourceStatus, to: ResourceStatus, sets?: Sets, options?: CasOptions): Promise<ResourceRow>;
  /** A CAS whose `guard` may refuse it: null when refused (the caller reads why), the row otherwise. */
  casIf<K extends ObjectKind>(unit: Unit, kind: K, id: string, from: string, to: string, sets: Sets, options: CasOptions): Promise<CasResult<K extends 'lease' ? LeaseRow : ResourceRow> | null>;
  /** A CAS that must apply, with the RETURNING rows of its `also` writes. */
  casWith(unit: Unit, kind: ObjectKind, id: string, from: string, to: string, sets?: Sets, options?: CasOptions): Promise<CasResult<LeaseRow | ResourceRow>>;
  /**
   * The writes that take a resource for lease `leaseId`, as CTEs of the statement that
   * acquires the lease: `taken`, the resource row (still active, not reserved for another
   * lease, below `maxLeases`; its row lock keeps it so until the statement commits); the
   * slot locks; and `conflicts`, the keys held by others. The statement's `failIf`
   * (`acquisitionFails`) then undoes everything if there is any conflict.
   */
  takeResource(leaseId: string, a: Acquisition, now: DateTime): AlsoWrite[];
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
  insertAcquired(unit: Unit, lease: NewLease, a: Acquisition, attributes: JsonObject, blueprint: string, claimedBy: { worker: string; until: DateTime }, active?: boolean): Promise<{ lease: LeaseRow; resource: ResourceRow } | null>;
  /**
   * See `takeResource`: undoes the statement when slot locks are held by others (SW001,
   * with their keys), or when the resource was taken but `lease` (the CTE that records
   * the acquisition) wrote nothing (SW002: the lease moved on meanwhile).
   */
  acquisitionFails(lease: string): string;
  /**
   * One statement: a new pending lease, its work item (claimed by `claimedBy` when this
   * broker's workers run it at once), and its `lease.queued` log. Idempotent per id: run
   * again after an unknown outcome, it inserts nothing and returns null.
   */
  insertLease(unit: Unit, lease: NewLease, claimedBy: { worker: string; until: DateTime } | null): Promise<LeaseRow | null>;
  /**
   * One statement: a command to an object in one of `statuses` (default: any but
   * destroyed), and a wake (or a new work item) for the object's worker. Returns the
   * object's status (null: no such object) and the command's id (null: not written).
   */
  writeCommand(unit: Unit, kind: ObjectKind, id: string, command: CommandRow['command'], data: JsonObject, author: string | null, statuses?: readonly string[]): Promise<{ status: string | null; commandId: number | null }>;
  /** Whether a command was consumed yet, and its outcome (`applied`, `no effect: ...`, `rejected: ...`). */
  commandOutcome(commandId: number): Promise<{ consumedAt: DateTime | null; outcome: string | null } | null>;
  /** Locks a lease's row for a renewal until the unit commits; its expiry, or undefined when its status is no longer `status`. */
  lockLeaseExpiry(unit: Unit, id: string, status: string): Promise<DateTime | null | undefined>;
  /**
   * The lease's worker moves its expiry to `until`, consuming the `extend` command, with a
   * log entry; null if its status is no longer the one read. Announced to this process as
   * an event whose `from` and `to` are the same status.
   */
  extendLease(unit: Unit, lease: LeaseRow, until: DateTime, commandId: number, log: LogInsert): Promise<LeaseRow | null>;
  /** Updates columns of an object whose status must still be `status` (the single writer's own bookkeeping). */
  update(unit: Unit, kind: ObjectKind, id: string, status: string, sets: Sets): Promise<boolean>;
  /** Writes one log row in the unit (announced after commit); its id. */
  log<T extends string>(unit: Unit, entry: LogInsert<T>): Promise<number>;
  /**
   * Logs `entry`, or bumps the count of the newest entry of its type about the same
   * object (since `since`) when that one has the same values under `same`: a condition
   * met again and again is one row (invariant 5), not a row per retry.
   */
  logCoalesced<T extends string>(unit: Unit, entry: LogInsert<T>, same: string[], since?: DateTime): Promise<void>;
  /** Counts one more occurrence of log row `id`, with `data` as its latest values; with `type`, only if the row is of that type. */
  bumpLog(unit: Unit, id: number, data: JsonObject, type?: string | null): Promise<boolean>;
  /** The object's work item, due at `runAt` (null: now), created if it has none. */
  ensureWork(unit: Unit, kind: ObjectKind, id: string, runAt: DateTime | null, priority?: number, seq?: number): Promise<void>;
  /** Makes the work items of these objects due now, counting a wake on each (a running pass then goes once more). */
  wake(unit: Unit, kind: ObjectKind, ids: string[]): Promise<void>;
  /**
   * Hands a freed-capacity wake to the best-ranked waiting lease that may use these
   * blueprints. `after` passes a wake on down the queue: to leases ranked after the one
   * that could not use it, and only to those that ask for something else (type,
   * attributes, blueprints), since a lease that asks for the same would be refused the same.
   */
  wakeNextWaiting(unit: Unit, types: string[], blueprints: string[], after?: Pick<LeaseRow, 'priority' | 'seq' | 'type' | 'attributes' | 'blueprints' | 'authorizingOwner' | 'createdAt'>): Promise<string | null>;
  /**
   * Freed capacity on an active resource goes to the best-ranked waiting lease: it is
   * woken and the resource is reserved for it, so a newcomer cannot jump the queue.
   * If it cannot use the resource it drops the reservation and passes the wake on.
   * With `claimFor`, the waiter's work item is claimed by that worker too when no live
   * claim holds it: `claimed` is then the item, for the worker to run.
   */
  handOff(unit: Unit, resourceId: string, type: string, blueprint: string, claimFor?: { worker: string; until: DateTime }): Promise<{ lease: string; claimed: ClaimedWork | null } | null>;
  /** A reservation held by a lease that stops waiting frees its resource for the next waiter. */
  dropReservation(unit: Unit, lease: Pick<LeaseRow, 'id' | 'allocatingResourceId'>): Promise<void>;
  /** Records a command to an object and makes its work item due; the object's own worker consumes it. */
  command(unit: Unit, kind: ObjectKind, id: string, command: CommandRow['command'], data?: JsonObject, author?: string | null): Promise<void>;
  /** Marks a command consumed with its outcome; false if it already was (exactly once). */
  consume(unit: Unit, commandId: number, outcome: string): Promise<boolean>;
  /** Which of `keys`, in their order, no object but this holder holds now (a read: see `freeSlots`). */
  freeSlots(kind: ObjectKind, id: string, keys: string[]): Promise<string[]>;
  /** Takes every key or none: on a conflict the caller's transaction must roll back. */
  lockSlots(unit: Unit, kind: ObjectKind, id: string, keys: string[]): Promise<void>;
  /**
   * One statement: blueprint `name` failed once more (a build hook or a policy function
   * threw). Its streak grows, and no new allocation of it starts before now plus the
   * capped exponential backoff of the streak. The upsert serializes concurrent failures
   * of one blueprint on its row, so no increment is lost.
   */
  blueprintFailed(unit: Unit, name: string, error: string, backoff: { initial: Duration; max: Duration }): Promise<{ streak: number; retryAt: DateTime }>;
  /** A resource of the blueprint activated: its failure streak is over. */
  blueprintRecovered(unit: Unit, name: string): Promise<void>;
  /** A blueprint's failure streak and backoff, if it has one. */
  blueprintFailure(name: string, sql?: Sql): Promise<BlueprintFailure | null>;
  /** Every blueprint's failure streak (stats). */
  blueprintFailures(): Promise<BlueprintFailure[]>;
  /** Frees every slot lock an object holds. */
  releaseSlots(unit: Unit, kind: ObjectKind, id: string): Promise<void>;

  // --- The work queue: claim, heartbeat, finish

  /** Claims up to `limit` due work items for `workerId` (SKIP LOCKED), none of `skip` (`kind:id`, already running here). */
  claimWork(now: DateTime, limit: number, workerId: string, skip: string[], until: DateTime): Promise<ClaimedWork[]>;
  /** When the earliest work item scheduled after `now` is due, if any. */
  nextDueAt(now: DateTime): Promise<DateTime | null>;
  /** Whether any work item is due at `now`. */
  anyWorkDue(now: DateTime): Promise<boolean>;
  /** Deletes a finished object's work item, unless a wake arrived during the pass (its wake count moved) or the claim is lost. */
  deleteWork(item: WorkRef): Promise<boolean>;
  /**
   * Ends a pass: the claim goes, and the item runs again at `runAt` (null: parked until
   * a wake), or at once if a wake arrived during the pass. Null if the claim was lost.
   */
  finishWork(item: WorkRef, now: DateTime, runAt: DateTime | null, attempts: number): Promise<{ due: boolean } | null>;
  /**
   * Extends the claims of `items` (`kind:id`) that `workerId` still holds, skipping a row
   * another transaction is writing instead of waiting for it; resolves with those extended.
   */
  heartbeat(items: string[], workerId: string, until: DateTime): Promise<Set<string>>;
  /** Gives up the claims of one worker, or of every worker (an embedded database has one owner: claims of an earlier one are dead). */
  releaseClaims(workerId?: string): Promise<void>;

  // --- The allocator: candidates, acquire, grow, reclaim

  /** A lease lets go of the resource it drove or had reserved (both rows, one statement). */
  forgetReservation(unit: Unit, leaseId: string, resourceId: string): Promise<void>;
  /** One page of a blueprint's active resources that lease `leaseId` might take, lease count within [low, high], after `after`, not retired. */
  freeResources(blueprint: string, leaseId: string, low: number, high: number, after: ResourceRow | null, limit: number, retirement: Retirement): Promise<ResourceRow[]>;
  /**
   * One statement: a pending lease takes an active resource (see `takeResource`), with its
   * slot locks, and moves to acquired with `sets`; a reservation it held elsewhere is freed
   * (`freed`: the resources, and whether each is free now). With `activated` (a blueprint
   * with no `activateLease`) it goes on to active in the same statement, logging that too.
   * Null when the resource is no longer available; slot locks held by others raise SW001.
   */
  acquireOnResource(unit: Unit, leaseId: string, a: Acquisition, sets: Sets, logs: LogInsert[], activated?: { log: LogInsert; resource: ResourceRow }): Promise<{ lease: LeaseRow; resource: ResourceRow; freed: Array<{ type: string; blueprint: string; free: boolean }> } | null>;
  /** Under the lease's row lock: whether it is still pending and drives no allocation nor holds a reservation. */
  lockLeaseForAllocation(unit: Unit, leaseId: string): Promise<boolean>;
  /**
   * Serializes the allocation decisions of one blueprint for the rest of the transaction,
   * and reads what they decide on: resources allocating and active, and its failure streak.
   */
  lockAllocations(unit: Unit, blueprint: string): Promise<{ allocating: number; active: number; failure: BlueprintFailure | null; draining: boolean }>;
  /** Takes the first free one of a blueprint's `maxResources` capacity slots for a new resource; false when all are held. */
  takeCapacitySlot(unit: Unit, blueprint: string, maxResources: number, resourceId: string): Promise<boolean>;
  /** A new pending resource, reserved for the lease that drives it, with its work item. */
  insertPendingResource(unit: Unit, resource: { id: string; type: string; blueprint: string; reservedFor: string | null; authorizingOwner: string | null }): Promise<void>;
  /** The idle resource of a full blueprint that lease `leaseId` may reclaim (idle since `idleBefore` or earlier); with a unit, row-locked (SKIP LOCKED). */
  reclaimable(blueprint: string, idleBefore: DateTime, leaseId: string, retirement: Retirement, unit?: Unit): Promise<string | null>;
  /** Whether a lease still wants a resource of `blueprint` being built: the one it is reserved for, or a waiting lease of the type. */
  demandFor(type: string, blueprint: string, reservedFor: string | null): Promise<boolean>;

  // --- Activate, release and destroy

  /** A requeued lease no longer counts on its resource. */
  uncountLease(unit: Unit, resourceId: string): Promise<void>;
  /** Marks an active resource idle from now, if it has no lease and no mark yet. */
  markIdle(unit: Unit, resourceId: string): Promise<void>;
  /** A resource's status, reservation and lease count, read under its row lock (a reclaim decides on them). */
  lockResource(unit: Unit, id: string): Promise<{ status: ResourceStatus; reservedFor: string | null; leaseCount: number } | null>;
  /**
   * One statement: acquired → active, unless the lease expired by `unit.now`, its resource
   * is no longer active, or a release or break waits for it (see `activationGuard`).
   */
  activateLease(unit: Unit, leaseId: string, resource: ResourceRow, sets: Sets, logs: LogInsert[], claim?: { workerId: string; wakeCount: number }): Promise<ActivatedLease | null>;
  /**
   * One statement: the lease is destroyed, its slot locks go, a reservation it held goes
   * back (`freed`), its resource counts one lease fewer (`left`: what it is now), and,
   * given the claim of its worker's pass, its work item goes (`dropped`) if that claim
   * still holds it and no wake came since. With `releasedBy`, an active lease is released
   * and destroyed at once, consuming that release command (a blueprint with no hook to call
   * in between): its log shows both steps. `waiting`: whether, in the statement's snapshot,
   * a pending lease may wait for its resource (without one, no hand-off is needed).
   * The resource, left idle, is woken in the same statement when it has more to do: when it
   * is not active, its blueprint drains, or `wakeIdle` (its blueprint has an idle expiry or
   * a recycling limit to schedule).
   */
  destroyLease(
    unit: Unit,
    leaseId: string,
    from: LeaseStatus,
    logs: LogInsert[],
    claim?: { workerId: string; wakeCount: number },
    releasedBy?: ReleasedBy,
    handOff?: DestroyHandOff,
    wakeIdle?: boolean,
  ): Promise<DestroyedLease>;
  /** See `claimLease` in store.ts: the lease's work item claimed in `unit` if no one holds it, and the lease read. */
  claimLease(unit: Unit, id: string, workerId: string, until: DateTime): Promise<{ lease: LeaseRow; wakeCount: number } | null>;
  /** See `releaseClaimed` in store.ts: the holder's release run inline, claim and release in one statement of `unit`; null when it cannot run inline now. */
  releaseClaimed(
    unit: Unit,
    leaseId: string,
    blueprint: string,
    claim: { workerId: string; until: DateTime },
    released: { written: { data: JsonObject; author: string | null }; logs: LogInsert[] },
  ): Promise<{ lease: LeaseRow; resource: ResourceRow; wakeCount: number } | null>;
  /** A write of the CAS statement that records the holder's release command already consumed (only if the CAS applies). */
  releaseWrittenConsumed(written: { data: JsonObject; author: string | null }, now: DateTime): AlsoWrite;
  /** A write of the CAS statement that consumes `commandId` (exactly once, only if the CAS applies). */
  consumedWith(commandId: number, now: DateTime): AlsoWrite;

  /** The guard of an idle expiry (a CAS's `guard`): no lease was acquired or reserved since the read. */
  readonly idleGuard: () => string;

  // --- Pool policies

  /** Sets whether a blueprint drains (shared by every broker); a drain wakes its idle resources' workers in the same unit. */
  setDraining(unit: Unit, blueprint: string, draining: boolean, author: string | null): Promise<{ wasDraining: boolean; idle: string[] }>;
  /** A blueprint's idle and warming resources, under its allocation lock (see `Store.spareResources`). */
  spareResources(unit: Unit, blueprint: string, retirement: Retirement): Promise<{ idle: number; warming: number }>;
  /** How many leases a quota counts; with a unit, under the quota's lock (see `Store.quotaCount`). */
  quotaCount(quota: Quota, unit?: Unit): Promise<number>;
  /** Wakes the best-ranked waiting lease a quota counts. */
  wakeQuotaWaiter(unit: Unit, quota: Quota): Promise<string | null>;
  /** The blueprints that drain. */
  drainingBlueprints(): Promise<Set<string>>;
  /** The types resources of `blueprint` had. */
  typesOfBlueprint(blueprint: string, sql?: Sql): Promise<string[]>;

  // --- Child leases

  /** The child lease a resource took under `key`, if any (the newest). */
  childLease(resourceId: string, key: string): Promise<LeaseRow | null>;
  /** The ids of a resource's child leases that are not on their way out yet. */
  liveChildLeases(unit: Unit, resourceId: string): Promise<string[]>;

  // --- Authorizations (see lib/store/sql/authorizations.ts)

  /** The deciding authorization row of `owner` on each of `blueprints` that has one (a snapshot read). */
  authorizationStates(blueprints: string[], owner: string): Promise<Map<string, AuthorizationRecord>>;
  /**
   * Inside the allocator's transaction: the state that decides for `owner` on `blueprint`,
   * read under the blueprint's authorization lock, held shared until the unit ends (null:
   * no decision, or no owner).
   */
  authorizationGate(unit: Unit, blueprint: string, owner: string | null): Promise<AuthorizationState | null>;
  /** Serializes the changes of a blueprint's authorizations with each other and with the allocator's checks, until the unit ends. */
  lockAuthorizations(unit: Unit, blueprint: string): Promise<void>;
  /** The row of exactly this blueprint and owner pattern, if any. */
  authorizationRow(unit: Unit, blueprint: string, pattern: string): Promise<AuthorizationRecord | null>;
  /** A `requested` row for the pattern unless it has one already; the row, and whether this call wrote it. */
  requestAuthorization(unit: Unit, blueprint: string, pattern: string, author: string | null): Promise<{ record: AuthorizationRecord; created: boolean }>;
  /** Sets the pattern's state (creating its row); null when it already was in that state. */
  setAuthorization(unit: Unit, blueprint: string, pattern: string, state: AuthorizationState, author: string | null): Promise<AuthorizationRecord | null>;
  /** Wakes the pending leases of `type` (null: any) that may use the blueprint and whose authorizing owner the pattern covers; their ids. */
  wakeForAuthorization(unit: Unit, blueprint: string, pattern: string, type: string | null): Promise<string[]>;
  /** Rows for `broker.authorizations.list`; `owner` selects the rows that cover it, the deciding one first. */
  listAuthorizations(q: { blueprint?: string; owner?: string; state?: AuthorizationState }): Promise<AuthorizationRecord[]>;
  /** Pending leases whose wait is for an authorization, by type. */
  waitingForAuthorization(): Promise<Array<{ type: string; n: number }>>;
  /** Rows in state `requested`, by blueprint. */
  requestedAuthorizations(): Promise<Array<{ blueprint: string; n: number }>>;

  // --- Reads and stats for the public API

  /** Leases for `broker.leases.list`: of these statuses (null: any), type, owner, resource and parent resource; one page of them. */
  listLeases(q: { statuses: string[] | null; type?: string; owner?: string; resource?: string; parentResource?: string } & Page): Promise<LeaseRow[]>;
  /** Resources for `broker.resources.list`: of these statuses (null: any), type and blueprint; one page of them. */
  listResources(q: { statuses: string[] | null; type?: string; blueprint?: string } & Page): Promise<ResourceRow[]>;
  /** Log rows, oldest first, raw (the broker renders them). */
  listLogs(f: { lease?: string; resource?: string; blueprint?: string; type?: string }): Promise<Array<Record<string, any>>>;
  /** Resources counted by blueprint, type, status and whether their destroy is under way, with the oldest status change of each group. */
  resourceCounts(): Promise<Array<{ blueprint: string; type: string; status: ResourceStatus; destroying: boolean; n: number; idle: number; oldest: DateTime | null }>>;
  /** Leases counted by type and status, with the oldest status change of each group. */
  leaseCounts(): Promise<Array<{ type: string; status: LeaseStatus; n: number; oldest: DateTime | null }>>;
}
