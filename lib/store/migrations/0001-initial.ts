import { LEASE_STATUSES, RESOURCE_STATUSES } from '../../model/states.js';
import type { Migration } from './migration.js';

const list = (values: readonly string[]) => values.map((v) => `'${v}'`).join(', ');

/** Tables of the first release. Never edit a shipped migration: append a new one. */
export const initial: Migration = {
  id: 1,
  name: 'initial',
  async up(sql, s) {
    await sql.query(`
      CREATE TABLE ${s}.resources (
        id text PRIMARY KEY,
        type text NOT NULL,
        blueprint text NOT NULL,
        status text NOT NULL CHECK (status IN (${list(RESOURCE_STATUSES)})),
        attributes jsonb NOT NULL DEFAULT '{}',
        allocated boolean NOT NULL DEFAULT false,
        phase text,
        phase_attempts integer NOT NULL DEFAULT 0,
        reserved_for text,
        broken_reason text,
        created_at timestamptz NOT NULL,
        status_changed_at timestamptz NOT NULL,
        idle_since timestamptz
      );
      CREATE INDEX resources_live ON ${s}.resources (blueprint, status) WHERE status <> 'destroyed';
      CREATE INDEX resources_destroyed ON ${s}.resources (status_changed_at) WHERE status = 'destroyed';

      CREATE TABLE ${s}.leases (
        id text PRIMARY KEY,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        type text NOT NULL,
        status text NOT NULL CHECK (status IN (${list(LEASE_STATUSES)})),
        attributes jsonb NOT NULL DEFAULT '{}',
        blueprints text[],
        owner text,
        priority integer NOT NULL DEFAULT 0,
        resource_id text,
        allocating_resource_id text,
        parent_resource_id text,
        child_key text,
        expires_at timestamptz,
        deadline_at timestamptz,
        broken_reason text,
        wait_log_id bigint,
        phase text,
        phase_attempts integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL,
        status_changed_at timestamptz NOT NULL
      );
      CREATE INDEX leases_live_by_resource ON ${s}.leases (resource_id) WHERE status <> 'destroyed';
      CREATE INDEX leases_waiting ON ${s}.leases (type, priority DESC, seq) WHERE status = 'pending';
      CREATE INDEX leases_children ON ${s}.leases (parent_resource_id) WHERE parent_resource_id IS NOT NULL;
      CREATE INDEX leases_destroyed ON ${s}.leases (status_changed_at) WHERE status = 'destroyed';

      CREATE TABLE ${s}.commands (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        target_kind text NOT NULL CHECK (target_kind IN ('lease', 'resource')),
        target_id text NOT NULL,
        command text NOT NULL CHECK (command IN ('release', 'reclaim', 'break')),
        data jsonb NOT NULL DEFAULT '{}',
        author text,
        created_at timestamptz NOT NULL,
        consumed_at timestamptz,
        outcome text
      );
      CREATE INDEX commands_unconsumed ON ${s}.commands (target_kind, target_id, id) WHERE consumed_at IS NULL;

      CREATE TABLE ${s}.work_items (
        object_kind text NOT NULL CHECK (object_kind IN ('lease', 'resource')),
        object_id text NOT NULL,
        run_at timestamptz,
        priority integer NOT NULL DEFAULT 0,
        seq bigint NOT NULL DEFAULT 0,
        chained boolean NOT NULL DEFAULT false,
        wake_count integer NOT NULL DEFAULT 0,
        attempts integer NOT NULL DEFAULT 0,
        claimed_by text,
        claim_expires_at timestamptz,
        PRIMARY KEY (object_kind, object_id)
      );
      CREATE INDEX work_items_due ON ${s}.work_items (run_at) WHERE run_at IS NOT NULL;

      CREATE TABLE ${s}.slot_locks (
        key text PRIMARY KEY,
        holder_kind text NOT NULL CHECK (holder_kind IN ('lease', 'resource')),
        holder_id text NOT NULL,
        created_at timestamptz NOT NULL
      );
      CREATE INDEX slot_locks_holder ON ${s}.slot_locks (holder_kind, holder_id);

      CREATE TABLE ${s}.logs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        type text NOT NULL,
        blueprint text,
        resource_id text,
        lease_id text,
        data jsonb NOT NULL DEFAULT '{}',
        count integer NOT NULL DEFAULT 1,
        at timestamptz NOT NULL,
        last_at timestamptz NOT NULL
      );
      CREATE INDEX logs_lease ON ${s}.logs (lease_id, id) WHERE lease_id IS NOT NULL;
      CREATE INDEX logs_resource ON ${s}.logs (resource_id, id) WHERE resource_id IS NOT NULL;
      CREATE INDEX logs_blueprint ON ${s}.logs (blueprint, id) WHERE blueprint IS NOT NULL;
    `);
  },
};
