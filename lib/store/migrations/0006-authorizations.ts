import { AUTHORIZATION_STATES } from '../../model/authorizations.js';
import type { Migration } from './migration.js';

const list = (values: readonly string[]) => values.map((v) => `'${v}'`).join(', ');

/**
 * Authorizations: which owners may use a blueprint that requires authorization.
 * - `authorizations`: one row per blueprint and owner pattern (an exact owner, or a prefix
 *   ending in `/*`), in state requested, authorized or declined, with who set it and when;
 * - `leases.authorizing_owner`: the owner whose authorization the allocator checks for the
 *   lease: its own owner, or for a child lease the one its parent resource was built for;
 * - `resources.authorizing_owner`: the authorizing owner of the lease that drove the
 *   resource's allocation, which its child leases inherit.
 * The live rows of earlier versions are filled in: a lease's own owner, a resource's from
 * the lease it is reserved for, a child lease's from its parent resource.
 *
 * Id 6: 5 is the renewal work's (the `extend` command), developed at the same time.
 */
export const authorizations: Migration = {
  id: 6,
  name: 'authorizations',
  async up(sql, s) {
    await sql.query(`
      CREATE TABLE ${s}.authorizations (
        blueprint text NOT NULL,
        owner_pattern text NOT NULL CHECK (owner_pattern <> '' AND (position('*' IN owner_pattern) = 0
          OR (owner_pattern LIKE '%/*' AND position('*' IN owner_pattern) = length(owner_pattern) AND length(owner_pattern) > 2))),
        state text NOT NULL CHECK (state IN (${list(AUTHORIZATION_STATES)})),
        created_at timestamptz NOT NULL,
        changed_at timestamptz NOT NULL,
        changed_by text,
        PRIMARY KEY (blueprint, owner_pattern)
      );
      ALTER TABLE ${s}.leases ADD COLUMN authorizing_owner text;
      ALTER TABLE ${s}.resources ADD COLUMN authorizing_owner text;
      UPDATE ${s}.leases SET authorizing_owner = owner WHERE parent_resource_id IS NULL AND status <> 'destroyed';
      UPDATE ${s}.resources r SET authorizing_owner = l.authorizing_owner FROM ${s}.leases l WHERE l.id = r.reserved_for AND r.status <> 'destroyed';
      UPDATE ${s}.leases c SET authorizing_owner = r.authorizing_owner FROM ${s}.resources r WHERE r.id = c.parent_resource_id AND c.status <> 'destroyed';
    `);
  },
};
