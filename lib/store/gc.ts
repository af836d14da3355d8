import type { DateTime } from 'luxon';
import { toDb } from '../time.js';
import type { Store } from './store.js';

export interface GcResult {
  leases: number;
  resources: number;
  logs: number;
  commands: number;
}

/** Rows per statement: each batch is one short transaction, so gc never holds locks for long. */
const BATCH = 1_000;

/**
 * Deletes history older than `cutoff`: destroyed leases and resources with their logs,
 * consumed commands, and logs of no object. Live rows and anything a live object
 * points at are never touched. Concurrent gc passes (several brokers) skip each
 * other's rows (SKIP LOCKED) instead of waiting.
 */
export async function collectGarbage(store: Store, cutoff: DateTime, maxBatches = 1_000): Promise<GcResult> {
  const s = store.s;
  const at = toDb(cutoff);
  const total: GcResult = { leases: 0, resources: 0, logs: 0, commands: 0 };
  for (let batch = 0; batch < maxBatches; batch++) {
    const done = await store.db.transaction(async (sql) => {
      const leases = await sql.query<{ id: string }>(
        `DELETE FROM ${s}.leases WHERE id IN (
           SELECT id FROM ${s}.leases WHERE status = 'destroyed' AND status_changed_at < $1
           ORDER BY status_changed_at LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
         RETURNING id`,
        [at],
      );
      // A destroyed resource goes once no live lease names it (destroyed leases are history either way).
      const resources = await sql.query<{ id: string }>(
        `DELETE FROM ${s}.resources WHERE id IN (
           SELECT r.id FROM ${s}.resources r WHERE r.status = 'destroyed' AND r.status_changed_at < $1
             AND NOT EXISTS (SELECT 1 FROM ${s}.leases l WHERE l.resource_id = r.id AND l.status <> 'destroyed')
             AND NOT EXISTS (SELECT 1 FROM ${s}.leases l WHERE l.parent_resource_id = r.id AND l.status <> 'destroyed')
             AND NOT EXISTS (SELECT 1 FROM ${s}.leases l WHERE l.allocating_resource_id = r.id)
           ORDER BY r.status_changed_at LIMIT ${BATCH} FOR UPDATE OF r SKIP LOCKED)
         RETURNING id`,
        [at],
      );
      const leaseIds = leases.map((r) => r.id);
      const resourceIds = resources.map((r) => r.id);
      let logs = 0;
      if (leaseIds.length > 0 || resourceIds.length > 0) {
        logs += await sql.execute(`DELETE FROM ${s}.logs WHERE lease_id = ANY($1::text[]) OR resource_id = ANY($2::text[])`, [leaseIds, resourceIds]);
        // Destroyed objects have no work item; one left behind by a crash goes with them.
        await sql.execute(
          `DELETE FROM ${s}.work_items WHERE (object_kind = 'lease' AND object_id = ANY($1::text[])) OR (object_kind = 'resource' AND object_id = ANY($2::text[]))`,
          [leaseIds, resourceIds],
        );
      }
      logs += await sql.execute(
        `DELETE FROM ${s}.logs WHERE id IN (
           SELECT id FROM ${s}.logs WHERE lease_id IS NULL AND resource_id IS NULL AND last_at < $1 LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
        [at],
      );
      const commands = await sql.execute(
        `DELETE FROM ${s}.commands WHERE id IN (
           SELECT id FROM ${s}.commands WHERE consumed_at IS NOT NULL AND consumed_at < $1 LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)`,
        [at],
      );
      total.leases += leases.length;
      total.resources += resources.length;
      total.logs += logs;
      total.commands += commands;
      return leases.length < BATCH && resources.length < BATCH && commands < BATCH && logs < BATCH;
    });
    if (done) break;
  }
  return total;
}
