/**
 * The hot-path statements: claims, compare-and-set writes, slot locks and wake-ups.
 * Each is parameterized and qualified with the library's schema (`S` below). The
 * comment above each says why it is safe under concurrency.
 */

import { allocationWrites } from './allocation-writes.js';
import { authorizationStatements } from './authorizations.js';
import { casWrites, leaseItemClaim, leaseItemSeen } from './cas-writes.js';
import { poolPolicyStatements } from './pool-policies.js';
import { queries } from './queries.js';
import { bestWaiter } from './waiters.js';
import type { Params } from '../params.js';

/** The arguments of a hand-off (`handOff`): the freed resource, its type and blueprint, and the worker that claims the waiter's work item, if one does. */
export interface HandOff {
  type: string;
  blueprint: string;
  resourceId: string;
  now: unknown;
  claimFor?: { worker: string; until: unknown } | null;
}

export function quoteIdent(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) throw new Error(`not a valid schema name: ${name}`);
  return `"${name}"`;
}

/**
 * A condition that turns off synchronous commit for the statement's own transaction (it
 * always holds). Only for the end of a worker's pass (finish, delete): lost in a server
 * crash, the claim it ended stays until it expires and the pass runs again (every pass
 * is idempotent), so waiting for the WAL flush buys nothing. Claims and heartbeats stay
 * synchronous: losing one could let a second worker run a hook that is still running.
 * A later synchronous commit flushes the WAL anyway, so nothing that came after it can
 * survive while it is lost.
 */
const ASYNC_COMMIT = `set_config('synchronous_commit', 'off', true) = 'off'`;

/**
 * `agingMs`: the broker's `priorityAging` in milliseconds, or null for strict priority. A
 * waiter's rank is then its priority plus one per interval waited, as of the statement's
 * time ($3 of wakeNextWaiting); strict priority keeps the plain column, which an index orders.
 */
