-- The schema "slipway" as slipway's migrations (lib/store/migrations/) leave it, read from the
-- catalogs by test/helpers/schema-dump.ts. Do not edit: `npm run schema:dump` writes it, and
-- test/schema-dump.test.ts fails when the migrations and this file disagree.

CREATE TABLE slipway.authorizations (
  blueprint text NOT NULL,
  owner_pattern text NOT NULL,
  state text NOT NULL,
  created_at timestamp with time zone NOT NULL,
  changed_at timestamp with time zone NOT NULL,
  changed_by text,
  CONSTRAINT authorizations_owner_pattern_check CHECK (((owner_pattern <> ''::text) AND ((POSITION(('*'::text) IN (owner_pattern)) = 0) OR ((owner_pattern ~~ '%/*'::text) AND (POSITION(('*'::text) IN (owner_pattern)) = length(owner_pattern)) AND (length(owner_pattern) > 2))))),
  CONSTRAINT authorizations_pkey PRIMARY KEY (blueprint, owner_pattern),
  CONSTRAINT authorizations_state_check CHECK ((state = ANY (ARRAY['requested'::text, 'authorized'::text, 'declined'::text])))
);

CREATE UNIQUE INDEX authorizations_pkey ON slipway.authorizations USING btree (blueprint, owner_pattern);

CREATE TABLE slipway.blueprint_failures (
  blueprint text NOT NULL,
  streak integer NOT NULL,
  last_error text NOT NULL,
  last_failure_at timestamp with time zone NOT NULL,
  retry_at timestamp with time zone NOT NULL,
  CONSTRAINT blueprint_failures_pkey PRIMARY KEY (blueprint),
  CONSTRAINT blueprint_failures_streak_check CHECK ((streak > 0))
);

CREATE UNIQUE INDEX blueprint_failures_pkey ON slipway.blueprint_failures USING btree (blueprint);

CREATE TABLE slipway.blueprint_states (
  blueprint text NOT NULL,
  draining boolean NOT NULL,
  changed_at timestamp with time zone NOT NULL,
  changed_by text,
  CONSTRAINT blueprint_states_pkey PRIMARY KEY (blueprint)
);

CREATE UNIQUE INDEX blueprint_states_pkey ON slipway.blueprint_states USING btree (blueprint);

CREATE TABLE slipway.commands (
  id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  target_kind text NOT NULL,
  target_id text NOT NULL,
  command text NOT NULL,
  data jsonb DEFAULT '{}'::jsonb NOT NULL,
  author text,
  created_at timestamp with time zone NOT NULL,
  consumed_at timestamp with time zone,
  outcome text,
  CONSTRAINT commands_command_check CHECK ((command = ANY (ARRAY['release'::text, 'reclaim'::text, 'break'::text, 'extend'::text]))),
  CONSTRAINT commands_pkey PRIMARY KEY (id),
  CONSTRAINT commands_target_kind_check CHECK ((target_kind = ANY (ARRAY['lease'::text, 'resource'::text])))
);

CREATE INDEX commands_consumed ON slipway.commands USING btree (consumed_at) WHERE (consumed_at IS NOT NULL);
CREATE UNIQUE INDEX commands_pkey ON slipway.commands USING btree (id);
CREATE INDEX commands_unconsumed ON slipway.commands USING btree (target_kind, target_id, id) WHERE (consumed_at IS NULL);

CREATE TABLE slipway.leases (
  id text NOT NULL,
  seq bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  type text NOT NULL,
  status text NOT NULL,
  attributes jsonb DEFAULT '{}'::jsonb NOT NULL,
  blueprints text[],
  owner text,
  priority integer DEFAULT 0 NOT NULL,
  resource_id text,
  allocating_resource_id text,
  parent_resource_id text,
  child_key text,
  expires_at timestamp with time zone,
  deadline_at timestamp with time zone,
  broken_reason text,
  wait_log_id bigint,
  phase text,
  phase_attempts integer DEFAULT 0 NOT NULL,
  created_at timestamp with time zone NOT NULL,
  status_changed_at timestamp with time zone NOT NULL,
  allocation_failures integer DEFAULT 0 NOT NULL,
  last_failure text,
  allocate_after timestamp with time zone,
  end_cause text,
  authorizing_owner text,
  CONSTRAINT leases_allocation_failures_check CHECK ((allocation_failures >= 0)),
  CONSTRAINT leases_end_cause_check CHECK ((end_cause = ANY (ARRAY['expired'::text, 'timeout'::text]))),
  CONSTRAINT leases_pkey PRIMARY KEY (id),
  CONSTRAINT leases_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'acquired'::text, 'active'::text, 'released'::text, 'broken'::text, 'destroyed'::text])))
);

CREATE INDEX leases_allocating ON slipway.leases USING btree (allocating_resource_id) WHERE (allocating_resource_id IS NOT NULL);
CREATE INDEX leases_children ON slipway.leases USING btree (parent_resource_id) WHERE (parent_resource_id IS NOT NULL);
CREATE INDEX leases_destroyed ON slipway.leases USING btree (status_changed_at) WHERE (status = 'destroyed'::text);
CREATE INDEX leases_live_by_resource ON slipway.leases USING btree (resource_id) WHERE (status <> 'destroyed'::text);
CREATE UNIQUE INDEX leases_pkey ON slipway.leases USING btree (id);
CREATE INDEX leases_waiting ON slipway.leases USING btree (type, priority DESC, seq) WHERE (status = 'pending'::text);

