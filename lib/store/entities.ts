import { EntitySchema, type EntitySchemaColumnOptions } from 'typeorm';

/**
 * slipway's tables as TypeORM entities, for a host app's own repositories (reads: every
 * write of slipway goes through its CAS statements, and a write from elsewhere bypasses
 * the single-writer rule). test/typeorm-entities.test.ts fails when a migration adds a
 * column that is not here.
 */

export interface LeaseRow {
  id: string;
  seq: string;
  type: string;
  status: string;
  attributes: Record<string, unknown>;
  blueprints: string[] | null;
  owner: string | null;
  priority: number;
  resourceId: string | null;
  allocatingResourceId: string | null;
  parentResourceId: string | null;
  childKey: string | null;
  expiresAt: Date | null;
  deadlineAt: Date | null;
  brokenReason: string | null;
  waitLogId: string | null;
  phase: string | null;
  phaseAttempts: number;
  createdAt: Date;
  statusChangedAt: Date;
  allocationFailures: number;
  lastFailure: string | null;
  allocateAfter: Date | null;
  endCause: string | null;
  authorizingOwner: string | null;
}

export interface ResourceRow {
  id: string;
  type: string;
  blueprint: string;
  status: string;
  attributes: Record<string, unknown>;
  allocated: boolean;
  phase: string | null;
  phaseAttempts: number;
  reservedFor: string | null;
  brokenReason: string | null;
  createdAt: Date;
  statusChangedAt: Date;
  idleSince: Date | null;
  leaseCount: number;
  buildFailed: boolean;
  authorizingOwner: string | null;
  leasesServed: number;
}

export interface LogRow {
  id: string;
  type: string;
  blueprint: string | null;
  resourceId: string | null;
  leaseId: string | null;
  data: Record<string, unknown>;
  count: number;
  at: Date;
  lastAt: Date;
}

export interface CommandRow {
  id: string;
  targetKind: string;
  targetId: string;
  command: string;
  data: Record<string, unknown>;
  author: string | null;
  createdAt: Date;
  consumedAt: Date | null;
  outcome: string | null;
}

export interface WorkItemRow {
  objectKind: string;
  objectId: string;
  runAt: Date | null;
  priority: number;
  seq: string;
  chained: boolean;
  wakeCount: number;
  attempts: number;
  claimedBy: string | null;
  claimExpiresAt: Date | null;
}

export interface SlotLockRow {
  key: string;
  holderKind: string;
  holderId: string;
  createdAt: Date;
}

export interface BlueprintFailureRow {
  blueprint: string;
  streak: number;
  lastError: string;
  lastFailureAt: Date;
  retryAt: Date;
}

export interface BlueprintStateRow {
  blueprint: string;
  draining: boolean;
  changedAt: Date;
  changedBy: string | null;
}

export interface AuthorizationRow {
  blueprint: string;
  ownerPattern: string;
  state: string;
  createdAt: Date;
  changedAt: Date;
  changedBy: string | null;
}

export interface MigrationRow {
  id: number;
  name: string;
  appliedAt: Date;
}

export interface SlipwayEntities {
  Lease: EntitySchema<LeaseRow>;
  Resource: EntitySchema<ResourceRow>;
  Log: EntitySchema<LogRow>;
  Command: EntitySchema<CommandRow>;
  WorkItem: EntitySchema<WorkItemRow>;
  SlotLock: EntitySchema<SlotLockRow>;
  BlueprintFailure: EntitySchema<BlueprintFailureRow>;
  Authorization: EntitySchema<AuthorizationRow>;
  BlueprintState: EntitySchema<BlueprintStateRow>;
  Migration: EntitySchema<MigrationRow>;
}

type Columns<T> = { [K in keyof T]: EntitySchemaColumnOptions };

const text = (name: string, nullable = false): EntitySchemaColumnOptions => ({ name, type: 'text', nullable });
const int = (name: string, nullable = false): EntitySchemaColumnOptions => ({ name, type: 'integer', nullable });
const bigint = (name: string, nullable = false): EntitySchemaColumnOptions => ({ name, type: 'bigint', nullable });
const time = (name: string, nullable = false): EntitySchemaColumnOptions => ({ name, type: 'timestamptz', nullable });
const bool = (name: string): EntitySchemaColumnOptions => ({ name, type: 'boolean' });
const json = (name: string): EntitySchemaColumnOptions => ({ name, type: 'jsonb' });
const primary = (column: EntitySchemaColumnOptions): EntitySchemaColumnOptions => ({ ...column, primary: true });
// Identity columns: the database numbers them, an insert never gives them.
const identity = (name: string): EntitySchemaColumnOptions => ({ name, type: 'bigint', insert: false, update: false });

function entity<T>(entityName: string, schema: string, table: string, columns: Columns<T>): EntitySchema<T> {
  // The entity name carries the schema, so one DataSource can hold the entities of two schemas.
  return new EntitySchema<T>({ name: schema === 'slipway' ? entityName : `${entityName}_${schema}`, schema, tableName: table, columns: columns as never, synchronize: false });
}

const cache = new Map<string, SlipwayEntities>();

