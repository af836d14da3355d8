import type { Migration } from './migration.js';

/**
 * What keeps a lease cycle's cost flat however large the pool grows:
 * - `resources.lease_count`, the leases on a resource that are not destroyed yet, kept by
 *   the transactions that add or remove one (under the resource's row lock), so that the
 *   allocator finds a free resource with one index range scan instead of counting the
 *   leases of every active resource;
 * - an index of active resources in the allocator's order (least leased, then oldest);
 * - an index on `reserved_for`, so that freeing a lease's reservation is an index lookup;
 * - `undo`, which lets one statement take a resource and its slot locks for a lease all
 *   or nothing.
 */
export const hotPath: Migration = {
  id: 3,
  name: 'hot-path',
  async up(sql, s) {
    await sql.query(`
      ALTER TABLE ${s}.resources ADD COLUMN lease_count integer NOT NULL DEFAULT 0 CHECK (lease_count >= 0);
      UPDATE ${s}.resources r SET lease_count = n.count
        FROM (SELECT resource_id, count(*)::int AS count FROM ${s}.leases WHERE status <> 'destroyed' AND resource_id IS NOT NULL GROUP BY resource_id) n
        WHERE n.resource_id = r.id;
      CREATE INDEX resources_free ON ${s}.resources (blueprint, lease_count, created_at, id) WHERE status = 'active';
      CREATE INDEX resources_reserved ON ${s}.resources (reserved_for) WHERE reserved_for IS NOT NULL;

      -- Undoes the whole statement that calls it, so that one statement can be all or
      -- nothing like a transaction: SW001 when slot locks are held by others (the keys as
      -- JSON in DETAIL), SW002 when a write it depends on found nothing to change.
      CREATE FUNCTION ${s}.undo(code text, message text, detail text) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
      END $$;
    `);
  },
};