CREATE TABLE slipway.logs (
  id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
  type text NOT NULL,
  blueprint text,
  resource_id text,
  lease_id text,
  data jsonb DEFAULT '{}'::jsonb NOT NULL,
  count integer DEFAULT 1 NOT NULL,
  at timestamp with time zone NOT NULL,
  last_at timestamp with time zone NOT NULL,
  CONSTRAINT logs_pkey PRIMARY KEY (id)
);

CREATE INDEX logs_blueprint ON slipway.logs USING btree (blueprint, id) WHERE (blueprint IS NOT NULL);
CREATE INDEX logs_lease ON slipway.logs USING btree (lease_id, id) WHERE (lease_id IS NOT NULL);
CREATE UNIQUE INDEX logs_pkey ON slipway.logs USING btree (id);
CREATE INDEX logs_resource ON slipway.logs USING btree (resource_id, id) WHERE (resource_id IS NOT NULL);
CREATE INDEX logs_unattached ON slipway.logs USING btree (last_at) WHERE ((lease_id IS NULL) AND (resource_id IS NULL));

CREATE TABLE slipway.migrations (
  id integer NOT NULL,
  name text NOT NULL,
  applied_at timestamp with time zone DEFAULT now() NOT NULL,
  CONSTRAINT migrations_pkey PRIMARY KEY (id)
);

CREATE UNIQUE INDEX migrations_pkey ON slipway.migrations USING btree (id);

CREATE TABLE slipway.resources (
  id text NOT NULL,
  type text NOT NULL,
  blueprint text NOT NULL,
  status text NOT NULL,
  attributes jsonb DEFAULT '{}'::jsonb NOT NULL,
  allocated boolean DEFAULT false NOT NULL,
  phase text,
  phase_attempts integer DEFAULT 0 NOT NULL,
  reserved_for text,
  broken_reason text,
  created_at timestamp with time zone NOT NULL,
  status_changed_at timestamp with time zone NOT NULL,
  idle_since timestamp with time zone,
  lease_count integer DEFAULT 0 NOT NULL,
  build_failed boolean DEFAULT false NOT NULL,
  authorizing_owner text,
  leases_served integer DEFAULT 0 NOT NULL,
  CONSTRAINT resources_lease_count_check CHECK ((lease_count >= 0)),
  CONSTRAINT resources_pkey PRIMARY KEY (id),
  CONSTRAINT resources_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'active'::text, 'released'::text, 'broken'::text, 'destroyed'::text])))
);

CREATE INDEX resources_destroyed ON slipway.resources USING btree (status_changed_at) WHERE (status = 'destroyed'::text);
CREATE INDEX resources_free ON slipway.resources USING btree (blueprint, lease_count, created_at, id) WHERE (status = 'active'::text);
CREATE INDEX resources_live ON slipway.resources USING btree (blueprint, status) WHERE (status <> 'destroyed'::text);
CREATE UNIQUE INDEX resources_pkey ON slipway.resources USING btree (id);
CREATE INDEX resources_reserved ON slipway.resources USING btree (reserved_for) WHERE (reserved_for IS NOT NULL);

CREATE TABLE slipway.slot_locks (
  key text NOT NULL,
  holder_kind text NOT NULL,
  holder_id text NOT NULL,
  created_at timestamp with time zone NOT NULL,
  CONSTRAINT slot_locks_holder_kind_check CHECK ((holder_kind = ANY (ARRAY['lease'::text, 'resource'::text]))),
  CONSTRAINT slot_locks_pkey PRIMARY KEY (key)
);

CREATE INDEX slot_locks_holder ON slipway.slot_locks USING btree (holder_kind, holder_id);
CREATE UNIQUE INDEX slot_locks_pkey ON slipway.slot_locks USING btree (key);

CREATE TABLE slipway.work_items (
  object_kind text NOT NULL,
  object_id text NOT NULL,
  run_at timestamp with time zone,
  priority integer DEFAULT 0 NOT NULL,
  seq bigint DEFAULT 0 NOT NULL,
  chained boolean DEFAULT false NOT NULL,
  wake_count integer DEFAULT 0 NOT NULL,
  attempts integer DEFAULT 0 NOT NULL,
  claimed_by text,
  claim_expires_at timestamp with time zone,
  CONSTRAINT work_items_object_kind_check CHECK ((object_kind = ANY (ARRAY['lease'::text, 'resource'::text]))),
  CONSTRAINT work_items_pkey PRIMARY KEY (object_kind, object_id)
);

CREATE INDEX work_items_due ON slipway.work_items USING btree (run_at) WHERE (run_at IS NOT NULL);
CREATE UNIQUE INDEX work_items_pkey ON slipway.work_items USING btree (object_kind, object_id);

CREATE OR REPLACE FUNCTION slipway.undo(code text, message text, detail text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
      BEGIN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
      END $function$;
