export { createBroker } from './broker/index.js';
export type { Broker, BrokerOptions, BrokerStats, BlueprintStats, TypeStats, PageQuery, LeaseQuery, ResourceQuery, AuthorizationQuery, DrainResult } from './broker/index.js';
export type { QuotaOptions } from './model/quotas.js';
export type { BrokerEvents, LeaseEvent, ResourceEvent } from './broker/events.js';
export { defineBlueprint, defaultAllocationLimit } from './blueprint/define-blueprint.js';
export type * from './blueprint/contract.js';
export { HOOKS, MAX_HOOK_TIMEOUT } from './blueprint/timeouts.js';
export type { HookName, HookTimeouts } from './blueprint/timeouts.js';
export { systemClock } from './clock.js';
export type { Clock } from './clock.js';
export type { Logger } from './engine/runtime.js';
export * from './errors/index.js';
export { LOG_TYPES, renderLog } from './logs/log-types.js';
export type { LogEntry, LogType, LogDataByType } from './logs/log-types.js';
export type { Lease, LeaseHandle, LeaseRecord, ResourceRecord, ResourceInfo, Renewal, ExtendOptions } from './model/lease.js';
export type { LeaseOf, LeaseAttributesOf, ResourceAttributesOf, TypedLeaseSpec } from './blueprint/typed-leases.js';
export type { LeaseSpec, JsonObject, JsonValue } from './model/spec.js';
export { AUTHORIZATION_STATES } from './model/authorizations.js';
export type { AuthorizationRecord, AuthorizationState } from './model/authorizations.js';
export {
  LEASE_STATUSES,
  RESOURCE_STATUSES,
  LEASE_TRANSITIONS,
  RESOURCE_TRANSITIONS,
  LEASE_STATE_FLAGS,
  RESOURCE_STATE_FLAGS,
  isLegalTransition,
} from './model/states.js';
export type { LeaseStatus, ResourceStatus } from './model/states.js';
export type { DatabaseOptions } from './store/open.js';
export type { GcResult } from './store/gc.js';
export { parseDuration, parseDateTime } from './time.js';
export type { DurationInput, DateTimeInput } from './time.js';
