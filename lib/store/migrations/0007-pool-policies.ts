import type { Migration } from './migration.js';

/**
 * Pool policies:
 * - `resources.leases_served`: how many leases a resource has taken in its life, counted
 *   by the statement that takes it, so that `maxLeasesPerResourceLifetime` (and
 *   `destroyOnRelease`) are checked in that same statement. Live resources of earlier
 *   versions are counted from their leases;
 * - `blueprint_states`: operational state of a blueprint shared by every broker of the
 *   schema, today whether it drains (`broker.drainBlueprint`): a row per blueprint that
 *   was ever drained, with who changed it and when.
 */
export const poolPolicies: Migration = {
  id: 7,
  name: 'pool-policies',
  async up(sql, s) {
    await sql.query(`
      ALTER TABLE ${s}.resources ADD COLUMN leases_served integer NOT NULL DEFAULT 0;
      UPDATE ${s}.resources r SET leases_served = (SELECT count(*) FROM ${s}.leases l WHERE l.resource_id = r.id) WHERE r.status <> 'destroyed';
      CREATE TABLE ${s}.blueprint_states (
        blueprint text PRIMARY KEY,
        draining boolean NOT NULL,
        changed_at timestamptz NOT NULL,
        changed_by text
      );
    `);
  },
};
