/**
 * The writes of the allocator's and the workers' transactions that are more than a CAS.
 * Each runs inside a unit of work whose other statements decide with it; the comment
 * above each says why it is safe under concurrency.
 */
export function allocationWrites(S: string) {
  return {
    // Under the lease's row lock: a hand-off that reserved a resource for it meanwhile is
    // seen here (the pointer is set) and wins over a new allocation.
    lockLeasePointer: `SELECT allocating_resource_id FROM ${S}.leases WHERE id = $1 AND status = 'pending' FOR UPDATE`,
    // A new resource, reserved for the lease that drives it; inserted in the transaction
    // that holds the blueprint's allocation lock and, with maxResources, a capacity slot.
    // It keeps that lease's authorizing owner ($6), which its child leases inherit.
    insertPendingResource: `
      INSERT INTO ${S}.resources (id, type, blueprint, status, attributes, reserved_for, authorizing_owner, created_at, status_changed_at)
      VALUES ($1, $2, $3, 'pending', '{}'::jsonb, $4, $6, $5, $5)`,
    // SKIP LOCKED: two leases reclaiming at once never pick the same resource.
    lockReclaimable: (reclaimable: string) => `${reclaimable} FOR UPDATE OF r SKIP LOCKED`,
    // A requeued lease no longer counts on its resource (the resource's worker decides under its own claim).
    uncountLease: `UPDATE ${S}.resources SET lease_count = lease_count - 1 WHERE id = $1`,
    // Only while still idle and unmarked: a lease acquired since the read clears idle_since under the row lock.
    markIdle: `UPDATE ${S}.resources SET idle_since = $2 WHERE id = $1 AND status = 'active' AND lease_count = 0 AND idle_since IS NULL`,
    // A reclaim reads the lease count under the row lock: an acquisition holds it until it commits.
    lockResource: `SELECT status, reserved_for, lease_count FROM ${S}.resources WHERE id = $1 FOR UPDATE`,
  };
}
