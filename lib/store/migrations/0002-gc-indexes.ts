import type { Migration } from './migration.js';

/** Indexes that keep garbage collection a range scan however long the history grows. */
export const gcIndexes: Migration = {
  id: 2,
  name: 'gc-indexes',
  async up(sql, s) {
    await sql.query(`
      CREATE INDEX leases_allocating ON ${s}.leases (allocating_resource_id) WHERE allocating_resource_id IS NOT NULL;
      CREATE INDEX commands_consumed ON ${s}.commands (consumed_at) WHERE consumed_at IS NOT NULL;
      CREATE INDEX logs_unattached ON ${s}.logs (last_at) WHERE lease_id IS NULL AND resource_id IS NULL;
    `);
  },
};
