import type { RawSql } from './tiers.js';

/**
 * The shortcut of the scale workload: rows inserted with SQL instead of built through
 * the broker (10,000 resources through the allocator would take minutes). Every seeded
 * row is a copy of a real row the broker wrote in the same schema moments before (an
 * idle active resource, a destroyed lease with its logs and its consumed release
 * command, a destroyed resource with its logs), with a new id and shifted times, so
 * the seeded rows match the real schema and the real shape of the data.
 */

const pad = (expr: string) => `lpad((${expr})::text, 19, '0')`;

/** Ids `res_s…` from..to: idle active resources, with their parked work item and their own logs. */
export async function cloneIdleResources(sql: RawSql, s: string, templateId: string, from: number, to: number): Promise<void> {
  if (to < from) return;
  const id = `'res_s' || ${pad('g')}`;
  await sql.query(
    `INSERT INTO ${s}.resources (id, type, blueprint, status, attributes, allocated, phase, phase_attempts, reserved_for, broken_reason, created_at, status_changed_at, idle_since)
     SELECT ${id}, t.type, t.blueprint, t.status, t.attributes, t.allocated, t.phase, t.phase_attempts, NULL, t.broken_reason,
            t.created_at - g * interval '1 millisecond', t.status_changed_at - g * interval '1 millisecond', t.idle_since - g * interval '1 millisecond'
     FROM ${s}.resources t CROSS JOIN generate_series($2::int, $3::int) g WHERE t.id = $1 AND t.status = 'active'`,
    [templateId, from, to],
  );
  // An idle resource's work item is parked: no run_at, no claim (what `finish` leaves after a PARK).
  await sql.query(
    `INSERT INTO ${s}.work_items (object_kind, object_id, run_at, priority, seq)
     SELECT 'resource', ${id}, NULL, 0, 0 FROM generate_series($1::int, $2::int) g`,
    [from, to],
  );
  await sql.query(
    `INSERT INTO ${s}.logs (type, blueprint, resource_id, lease_id, data, count, at, last_at)
     SELECT l.type, l.blueprint, ${id}, NULL, l.data, l.count, l.at, l.last_at
     FROM ${s}.logs l CROSS JOIN generate_series($2::int, $3::int) g WHERE l.resource_id = $1 AND l.lease_id IS NULL`,
    [templateId, from, to],
  );
}

/**
 * History: `leases` destroyed leases (ids `lease_h…`) spread over `resources` destroyed
 * resources (ids `res_h…`), each with copies of its template's logs and commands.
 */