export function statements(schema: string, agingMs: number | null = null) {
  const S = quoteIdent(schema);
  const rankAt = (now: string) => (agingMs === null ? 'l.priority' : `(l.priority + floor(extract(epoch FROM (${now}::timestamptz - l.created_at)) * 1000 / ${Number(agingMs)})::integer)`);
  const rank = rankAt('$3');
  const policies = poolPolicyStatements(S, rank);
  // What a lease's worker reads of lease l: the row, its unconsumed commands in order (null
  // when there are none), its resource r's row and that of the resource it drives or has
  // reserved (rr: the allocator's first look on a pass after a hand-off); from leaseJoins.
  // A lease's unconsumed commands in order, as JSON (null when there are none).
  const unconsumedOf = (id: string) => `(SELECT jsonb_agg(jsonb_build_object('id', cm.id, 'command', cm.command, 'data', cm.data, 'author', cm.author) ORDER BY cm.id)
                   FROM ${S}.commands cm WHERE cm.target_kind = 'lease' AND cm.target_id = ${id} AND cm.consumed_at IS NULL)`;
  const leaseRead = `l.*, ${unconsumedOf('l.id')} AS unconsumed,
        to_jsonb(r) AS resource_row, to_jsonb(rr) AS reserved_row`;
  const leaseJoins = `LEFT JOIN ${S}.resources r ON r.id = l.resource_id LEFT JOIN ${S}.resources rr ON rr.id = l.allocating_resource_id`;
  /**
   * A hand-off's steps (see `handOff`): the bodies of the CTEs `next`, `woke` and `ptr` (so
   * named: each refers to the one before), for a statement that then reserves the resource
   * (`resource`, its parameter) for `ptr`'s lease: the hand-off of its own, or the destroy
   * that frees the resource (`Store.destroyLease`), whose update of the resource's row sets
   * the reservation, since one statement cannot update a row twice. `when`: a further
   * condition for there to be a waiter at all. `withRow`: `ptr` also returns the waiter's
   * row as it left it (`lease_row`), and `next` the version it read (`version`), for `handedWaiter`.
   */
  const handOffSteps = (p: Params, a: HandOff, when = 'true', withRow = false) => {
    const now = p.add(a.now);
    const resource = p.add(a.resourceId);
    const worker = p.add(a.claimFor?.worker ?? null);
    const until = p.add(a.claimFor?.until ?? null);
    const next = `
        SELECT l.id${withRow ? ', l.xmin::text AS version' : ''} FROM ${S}.leases l
        WHERE l.status = 'pending' AND l.type = ${p.add(a.type)}
          AND (l.blueprints IS NULL OR l.blueprints && ${p.add([a.blueprint])}::text[])
          AND l.allocating_resource_id IS NULL AND ${when}
        ORDER BY ${rankAt(now)} DESC, l.seq
        LIMIT 1
        FOR UPDATE OF l`;
    // Whether no live claim held the item is read from its row as locked (the newest
    // version), before the update: \`claimed\` is then this statement's claim, never a live
    // one of the same worker that happens to end at the same instant (on a manual clock,
    // every claim made at one moment does).
    const woke = `
        UPDATE ${S}.work_items w SET run_at = LEAST(COALESCE(w.run_at, ${now}::timestamptz), ${now}::timestamptz), chained = true, wake_count = w.wake_count + 1,
          claimed_by = CASE WHEN ${worker}::text IS NOT NULL AND o.was_free THEN ${worker}::text ELSE w.claimed_by END,
          claim_expires_at = CASE WHEN ${worker}::text IS NOT NULL AND o.was_free THEN ${until}::timestamptz ELSE w.claim_expires_at END
        FROM (SELECT object_kind, object_id, (claimed_by IS NULL OR claim_expires_at < ${now}::timestamptz) AS was_free FROM ${S}.work_items
              WHERE object_kind = 'lease' AND object_id = (SELECT id FROM next) FOR UPDATE) o
        WHERE w.object_kind = o.object_kind AND w.object_id = o.object_id
        RETURNING w.object_id, w.wake_count, w.attempts, w.priority, ${worker}::text IS NOT NULL AND o.was_free AS claimed`;
    const ptr = `
        UPDATE ${S}.leases pl SET allocating_resource_id = ${resource}
        WHERE pl.id = (SELECT object_id FROM woke) AND pl.status = 'pending' AND pl.allocating_resource_id IS NULL
          AND EXISTS (SELECT 1 FROM ${S}.resources WHERE id = ${resource} AND status = 'active' AND reserved_for IS NULL)
        RETURNING pl.id${withRow ? ', to_jsonb(pl) AS lease_row' : ''}`;
    return { resource, next, woke, ptr };
  };
  /**
   * What the waiter's pass would read first (`leaseWithCommands`), read in the hand-off's
   * statement for the pass that the hand-off's claim runs next: its unconsumed commands in
   * the statement's snapshot, and its work item's wake count there. Valid only if the claim
   * found one wake more (its own: a command committed after the snapshot woke the item
   * too) and the lease's row as locked is the one of the snapshot (`unchanged`: a pass that
   * consumed a command in between wrote it). The lease's row is `ptr`'s, on its newest version.
   */
  const handedWaiter = () => `SELECT ${unconsumedOf('n.id')} AS unconsumed,
        (SELECT wake_count FROM ${S}.work_items WHERE object_kind = 'lease' AND object_id = n.id) AS seen_wake_count,
        n.version = (SELECT x.xmin::text FROM ${S}.leases x WHERE x.id = n.id) AS unchanged
      FROM next n`;
  return {
    handOffSteps,
    handedWaiter,
    ...queries(S),
    ...allocationWrites(S),
    ...casWrites(S),
    ...authorizationStatements(S),
    ...policies,
    // Plain reads that save the object's worker more round trips on every pass: a lease
    // comes with its unconsumed commands in order (null when there are none) and its
    // resource's row, a resource with whether commands wait for it.
    leaseWithCommands: `
      SELECT ${leaseRead}
      FROM ${S}.leases l ${leaseJoins} WHERE l.id = $1`,
    // The same read for a broker that claims the lease's work item now (leaseItemClaim).
    // No row: a worker has it, there is none, or a wake landed as it was claimed
    // (leaseItemSeen), whose command the read may have missed.
    claimLeaseWithCommands: `
      WITH seen AS (${leaseItemSeen(S, '$1')}),
      c AS (${leaseItemClaim(S, '$1', '$2', '$3', '$4')})
      SELECT ${leaseRead}, c.wake_count AS claimed_wake_count
      FROM c CROSS JOIN ${S}.leases l ${leaseJoins} WHERE l.id = $1 AND c.wake_count = (SELECT wake_count FROM seen)`,
    leaseWithResource: `
      SELECT l.*, to_jsonb(r) AS resource_row FROM ${S}.leases l LEFT JOIN ${S}.resources r ON r.id = l.resource_id WHERE l.id = $1`,
    // The watched leases of `lease.signal`, in one read however many there are; a plain
    // snapshot read, it takes no lock.
    leaseStatuses: `
      SELECT id, status, broken_reason, expires_at, status_changed_at FROM ${S}.leases WHERE id = ANY($1::text[])`,
    // The same read at a known expiry: FOR SHARE waits for a renewal being written (it
    // holds the row from `lockLeaseExpiry` to its commit) and reads what it committed.
    leaseStatusesSettled: `
      SELECT id, status, broken_reason, expires_at, status_changed_at FROM ${S}.leases WHERE id = ANY($1::text[]) FOR SHARE`,
    resourceWithCommands: `
      SELECT r.*, EXISTS (SELECT 1 FROM ${S}.commands c WHERE c.target_kind = 'resource' AND c.target_id = r.id AND c.consumed_at IS NULL) AS has_commands,
        ${policies.draining('r.blueprint')} AS blueprint_draining
      FROM ${S}.resources r WHERE r.id = $1`,

    // The allocator's candidates: active resources of one blueprint, least leased first,
    // then oldest; an index range scan (resources_free) that stops at the page size, however
    // large the pool. $3/$4 bound lease_count; ($5, $6, $7) is the keyset of the page before;
    // ($9, $10) the blueprint's recycling limits (a retired resource is no candidate).
    freeResources: `
      SELECT * FROM ${S}.resources r
      WHERE blueprint = $1 AND status = 'active' AND (reserved_for IS NULL OR reserved_for = $2)
        AND lease_count BETWEEN $3 AND $4
        AND ${policies.notRetired('r', '$9', '$10')}
        AND ($5::integer IS NULL OR (lease_count, created_at, id) > ($5::integer, $6::timestamptz, $7::text))
      ORDER BY lease_count, created_at, id
      LIMIT $8`,

    // A lease lets go of the resource it drove or had reserved (both rows, one statement),
    // or a retired resource lets go of the lease it was reserved for.
    forgetReservation: `
      WITH res AS (UPDATE ${S}.resources SET reserved_for = NULL WHERE id = $2 AND reserved_for = $1)
      UPDATE ${S}.leases SET allocating_resource_id = NULL WHERE id = $1 AND status = 'pending' AND allocating_resource_id = $2`,
    // Idle resources of a full blueprint that may be reclaimed for lease $3.
    reclaimable: `
      SELECT r.id FROM ${S}.resources r
      WHERE r.blueprint = $1 AND r.status = 'active' AND r.reserved_for IS NULL AND r.lease_count = 0
        AND r.idle_since IS NOT NULL AND r.idle_since <= $2
        -- A retired one (recycled, or of a draining blueprint) releases itself: reclaiming it
        -- too would only send the lease round again, since no pass lists it as free.
        AND ${policies.notRetired('r', '$4', '$5')}
        AND NOT EXISTS (SELECT 1 FROM ${S}.commands c WHERE c.target_kind = 'resource' AND c.target_id = r.id AND c.consumed_at IS NULL)
        -- Never reclaim a resource built for this very lease: refusing it and then
        -- rebuilding it would churn without end.
        AND NOT EXISTS (SELECT 1 FROM ${S}.logs g WHERE g.lease_id = $3 AND g.resource_id = r.id AND g.type = 'resource.allocating')
      ORDER BY r.idle_since, r.id LIMIT 1`,

    // SKIP LOCKED lets many workers claim at once without waiting on each other; the
    // claim expiry makes a dead worker's items claimable again. Resources go first
    // (their progress frees leases), then leases by priority, then first come first served.
    claim: `
      WITH next AS (
        SELECT object_kind, object_id FROM ${S}.work_items
        WHERE run_at IS NOT NULL AND run_at <= $1
          AND (claimed_by IS NULL OR claim_expires_at < $1)
          AND NOT (object_kind || ':' || object_id = ANY($4::text[]))
        ORDER BY (object_kind = 'resource') DESC, priority DESC, seq, run_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
      )
      UPDATE ${S}.work_items w SET claimed_by = $3, claim_expires_at = $5
      FROM next WHERE w.object_kind = next.object_kind AND w.object_id = next.object_id
      RETURNING w.object_kind, w.object_id, w.wake_count, w.chained, w.attempts, w.priority, w.claim_expires_at`,

    // A heartbeat never waits for a row lock: a row another transaction is writing (a wake,
    // a hand-off, this worker's own end of a pass) is skipped and tried again. Waiting joined
    // the lock queues of busy leases for seconds, and deadlocked with a hand-off that held
    // one of the rows and wanted another, so every claim of the worker could lapse at once.
    heartbeat: `
      WITH mine AS (
        SELECT object_kind, object_id FROM ${S}.work_items
        WHERE (object_kind, object_id) IN (SELECT * FROM unnest($1::text[], $2::text[])) AND claimed_by = $3
        FOR UPDATE SKIP LOCKED)
      UPDATE ${S}.work_items w SET claim_expires_at = $4
      FROM mine WHERE w.object_kind = mine.object_kind AND w.object_id = mine.object_id
      RETURNING w.object_kind, w.object_id`,

    // A wake that arrived while the item was being worked bumped wake_count; finishing
    // then keeps it due instead of overwriting it with a later run_at (no lost wake-up).
    finish: `
      UPDATE ${S}.work_items SET claimed_by = NULL, claim_expires_at = NULL,
        run_at = CASE WHEN wake_count <> $4 THEN $5::timestamptz ELSE $6::timestamptz END,
        chained = CASE WHEN wake_count <> $4 THEN chained ELSE false END,
        attempts = $7
      WHERE object_kind = $1 AND object_id = $2 AND claimed_by = $3 AND ${ASYNC_COMMIT}
      RETURNING run_at IS NOT NULL AND run_at <= $5::timestamptz AS due`,
    deleteWork: `DELETE FROM ${S}.work_items WHERE object_kind = $1 AND object_id = $2 AND ${ASYNC_COMMIT}`,
    activeLeases: `
      SELECT count(*)::int AS active, count(*) FILTER (WHERE expires_at IS NULL)::int AS without_ttl, min(status_changed_at) AS oldest
      FROM ${S}.leases WHERE status = 'active'`,
    releaseAllClaims: `UPDATE ${S}.work_items SET claimed_by = NULL, claim_expires_at = NULL WHERE claimed_by IS NOT NULL`,
    releaseClaims: `UPDATE ${S}.work_items SET claimed_by = NULL, claim_expires_at = NULL WHERE claimed_by = $1`,
    nextDue: `SELECT min(run_at) AS at FROM ${S}.work_items WHERE run_at IS NOT NULL AND run_at > $1`,

    // One work item per object: the primary key plus ON CONFLICT turns a second insert into a wake.
    ensureWork: `
      INSERT INTO ${S}.work_items (object_kind, object_id, run_at, priority, seq)
      VALUES ($1, $2, $3, $4, $5)
      ON CONFLICT (object_kind, object_id) DO UPDATE
        SET run_at = LEAST(COALESCE(${S}.work_items.run_at, EXCLUDED.run_at), EXCLUDED.run_at),
            wake_count = ${S}.work_items.wake_count + 1`,
    // ensureWork for the rows of a CTE with target_kind, target_id: a command's driver.
    ensureWorkFrom: (source: string, at: string) => `
      INSERT INTO ${S}.work_items (object_kind, object_id, run_at)
      SELECT target_kind, target_id, ${at}::timestamptz FROM ${source}
      ON CONFLICT (object_kind, object_id) DO UPDATE
        SET run_at = LEAST(COALESCE(${S}.work_items.run_at, EXCLUDED.run_at), EXCLUDED.run_at),
            wake_count = ${S}.work_items.wake_count + 1
      RETURNING 1`,
    wake: `
      UPDATE ${S}.work_items SET run_at = LEAST(COALESCE(run_at, $3), $3), wake_count = wake_count + 1
      WHERE object_kind = $1 AND object_id = ANY($2::text[])`,

    // The next waiting lease that is not already due gets the wake, so two freed slots
    // wake two leases; SKIP LOCKED keeps two concurrent wakers from picking the same one.
    // A lease in the middle of a pass can take the wake too: the bumped wake_count makes
    // it look again when the pass ends. One that already holds a wake ('chained') gets a
    // second only when no other lease can take it: its pass may have looked too early.
    // Ranked by priority (aged by waiting time with priorityAging), then first come first served.
    // A wake passed on ($4-$9) goes only to leases ranked after the one that passed it and
    // asking for something else: one asking for the same (for the same authorizing owner)
    // would be refused the same.
    // See bestWaiter for how the statement reads the waiter.
    wakeNextWaiting: (() => {
      const waiting = (extra: string) =>
        bestWaiter(
          S,
          rank,
          `l.type = ANY($1::text[])
            AND (l.blueprints IS NULL OR l.blueprints && $2::text[])
            -- A lease that drives an allocation or holds a reservation waits for that one.
            AND l.allocating_resource_id IS NULL
            AND ($4::bigint IS NULL OR (${rank}, -l.seq) < ($5::integer, -$4::bigint))
            AND ($6::text IS NULL OR NOT (l.type = $6 AND l.attributes = $7::jsonb AND l.blueprints IS NOT DISTINCT FROM $8::text[] AND l.authorizing_owner IS NOT DISTINCT FROM $9::text))`,
          extra,
        );
      return `
      WITH first AS (${waiting('(w.run_at IS NULL OR w.run_at > $3 OR (w.claimed_by IS NOT NULL AND NOT w.chained))')}),
      second AS (${waiting('w.claimed_by IS NOT NULL AND w.chained AND NOT EXISTS (SELECT 1 FROM first)')}),
      next AS (SELECT * FROM first UNION ALL SELECT * FROM second)
      UPDATE ${S}.work_items w SET run_at = LEAST(COALESCE(w.run_at, $3), $3), chained = true, wake_count = w.wake_count + 1
      FROM next WHERE w.object_kind = next.object_kind AND w.object_id = next.object_id
      RETURNING w.object_id`;
    })(),
    // A hand-off, one statement: the best-ranked waiter of type $1 with no reservation and
    // driving no allocation is woken, whether or not a wake is already due for it (a
    // capacity wake does not give it the resource; skipped, it lost its turn to the lease
    // after it). Its row is locked, waited for if a statement holds it, and re-checked then:
    // a lease another hand-off reserved a resource for meanwhile no longer matches, and the
    // next one in rank is taken. Its work item (every pending lease has one) is then found
    // by its key and locked by the update, in the order the lease's own pass takes them
    // (lease, then work item). The waiter is read from the leases alone, through
    // leases_waiting in rank order without priorityAging, never joined to the work items
    // (why: see bestWaiter).
    // Then the reservation ($4, the resource): the lease (still pending, with no
    // reservation of its own) points at the resource first, under the row lock taken
    // above; the resource is reserved only if that happened. The other order could leave
    // a resource reserved for a lease that moved on meanwhile, which nothing would ever
    // free; this one at worst leaves the lease pointing at a resource it then finds taken
    // and lets go of. The updates of the lease and the resource re-check their conditions
    // on the newest row versions, as separate statements would.
    // With a worker ($5, claimed until $6), the waiter's work item is also claimed by it
    // when no live claim holds it (judged on the newest row version, locked before the
    // update): the worker that freed the resource then runs the waiter's pass itself, with
    // no claim round trip. `claimed` says whether this statement made the claim.
    handOff: (p: Params, a: HandOff) => {
      const steps = handOffSteps(p, a);
      return `
      WITH next AS (${steps.next}), woke AS (${steps.woke}), ptr AS (${steps.ptr}),
      reserved AS (
        UPDATE ${S}.resources SET reserved_for = (SELECT id FROM ptr)
        WHERE id = ${steps.resource} AND status = 'active' AND reserved_for IS NULL AND EXISTS (SELECT 1 FROM ptr)
        RETURNING id)
      SELECT woke.object_id, woke.wake_count, woke.attempts, woke.priority, COALESCE(woke.claimed, false) AS claimed, EXISTS (SELECT 1 FROM reserved) AS reserved
      FROM woke`;
    },

    // All or nothing: ON CONFLICT DO NOTHING waits on a concurrent insert of the same key
    // and then skips it. The keys returned are the conflicts: neither inserted now nor
    // already held by this holder. Any conflict and the caller rolls the transaction back.
    lockSlots: `
      WITH ins AS (
        INSERT INTO ${S}.slot_locks (key, holder_kind, holder_id, created_at)
        SELECT k, $2, $3, $4 FROM unnest($1::text[]) AS k
        ON CONFLICT (key) DO NOTHING
        RETURNING key)
      SELECT k AS key FROM unnest($1::text[]) AS k
      WHERE k NOT IN (SELECT key FROM ins)
        AND NOT EXISTS (SELECT 1 FROM ${S}.slot_locks l WHERE l.key = k AND l.holder_kind = $2 AND l.holder_id = $3)`,
    // The keys of $1, in their order, that no object other than holder ($2, $3) holds. A
    // read, not a lock: the chosen key is taken with lockSlots in the recording transaction.
    freeSlots: `
      SELECT k AS key FROM unnest($1::text[]) WITH ORDINALITY AS t(k, n)
      WHERE NOT EXISTS (SELECT 1 FROM ${S}.slot_locks l WHERE l.key = t.k AND NOT (l.holder_kind = $2 AND l.holder_id = $3))
      ORDER BY t.n`,
    // Takes the first free capacity slot of a blueprint; the unique key makes the
    // maxResources cap exact however many allocators race.
    takeCapacitySlot: `
      INSERT INTO ${S}.slot_locks (key, holder_kind, holder_id, created_at)
      SELECT k, 'resource', $2, $3 FROM unnest($1::text[]) AS k
      WHERE NOT EXISTS (SELECT 1 FROM ${S}.slot_locks l WHERE l.key = k)
      LIMIT 1
      ON CONFLICT (key) DO NOTHING
      RETURNING key`,
    releaseSlots: `DELETE FROM ${S}.slot_locks WHERE holder_kind = $1 AND holder_id = $2`,

    // Serializes allocation decisions per blueprint for the length of one short transaction.
    allocationLock: `SELECT pg_advisory_xact_lock(hashtext($1))`,
    // An upsert: concurrent failures of one blueprint queue on its row, each adds one.
    // The delay is initial × 2^(streak - 1) ms ($4), at most $5 ms.
    blueprintFailed: `
      INSERT INTO ${S}.blueprint_failures AS f (blueprint, streak, last_error, last_failure_at, retry_at)
      VALUES ($1, 1, $2, $3, $3::timestamptz + make_interval(secs => LEAST($5::float8, $4::float8) / 1000))
      ON CONFLICT (blueprint) DO UPDATE SET streak = f.streak + 1, last_error = EXCLUDED.last_error, last_failure_at = EXCLUDED.last_failure_at,
        retry_at = EXCLUDED.last_failure_at + make_interval(secs => LEAST($5::float8, $4::float8 * power(2, LEAST(f.streak, 60))) / 1000)
      RETURNING streak, retry_at`,
    // Whether a lease still wants a resource of blueprint $2 being built: the one it is
    // reserved for ($3), or any lease of type $1 waiting that may use the blueprint.
    demandFor: `
      SELECT 1 FROM ${S}.leases WHERE status = 'pending' AND (id = $3 OR (type = $1 AND (blueprints IS NULL OR $2 = ANY(blueprints)))) LIMIT 1`,
    blueprintRecovered: `DELETE FROM ${S}.blueprint_failures WHERE blueprint = $1`,
    blueprintFailure: `SELECT * FROM ${S}.blueprint_failures WHERE blueprint = $1`,
    // With the blueprint's failure streak (no allocation starts before its retry_at) and
    // whether it drains (none starts then), read under the blueprint's allocation lock.
    allocationCounts: `
      SELECT count(*) FILTER (WHERE status = 'pending')::int AS allocating,
             count(*) FILTER (WHERE status = 'active')::int AS active,
             (SELECT to_jsonb(f) FROM ${S}.blueprint_failures f WHERE f.blueprint = $1) AS failure,
             ${policies.draining('$1')} AS draining
      FROM ${S}.resources WHERE blueprint = $1 AND status IN ('pending', 'active')`,

    insertCommand: `
      INSERT INTO ${S}.commands (target_kind, target_id, command, data, author, created_at)
      VALUES ($1, $2, $3, $4::jsonb, $5, $6) RETURNING id`,
    unconsumedCommands: `
      SELECT * FROM ${S}.commands WHERE target_kind = $1 AND target_id = $2 AND consumed_at IS NULL ORDER BY id`,
    commandOutcome: `SELECT consumed_at, outcome FROM ${S}.commands WHERE id = $1`,
    // A renewal judges the expiry only once it holds the row: a signal's settled read
    // (leaseStatusesSettled) at the expiry is then either before it or after its commit.
    lockLeaseExpiry: `SELECT expires_at FROM ${S}.leases WHERE id = $1 AND status = $2 FOR NO KEY UPDATE`,
    // The single writer's renewal: the status must still be the one it read.
    extendLease: `UPDATE ${S}.leases SET expires_at = $3 WHERE id = $1 AND status = $2 RETURNING *`,
    // consumed_at IS NULL makes consumption exactly-once even if two workers raced.
    consumeCommand: `UPDATE ${S}.commands SET consumed_at = $2, outcome = $3 WHERE id = $1 AND consumed_at IS NULL`,

    insertLog: `
      INSERT INTO ${S}.logs (type, blueprint, resource_id, lease_id, data, at, last_at)
      VALUES ($1, $2, $3, $4, $5::jsonb, $6, $6) RETURNING *`,
    // $4: only a row of that type (a wait row a lease points at may be of another kind of wait).
    bumpLog: `UPDATE ${S}.logs SET count = count + 1, last_at = $2, data = $3::jsonb WHERE id = $1 AND ($4::text IS NULL OR type = $4) RETURNING *`,
  };
}

export type Statements = ReturnType<typeof statements>;
