/**
 * The statements of authorizations (which owners may use a blueprint that requires it).
 * A row's `owner_pattern` is an exact owner or a prefix ending in `/*`. The decision that
 * counts for an owner is the most specific decided row (authorized or declined) that
 * covers it: its exact row, else the longest prefix; a `requested` row decides nothing.
 * Decisions of one blueprint are serialized on an advisory lock: a change takes it
 * exclusively, and the allocator's checks take it shared in the transaction that acts on
 * them, so no lease is acquired or allocated on a decision a committed change undid.
 */

/** The row of `pattern` (a column) covers `owner` (an expression): that owner, or a prefix it starts with. */
const covers = (pattern: string, owner: string) => `(${pattern} = ${owner} OR (${pattern} LIKE '%/*' AND starts_with(${owner}, left(${pattern}, -1))))`;

/** Most specific first: a decision before a request, then the exact owner, then the longest prefix. */
const deciding = (owner: string) => `(a.state <> 'requested') DESC, (a.owner_pattern = ${owner}) DESC, length(a.owner_pattern) DESC`;

export function authorizationStatements(S: string) {
  return {
    // The deciding row per blueprint of $1 for owner $2. A snapshot read; the allocator's
    // writes check again under the lock (`authorizationLockShared`).
    authorizationStates: `
      SELECT DISTINCT ON (a.blueprint) a.* FROM ${S}.authorizations a
      WHERE a.blueprint = ANY($1::text[]) AND ${covers('a.owner_pattern', '$2::text')}
      ORDER BY a.blueprint, ${deciding('$2::text')}`,
    // Held until the transaction ends: changes of the blueprint's authorizations wait for it.
    authorizationLockShared: `SELECT pg_advisory_xact_lock_shared(hashtext($1))`,
    // A change of one of the blueprint's authorizations waits for the allocator's checks in flight, and they for it.
    authorizationLock: `SELECT pg_advisory_xact_lock(hashtext($1))`,
    authorizationRow: `SELECT * FROM ${S}.authorizations WHERE blueprint = $1 AND owner_pattern = $2`,
    // A request records nothing over an existing row of the pattern (the primary key decides, also under a race).
    requestAuthorization: `
      INSERT INTO ${S}.authorizations (blueprint, owner_pattern, state, created_at, changed_at, changed_by)
      VALUES ($1, $2, 'requested', $3, $3, $4)
      ON CONFLICT (blueprint, owner_pattern) DO NOTHING
      RETURNING *`,
    // Sets the state of the pattern's row, creating it; a row already in that state is left as it is (nothing returned).
    setAuthorization: `
      INSERT INTO ${S}.authorizations AS a (blueprint, owner_pattern, state, created_at, changed_at, changed_by)
      VALUES ($1, $2, $3, $4, $4, $5)
      ON CONFLICT (blueprint, owner_pattern) DO UPDATE SET state = EXCLUDED.state, changed_at = EXCLUDED.changed_at, changed_by = EXCLUDED.changed_by
        WHERE a.state <> EXCLUDED.state
      RETURNING *`,
    // Wakes the pending leases a change of ($1 blueprint, $2 pattern) concerns: of type $3
    // (null: any, when this broker does not know the blueprint), that may use the blueprint
    // and whose authorizing owner the pattern covers. In the transaction of the change.
    wakeForAuthorization: `
      UPDATE ${S}.work_items w SET run_at = LEAST(COALESCE(w.run_at, $4), $4), wake_count = w.wake_count + 1
      FROM ${S}.leases l
      WHERE w.object_kind = 'lease' AND w.object_id = l.id AND l.status = 'pending'
        AND ($3::text IS NULL OR l.type = $3) AND (l.blueprints IS NULL OR $1 = ANY(l.blueprints))
        AND l.authorizing_owner IS NOT NULL AND ${covers('$2::text', 'l.authorizing_owner')}
      RETURNING w.object_id`,
    // `authorizations.list`, by blueprint and pattern; given an owner ($2), the rows that cover it, the deciding one first.
    listAuthorizations: `
      SELECT a.* FROM ${S}.authorizations a
      WHERE ($1::text IS NULL OR a.blueprint = $1) AND ($2::text IS NULL OR ${covers('a.owner_pattern', '$2::text')})
        AND ($3::text IS NULL OR a.state = $3)
      ORDER BY a.blueprint,
        CASE WHEN $2::text IS NOT NULL THEN a.state <> 'requested' END DESC,
        CASE WHEN $2::text IS NOT NULL THEN a.owner_pattern = $2 END DESC,
        CASE WHEN $2::text IS NOT NULL THEN length(a.owner_pattern) END DESC,
        a.owner_pattern`,
    // Pending leases whose wait is for an authorization (their one wait row says so), by type.
    waitingForAuthorization: `
      SELECT l.type, count(*)::int AS n FROM ${S}.leases l JOIN ${S}.logs g ON g.id = l.wait_log_id
      WHERE l.status = 'pending' AND g.type = 'lease.waiting-for-authorization'
      GROUP BY l.type`,
    requestedAuthorizations: `SELECT blueprint, count(*)::int AS n FROM ${S}.authorizations WHERE state = 'requested' GROUP BY blueprint`,
  };
}