export async function cloneHistory(sql: RawSql, s: string, t: { lease: string; resource: string; leases: number; resources: number }): Promise<void> {
  const leaseId = `'lease_h' || ${pad('g')}`;
  // Consecutive leases ran on the same resource: ids grow with g, so the inserts append to every index.
  const resourceOf = `'res_h' || ${pad('(g - 1)::bigint * $3::int / $2::int')}`;
  await sql.query(
    `INSERT INTO ${s}.resources (id, type, blueprint, status, attributes, allocated, phase, phase_attempts, reserved_for, broken_reason, created_at, status_changed_at, idle_since)
     SELECT 'res_h' || ${pad('g')}, t.type, t.blueprint, t.status, t.attributes, t.allocated, t.phase, t.phase_attempts, NULL, t.broken_reason,
            t.created_at - (g * 10 + 10) * interval '1 second', t.status_changed_at - g * interval '1 second', t.idle_since - g * interval '1 second'
     FROM ${s}.resources t CROSS JOIN generate_series(0, $2::int - 1) g WHERE t.id = $1 AND t.status = 'destroyed'`,
    [t.resource, t.resources],
  );
  await sql.query(
    `INSERT INTO ${s}.logs (type, blueprint, resource_id, lease_id, data, count, at, last_at)
     SELECT l.type, l.blueprint, 'res_h' || ${pad('g')}, NULL, l.data, l.count, l.at - g * interval '1 second', l.last_at - g * interval '1 second'
     FROM ${s}.logs l CROSS JOIN generate_series(0, $2::int - 1) g WHERE l.resource_id = $1`,
    [t.resource, t.resources],
  );
  await sql.query(
    `INSERT INTO ${s}.commands (target_kind, target_id, command, data, author, created_at, consumed_at, outcome)
     SELECT c.target_kind, 'res_h' || ${pad('g')}, c.command, c.data, c.author, c.created_at - g * interval '1 second', c.consumed_at - g * interval '1 second', c.outcome
     FROM ${s}.commands c CROSS JOIN generate_series(0, $2::int - 1) g WHERE c.target_kind = 'resource' AND c.target_id = $1`,
    [t.resource, t.resources],
  );
  await sql.query(
    `INSERT INTO ${s}.leases (id, type, status, attributes, blueprints, owner, priority, resource_id, allocating_resource_id, parent_resource_id, child_key,
                              expires_at, deadline_at, broken_reason, wait_log_id, phase, phase_attempts, created_at, status_changed_at)
     SELECT ${leaseId}, t.type, t.status, t.attributes, t.blueprints, t.owner, t.priority, ${resourceOf}, NULL, NULL, NULL,
            t.expires_at, t.deadline_at, t.broken_reason, NULL, t.phase, t.phase_attempts, t.created_at - g * interval '1 second', t.status_changed_at - g * interval '1 second'
     FROM ${s}.leases t CROSS JOIN generate_series(1, $2::int) g WHERE t.id = $1 AND t.status = 'destroyed'`,
    [t.lease, t.leases, t.resources],
  );
  await sql.query(
    `INSERT INTO ${s}.logs (type, blueprint, resource_id, lease_id, data, count, at, last_at)
     SELECT l.type, l.blueprint, CASE WHEN l.resource_id IS NULL THEN NULL ELSE ${resourceOf} END, ${leaseId}, l.data, l.count,
            l.at - g * interval '1 second', l.last_at - g * interval '1 second'
     FROM ${s}.logs l CROSS JOIN generate_series(1, $2::int) g WHERE l.lease_id = $1 ORDER BY g, l.id`,
    [t.lease, t.leases, t.resources],
  );
  await sql.query(
    `INSERT INTO ${s}.commands (target_kind, target_id, command, data, author, created_at, consumed_at, outcome)
     SELECT c.target_kind, ${leaseId}, c.command, c.data, c.author, c.created_at - g * interval '1 second', c.consumed_at - g * interval '1 second', c.outcome
     FROM ${s}.commands c CROSS JOIN generate_series(1, $2::int) g WHERE c.target_kind = 'lease' AND c.target_id = $1`,
    [t.lease, t.leases],
  );
}

/** Fresh planner statistics, as autovacuum would gather on a server after a bulk change (PGlite runs no autovacuum). */
export async function analyze(sql: RawSql, s: string): Promise<void> {
  for (const table of ['resources', 'leases', 'logs', 'commands', 'work_items', 'slot_locks']) await sql.query(`ANALYZE ${s}.${table}`);
}

export async function rowCounts(sql: RawSql, s: string): Promise<Record<string, number>> {
  const rows = await sql.query<{ t: string; n: number }>(
    `SELECT 'resources' AS t, count(*)::int AS n FROM ${s}.resources UNION ALL SELECT 'resources_active', count(*)::int FROM ${s}.resources WHERE status = 'active'
     UNION ALL SELECT 'leases', count(*)::int FROM ${s}.leases UNION ALL SELECT 'logs', count(*)::int FROM ${s}.logs
     UNION ALL SELECT 'commands', count(*)::int FROM ${s}.commands UNION ALL SELECT 'work_items', count(*)::int FROM ${s}.work_items`,
  );
  return Object.fromEntries(rows.map((r) => [r.t, Number(r.n)]));
}
