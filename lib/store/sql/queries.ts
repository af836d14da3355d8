/**
 * Reads behind the public API's lists, logs and stats, and the engine's own plain reads.
 * Snapshot reads: they take no lock, so none of them can block a worker's write.
 */
export function queries(S: string) {
  // The lists page with LIMIT/OFFSET (LIMIT NULL: every row): a caller that shows one page never reads the table.
  return {
    listLeases: `
      SELECT * FROM ${S}.leases WHERE ($1::text[] IS NULL OR status = ANY($1::text[])) AND ($2::text IS NULL OR type = $2)
        AND ($3::text IS NULL OR owner = $3) AND ($4::text IS NULL OR resource_id = $4) AND ($5::text IS NULL OR parent_resource_id = $5)
      ORDER BY seq LIMIT $6 OFFSET $7`,
    listResources: `
      SELECT * FROM ${S}.resources WHERE ($1::text[] IS NULL OR status = ANY($1::text[])) AND ($2::text IS NULL OR type = $2)
        AND ($3::text IS NULL OR blueprint = $3) ORDER BY created_at, id LIMIT $4 OFFSET $5`,
    listLogs: `
      SELECT * FROM ${S}.logs WHERE ($1::text IS NULL OR lease_id = $1) AND ($2::text IS NULL OR resource_id = $2)
        AND ($3::text IS NULL OR blueprint = $3) AND ($4::text IS NULL OR type = $4) ORDER BY id`,
    resourceCounts: `
      SELECT blueprint, type, status, (phase IN ('destroy', 'destroy:retry')) AS destroying, count(*)::int AS n,
        count(*) FILTER (WHERE status = 'active' AND lease_count = 0)::int AS idle, min(status_changed_at) AS oldest
      FROM ${S}.resources GROUP BY blueprint, type, status, (phase IN ('destroy', 'destroy:retry'))`,
    leaseCounts: `SELECT type, status, count(*)::int AS n, min(status_changed_at) AS oldest FROM ${S}.leases GROUP BY type, status`,
    // The newest child lease of a resource under one key: a repeated acquireLease finds it again.
    childLease: `SELECT * FROM ${S}.leases WHERE parent_resource_id = $1 AND child_key = $2 ORDER BY seq DESC LIMIT 1`,
    liveChildLeases: `SELECT id FROM ${S}.leases WHERE parent_resource_id = $1 AND status IN ('pending', 'acquired', 'active')`,
    anyWorkDue: `SELECT 1 FROM ${S}.work_items WHERE run_at IS NOT NULL AND run_at <= $1 LIMIT 1`,
  };
}
