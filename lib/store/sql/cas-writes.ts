import type { Params } from '../params.js';
import { poolPolicyStatements } from './pool-policies.js';

/**
 * The claim of a lease's work item by a broker that runs its pass now (`Store.claimLease`,
 * and the holder's release run inline), as two CTEs of one statement: the item's wake
 * count in the statement's snapshot (`leaseItemSeen`), and the claim itself at the item's
 * newest version (`leaseItemClaim`), only if no one holds it (unclaimed or its claim
 * expired; a row another transaction locks is skipped, not waited for). The item is made
 * due as it is claimed: if the claimer dies before its pass ends, the next worker takes it
 * once the claim expires, not at the lease's expiry. A wake committed between the snapshot
 * and the claim shows as the two wake counts differing: the statement's reads may have
 * missed its command, so the caller then acts as if the claim had failed. The arguments
 * are SQL: parameter references or expressions.
 */
export const leaseItemSeen = (S: string, leaseId: string) => `SELECT wake_count FROM ${S}.work_items WHERE object_kind = 'lease' AND object_id = ${leaseId}`;

export const leaseItemClaim = (S: string, leaseId: string, workerId: string, now: string, until: string) => `UPDATE ${S}.work_items w
        SET claimed_by = ${workerId}, claim_expires_at = ${until}::timestamptz, run_at = ${now}::timestamptz
        WHERE w.object_kind = 'lease' AND w.object_id = (
          SELECT object_id FROM ${S}.work_items
          WHERE object_kind = 'lease' AND object_id = ${leaseId} AND (claimed_by IS NULL OR claim_expires_at < ${now}::timestamptz)
          FOR UPDATE SKIP LOCKED)
        RETURNING w.wake_count`;

/**
 * Fragments of one-statement compare-and-set writes (`Store.cas`): guards and the further
 * writes of the same statement, which see the updated row as `upd`. Being one statement,
 * each is all or nothing with its status change.
 */