/**
 * The entities of the tables in `schema` (one set per schema name, the same objects on
 * every call, as a DataSource's `entities` needs them). The migrations create the tables:
 * the entities are `synchronize: false`, so `synchronize: true` in the app leaves them alone.
 */
export function slipwayEntities(options: { schema?: string } = {}): SlipwayEntities {
  const schema = options.schema ?? 'slipway';
  const cached = cache.get(schema);
  if (cached) return cached;
  const entities: SlipwayEntities = {
    Lease: entity<LeaseRow>('SlipwayLease', schema, 'leases', {
      id: primary(text('id')),
      seq: { ...identity('seq') },
      type: text('type'),
      status: text('status'),
      attributes: json('attributes'),
      blueprints: { name: 'blueprints', type: 'text', array: true, nullable: true },
      owner: text('owner', true),
      priority: int('priority'),
      resourceId: text('resource_id', true),
      allocatingResourceId: text('allocating_resource_id', true),
      parentResourceId: text('parent_resource_id', true),
      childKey: text('child_key', true),
      expiresAt: time('expires_at', true),
      deadlineAt: time('deadline_at', true),
      brokenReason: text('broken_reason', true),
      waitLogId: bigint('wait_log_id', true),
      phase: text('phase', true),
      phaseAttempts: int('phase_attempts'),
      createdAt: time('created_at'),
      statusChangedAt: time('status_changed_at'),
      allocationFailures: int('allocation_failures'),
      lastFailure: text('last_failure', true),
      allocateAfter: time('allocate_after', true),
      endCause: text('end_cause', true),
      authorizingOwner: text('authorizing_owner', true),
    }),
    Resource: entity<ResourceRow>('SlipwayResource', schema, 'resources', {
      id: primary(text('id')),
      type: text('type'),
      blueprint: text('blueprint'),
      status: text('status'),
      attributes: json('attributes'),
      allocated: bool('allocated'),
      phase: text('phase', true),
      phaseAttempts: int('phase_attempts'),
      reservedFor: text('reserved_for', true),
      brokenReason: text('broken_reason', true),
      createdAt: time('created_at'),
      statusChangedAt: time('status_changed_at'),
      idleSince: time('idle_since', true),
      leaseCount: int('lease_count'),
      buildFailed: bool('build_failed'),
      authorizingOwner: text('authorizing_owner', true),
      leasesServed: int('leases_served'),
    }),
    Log: entity<LogRow>('SlipwayLog', schema, 'logs', {
      id: { ...identity('id'), primary: true },
      type: text('type'),
      blueprint: text('blueprint', true),
      resourceId: text('resource_id', true),
      leaseId: text('lease_id', true),
      data: json('data'),
      count: int('count'),
      at: time('at'),
      lastAt: time('last_at'),
    }),
    Command: entity<CommandRow>('SlipwayCommand', schema, 'commands', {
      id: { ...identity('id'), primary: true },
      targetKind: text('target_kind'),
      targetId: text('target_id'),
      command: text('command'),
      data: json('data'),
      author: text('author', true),
      createdAt: time('created_at'),
      consumedAt: time('consumed_at', true),
      outcome: text('outcome', true),
    }),
    WorkItem: entity<WorkItemRow>('SlipwayWorkItem', schema, 'work_items', {
      objectKind: primary(text('object_kind')),
      objectId: primary(text('object_id')),
      runAt: time('run_at', true),
      priority: int('priority'),
      seq: bigint('seq'),
      chained: bool('chained'),
      wakeCount: int('wake_count'),
      attempts: int('attempts'),
      claimedBy: text('claimed_by', true),
      claimExpiresAt: time('claim_expires_at', true),
    }),
    SlotLock: entity<SlotLockRow>('SlipwaySlotLock', schema, 'slot_locks', {
      key: primary(text('key')),
      holderKind: text('holder_kind'),
      holderId: text('holder_id'),
      createdAt: time('created_at'),
    }),
    BlueprintFailure: entity<BlueprintFailureRow>('SlipwayBlueprintFailure', schema, 'blueprint_failures', {
      blueprint: primary(text('blueprint')),
      streak: int('streak'),
      lastError: text('last_error'),
      lastFailureAt: time('last_failure_at'),
      retryAt: time('retry_at'),
    }),
    Authorization: entity<AuthorizationRow>('SlipwayAuthorization', schema, 'authorizations', {
      blueprint: primary(text('blueprint')),
      ownerPattern: primary(text('owner_pattern')),
      state: text('state'),
      createdAt: time('created_at'),
      changedAt: time('changed_at'),
      changedBy: text('changed_by', true),
    }),
    BlueprintState: entity<BlueprintStateRow>('SlipwayBlueprintState', schema, 'blueprint_states', {
      blueprint: primary(text('blueprint')),
      draining: bool('draining'),
      changedAt: time('changed_at'),
      changedBy: text('changed_by', true),
    }),
    Migration: entity<MigrationRow>('SlipwayMigration', schema, 'migrations', {
      id: primary(int('id')),
      name: text('name'),
      appliedAt: time('applied_at'),
    }),
  };
  cache.set(schema, entities);
  return entities;
}
