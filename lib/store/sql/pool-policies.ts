import { bestWaiter } from './waiters.js';

/**
 * Pool policies: recycling (a resource past its blueprint's `maxResourceAge` or
 * `maxLeasesPerResourceLifetime` takes no new lease), draining (a blueprint whose
 * `blueprint_states` row says so serves no new lease), and warm pools (`minIdle`). Both are checked in the statement
 * that takes a resource, so no lease gets past them however the allocator's reads race.
 */
export function poolPolicyStatements(S: string, rank = 'l.priority') {
  // A lease `l` a quota counts: of its type (null: any), of its owner (null: any), or of an
  // owner that starts with it when it is a prefix (given without its *).
  const quotaMatch = (type: string, owner: string, isPrefix: string) =>
    `(${type}::text IS NULL OR l.type = ${type}) AND (${owner}::text IS NULL OR (CASE WHEN ${isPrefix}::boolean THEN starts_with(l.owner, ${owner}) ELSE l.owner = ${owner} END))`;
  const draining = (blueprint: string) => `EXISTS (SELECT 1 FROM ${S}.blueprint_states b WHERE b.blueprint = ${blueprint} AND b.draining)`;
  // The guard of every statement that takes a resource `r` (and of the allocator's
  // candidate list): served fewer leases than $maxServed, active since after $bornAfter
  // (an active resource's status_changed_at is its activation), blueprint not draining.
  // Under the row lock of the taking UPDATE, the counts are the newest; a drain that
  // commits after the statement's snapshot orders after it.
  const notRetired = (r: string, maxServed: string, bornAfter: string) => `(${maxServed}::integer IS NULL OR ${r}.leases_served < ${maxServed}::integer)
          AND (${bornAfter}::timestamptz IS NULL OR ${r}.status_changed_at > ${bornAfter}::timestamptz)
          AND NOT ${draining(`${r}.blueprint`)}`;
  return {
    draining,
    notRetired,
    // An upsert: the last writer's state counts, and each change is one row's update.
    setDraining: `
      INSERT INTO ${S}.blueprint_states AS s (blueprint, draining, changed_at, changed_by) VALUES ($1, $2, $3, $4)
      ON CONFLICT (blueprint) DO UPDATE SET draining = EXCLUDED.draining, changed_at = EXCLUDED.changed_at, changed_by = EXCLUDED.changed_by
      RETURNING (SELECT o.draining FROM ${S}.blueprint_states o WHERE o.blueprint = $1) AS was_draining`,
    // A drain wakes the workers of the blueprint's idle resources: each releases its own
    // (a reclaim needs none of this: the resource's worker decides, under its claim).
    idleResourcesOf: `SELECT id FROM ${S}.resources WHERE blueprint = $1 AND status = 'active' AND lease_count = 0`,
    blueprintStates: `SELECT * FROM ${S}.blueprint_states`,
    // The leases a quota counts: those that hold a resource (acquired, active, or on their
    // way out). Read under the quota's lock, which every acquisition it counts takes.
    quotaCount: `SELECT count(*)::int AS n FROM ${S}.leases l
      WHERE l.status IN ('acquired', 'active', 'released', 'broken') AND ${quotaMatch('$1', '$2', '$3')}`,
    // A lease the quota counted is gone: its best-ranked waiter looks now (SKIP LOCKED: two
    // freed places wake two waiters; see bestWaiter).
    wakeQuotaWaiter: `
      WITH next AS (${bestWaiter(S, rank, quotaMatch('$1', '$2', '$4'), '(w.run_at IS NULL OR w.run_at > $3)')})
      UPDATE ${S}.work_items w SET run_at = LEAST(COALESCE(w.run_at, $3), $3), wake_count = w.wake_count + 1
      FROM next WHERE w.object_kind = next.object_kind AND w.object_id = next.object_id
      RETURNING w.object_id`,
    // A warm pool's spare resources: unreserved (promised to no lease) and not retired.
    // Read under the blueprint's allocation lock, which every decision on them (build, expire) takes.
    spareResources: `
      SELECT count(*) FILTER (WHERE r.status = 'active' AND r.lease_count = 0 AND ${notRetired('r', '$2', '$3')})::int AS idle,
             count(*) FILTER (WHERE r.status = 'pending')::int AS warming
      FROM ${S}.resources r WHERE r.blueprint = $1 AND r.status IN ('pending', 'active') AND r.reserved_for IS NULL`,
    // The types a blueprint served, for a broker that does not have it registered (the CLI).
    typesOfBlueprint: `SELECT DISTINCT type FROM ${S}.resources WHERE blueprint = $1`,
  };
}
