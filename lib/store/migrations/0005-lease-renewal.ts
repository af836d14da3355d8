import type { Migration } from './migration.js';

/**
 * Lease renewal: `extend` joins the commands a lease's worker consumes. Its data holds the
 * new expiry (`until`, ISO 8601); the worker moves `expires_at` to it, so the expiry stays
 * the single writer's (a holder never writes the lease row itself).
 */
export const leaseRenewal: Migration = {
  id: 5,
  name: 'lease-renewal',
  async up(sql, s) {
    await sql.query(`
      ALTER TABLE ${s}.commands DROP CONSTRAINT commands_command_check;
      ALTER TABLE ${s}.commands ADD CONSTRAINT commands_command_check CHECK (command IN ('release', 'reclaim', 'break', 'extend'));
    `);
  },
};