export function casWrites(S: string) {
  const { draining, notRetired } = poolPolicyStatements(S);
  return {
    // The late result of activateLease never activates a lease that expired, whose resource
    // is no longer active, or that a release or break waits for. FOR SHARE holds the
    // resource's status until this commits: a break after it sees the lease active.
    activationGuard: (p: Params, leaseId: string, resourceId: string, now: unknown) => `(expires_at IS NULL OR expires_at > ${p.add(now)}::timestamptz)
        AND EXISTS (SELECT 1 FROM ${S}.resources r WHERE r.id = ${p.add(resourceId)} AND r.status = 'active' FOR SHARE)
        AND NOT EXISTS (SELECT 1 FROM ${S}.commands c WHERE c.target_kind = 'lease' AND c.target_id = ${p.add(leaseId)}
                        AND c.consumed_at IS NULL AND c.command IN ('release', 'break'))`,
    // Idle expiry and reclaim: a lease acquired since the read keeps the resource.
    idleGuard: () => 'lease_count = 0 AND reserved_for IS NULL',
    // The acquisition's `taken` and `conflicts` (Store.takeResource) decide it.
    acquisitionGuard: () => 'EXISTS (SELECT 1 FROM taken) AND NOT EXISTS (SELECT 1 FROM conflicts)',
    // A reservation the acquired lease held on another resource goes back to the pool. A
    // hand-off that committed while the statement waited for the lease's row lock is not
    // in its snapshot; its pointer is, in the re-read lease row (`upd.allocating_resource_id`).
    // Matching that resource by id makes Postgres re-read it too, and the CASE clears the
    // reservation in its newest version.
    acquisitionFreed: (p: Params, resourceId: string) => `UPDATE ${S}.resources
        SET reserved_for = CASE WHEN reserved_for = (SELECT id FROM upd) THEN NULL ELSE reserved_for END
        WHERE (id = (SELECT allocating_resource_id FROM upd) OR reserved_for = (SELECT id FROM upd)) AND id <> ${p.add(resourceId)}
        RETURNING type, blueprint, reserved_for IS NULL AS free`,
    // A destroyed lease's slot locks go with it.
    destroyedLeaseSlots: () => `DELETE FROM ${S}.slot_locks WHERE holder_kind = 'lease' AND holder_id = (SELECT id FROM upd)`,
    // ... and a reservation it held on a resource other than its own goes to the next waiter.
    destroyedLeaseFreed: () => `UPDATE ${S}.resources SET reserved_for = NULL
        WHERE reserved_for = (SELECT id FROM upd) AND id IS DISTINCT FROM (SELECT resource_id FROM upd) RETURNING type, blueprint`,
    // ... and its resource counts one lease fewer, idle from now if it was the last (under its
    // row lock); with what its recycling depends on, for the worker to decide whether it goes.
    // With a hand-off in the same statement (`ptr`, see handOffSteps), the resource is also
    // reserved for its waiter here, judged on the newest row version as the hand-off's own
    // statement does. `withRow`: the whole row too (`resource_row`), for `handedWaiter`.
    destroyedLeaseCounted: (p: Params, now: unknown, handOff = false, withRow = false) => `UPDATE ${S}.resources r SET lease_count = r.lease_count - 1,
          idle_since = CASE WHEN r.lease_count = 1 THEN ${p.add(now)}::timestamptz ELSE r.idle_since END${
            handOff ? `,
          reserved_for = CASE WHEN r.status = 'active' AND r.reserved_for IS NULL THEN (SELECT id FROM ptr) ELSE r.reserved_for END` : ''
          }
        FROM upd WHERE r.id = upd.resource_id
        RETURNING r.id, r.status, r.lease_count, r.type, r.blueprint, r.leases_served, r.status_changed_at, r.reserved_for,${withRow ? ' to_jsonb(r) AS resource_row,' : ''}
          ${draining('r.blueprint')} AS blueprint_draining`,
    // ... and whether a lease may wait for that resource: pending, of its type, free to use its
    // blueprint, holding no reservation. A read of the statement's snapshot that spares the
    // hand-off (a statement that locks the best waiter) when there is none. A waiter that
    // commits after it is no worse off than one that commits after the hand-off's statement:
    // its own pass sees the resource free once this commits, or its recheck comes.
    destroyedLeaseWaiter: () => `SELECT 1 AS found FROM ${S}.resources r JOIN ${S}.leases l ON l.type = r.type
        WHERE r.id = (SELECT resource_id FROM upd) AND l.status = 'pending' AND l.allocating_resource_id IS NULL
          AND (l.blueprints IS NULL OR r.blueprint = ANY(l.blueprints))
        LIMIT 1`,
    // ... and, with the hand-off in the statement, a waiter only if the lease was destroyed
    // and its resource may take one (active, not retired: see Store.destroyLease). The
    // resource's row is locked here, before the waiter's: in the order of the destroy and
    // hand-off as two statements, and of an acquisition (resource, then lease), so the two
    // cannot deadlock. Its status is judged on its newest version.
    destroyedLeaseHandable: (p: Params, resourceId: string, maxServed: number | null, bornAfter: unknown) => `EXISTS (SELECT 1 FROM upd)
          AND EXISTS (SELECT 1 FROM ${S}.resources r WHERE r.id = ${p.add(resourceId)} AND r.status = 'active' AND ${notRetired('r', p.add(maxServed), p.add(bornAfter))} FOR NO KEY UPDATE)`,
    // ... and the resource, left idle, is woken where it has more to do (as Store.wake): one
    // on its way out waits for its last lease, a draining or recycled one goes, and one with
    // an idle expiry or a recycling age ($wakeIdle) schedules it.
    destroyedLeaseIdleWake: (p: Params, wakeIdle: boolean, now: unknown) => {
      const at = p.add(now);
      return `UPDATE ${S}.work_items w SET run_at = LEAST(COALESCE(w.run_at, ${at}::timestamptz), ${at}::timestamptz), wake_count = w.wake_count + 1
        FROM counted c WHERE w.object_kind = 'resource' AND w.object_id = c.id AND c.lease_count = 0
          AND (c.status <> 'active' OR ${p.add(wakeIdle)}::boolean OR c.blueprint_draining)
        RETURNING w.object_id`;
    },
    // ... and its work item, if the pass that destroys it still holds the claim and no wake
    // came during it (as Store.deleteWork; a wake would only find it destroyed).
    destroyedLeaseWork: (p: Params, workerId: string, wakeCount: number) => `DELETE FROM ${S}.work_items
        WHERE object_kind = 'lease' AND object_id = (SELECT id FROM upd) AND claimed_by = ${p.add(workerId)} AND wake_count = ${p.add(wakeCount)} RETURNING object_id`,
    // The pass that activated the lease ends with it: its work item is released, due at the
    // lease's expiry (none: parked), or at once if a wake came during the pass (as `finish`).
    // Only while this pass still holds the claim, and only if no command waits for the lease
    // in this statement's snapshot: then the pass goes on to consume it, still the single
    // writer. A command committed after the snapshot wakes the item after this commits.
    activatedLeaseWork: (p: Params, workerId: string, wakeCount: number, now: unknown) => `UPDATE ${S}.work_items w
        SET claimed_by = NULL, claim_expires_at = NULL, attempts = 0,
          run_at = CASE WHEN w.wake_count <> ${p.add(wakeCount)} THEN ${p.add(now)}::timestamptz ELSE (SELECT expires_at FROM upd) END,
          chained = CASE WHEN w.wake_count <> ${p.add(wakeCount)} THEN w.chained ELSE false END
        WHERE w.object_kind = 'lease' AND w.object_id = (SELECT id FROM upd) AND w.claimed_by = ${p.add(workerId)}
          AND NOT EXISTS (SELECT 1 FROM ${S}.commands c WHERE c.target_kind = 'lease' AND c.target_id = (SELECT id FROM upd) AND c.consumed_at IS NULL)
        RETURNING w.run_at, w.run_at IS NOT NULL AND w.run_at <= ${p.add(now)}::timestamptz AS due`,
    // The holder's release run inline, as one statement: the lease's work item claimed for
    // the releasing broker (`seen` and `claim`: leaseItemSeen, leaseItemClaim); the release's guard then asks that
    // no wake landed in between (a command committed after the snapshot, which the guard's
    // read of the commands would miss), that no command waits, and that the lease's
    // resource is of the blueprint whose hooks the releasing broker runs.
    inlineReleaseSeen: (p: Params, leaseId: string) => leaseItemSeen(S, p.add(leaseId)),
    inlineReleaseClaim: (p: Params, leaseId: string, workerId: string, now: unknown, until: unknown) => leaseItemClaim(S, p.add(leaseId), p.add(workerId), p.add(now), p.add(until)),
    inlineReleaseGuard: (p: Params, leaseId: string, blueprint: string) => `EXISTS (SELECT 1 FROM claim WHERE claim.wake_count = (SELECT wake_count FROM seen))
        AND NOT EXISTS (SELECT 1 FROM ${S}.commands c WHERE c.target_kind = 'lease' AND c.target_id = ${p.add(leaseId)} AND c.consumed_at IS NULL)
        AND EXISTS (SELECT 1 FROM ${S}.resources r WHERE r.id = leases.resource_id AND r.blueprint = ${p.add(blueprint)})`,
    // ... the resource, as the pass that runs the destroy phase is handed it ...
    inlineReleaseResource: () => `SELECT r.* FROM ${S}.resources r WHERE r.id = (SELECT resource_id FROM upd)`,
    // ... and a claim taken for a lease the guard refused is undone with the whole statement.
    inlineReleaseFails: () => `(SELECT ${S}.undo('SW002', 'the lease moved on as its release claimed it', '') WHERE EXISTS (SELECT 1 FROM claim) AND NOT EXISTS (SELECT 1 FROM upd))`,
    // A command consumed in the statement of the CAS it causes: exactly once (consumed_at IS NULL), and only if the CAS applied.
    // The holder's own release, run inline: written already consumed, only if the CAS applies.
    consumedRelease: (p: Params, data: string, author: string | null, now: unknown) =>
      `INSERT INTO ${S}.commands (target_kind, target_id, command, data, author, created_at, consumed_at, outcome)
       SELECT 'lease', upd.id, 'release', ${p.add(data)}::jsonb, ${p.add(author)}, ${p.add(now)}::timestamptz, ${p.add(now)}::timestamptz, 'applied' FROM upd`,
    consumedWith: (p: Params, commandId: number, now: unknown) =>
      `UPDATE ${S}.commands SET consumed_at = ${p.add(now)}::timestamptz, outcome = 'applied' WHERE id = ${p.add(commandId)} AND consumed_at IS NULL AND EXISTS (SELECT 1 FROM upd)`,
  };
}
