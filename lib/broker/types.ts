import type { Blueprint } from '../blueprint/contract.js';
import type { BrokerEvents } from './events.js';
import type { Clock } from '../clock.js';
import type { LogEntry } from '../logs/log-types.js';
import type { AuthorizationRecord, AuthorizationState } from '../model/authorizations.js';
import type { ExtendOptions, Lease, LeaseHandle, LeaseRecord, Renewal, ResourceRecord } from '../model/lease.js';
import type { LeaseAttributesOf, LeaseOf, NoAttributes, ResourceAttributesOf, TypedLeaseSpec } from '../blueprint/typed-leases.js';
import type { JsonObject, LeaseSpec } from '../model/spec.js';
import type { LeaseStatus, ResourceStatus } from '../model/states.js';
import type { GcResult } from '../store/gc.js';
import type { DurationInput } from '../time.js';
import type { DateTime } from 'luxon';

/** The public face of a broker: what `createBroker` returns, and the shapes of its reads. */

/**
 * One page of a list, oldest first: `{ limit: 50, offset: 100 }` is the third page of 50.
 * A page is read with LIMIT/OFFSET in the database, never by loading every match.
 */
export interface PageQuery {
  /** At most this many records, 1 to 10000. @defaultValue every match */
  limit?: number;
  /** Skip this many matches first (a whole number). @defaultValue 0 */
  offset?: number;
}

export interface LeaseQuery extends PageQuery {
  status?: LeaseStatus | LeaseStatus[];
  type?: string;
  owner?: string;
  /** The leases on this resource. */
  resource?: string;
  /** The child leases this resource took (`ctx.acquireLease`). */
  parentResource?: string;
}

export interface ResourceQuery extends PageQuery {
  status?: ResourceStatus | ResourceStatus[];
  type?: string;
  blueprint?: string;
}

export interface AuthorizationQuery {
  blueprint?: string;
  /** The rows that cover this owner (its own, and the prefixes it starts with), the deciding one first. */
  owner?: string;
  state?: AuthorizationState;
}

export interface BlueprintStats {
  type: string;
  resources: Record<ResourceStatus, number>;
  /** Resources still being built (`pending`). */
  allocating: number;
  /** `pending` + `active`: what counts as capacity. */
  live: number;
  /** `released` + `broken`: on the way out, never capacity. */
  deletionLane: number;
  /** Deletion-lane resources whose destroy hook has been tried at least once. */
  destroying: number;
  /** Age in milliseconds of the oldest resource in each transitional state. */
  oldestAgeMs: Partial<Record<'pending' | 'released' | 'broken' | 'destroying', number>>;
  /**
   * Builds that failed in a row (a hook or a policy function threw), the last error, and
   * until when no new allocation of this blueprint starts; null once a resource of it
   * activates again.
   */
  failures: { streak: number; lastError: string; lastFailureAt: string; retryAt: string } | null;
  /** Whether it serves only authorized owners (`requireAuthorization`), and how many of its authorizations are `requested`, awaiting a decision. */
  requireAuthorization: boolean;
  requestedAuthorizations: number;
  /** Whether it drains (`broker.drainBlueprint`): it serves no new lease until resumed. */
  draining: boolean;
  /** Active resources with no lease. */
  idle: number;
  /** The warm pool this broker's configuration of it keeps (`limits.minIdle`); 0 without one. */
  warmTarget: number;
}

export interface TypeStats {
  leases: Record<LeaseStatus, number>;
  /** Pending leases: the waiting queue. */
  waiting: number;
  /** Pending leases that wait because no blueprint that could serve them authorized their owner yet. */
  waitingForAuthorization: number;
  live: number;
  deletionLane: number;
  oldestAgeMs: Partial<Record<'pending' | 'acquired' | 'released' | 'broken', number>>;
}

/** What `drainBlueprint` and `resumeBlueprint` did. */
export interface DrainResult {
  blueprint: string;
  /** The state now. */
  draining: boolean;
  /** False when the blueprint was already in that state (nothing was written). */
  changed: boolean;
  /** A drain: the idle resources told to release themselves (their workers do it). */
  idleResources: string[];
}

export interface BrokerStats {
  blueprints: Record<string, BlueprintStats>;
  types: Record<string, TypeStats>;
}

export interface Broker extends AsyncDisposable {
  readonly clock: Clock;
  /**
   * Requests a lease and resolves once it is active. With `spec.blueprints` given as
   * blueprint objects (`blueprints: [local]`), the lease's `attributes` and
   * `resource.attributes` have the types those blueprints declare.
   */
  acquire<A extends JsonObject = NoAttributes, B extends Blueprint<any, any, any> = Blueprint<any, any, any>>(spec: TypedLeaseSpec<A, B>): Promise<LeaseOf<B, A>>;
  acquire<A extends JsonObject = JsonObject>(spec: LeaseSpec<A>): Promise<Lease<A & JsonObject>>;
  /** Requests a lease and returns its handle as soon as the request is recorded; typed like `acquire`. */
  requestLease<A extends JsonObject = NoAttributes, B extends Blueprint<any, any, any> = Blueprint<any, any, any>>(spec: TypedLeaseSpec<A, B>): Promise<LeaseHandle<A & LeaseAttributesOf<B>, ResourceAttributesOf<B>>>;
  requestLease<A extends JsonObject = JsonObject>(spec: LeaseSpec<A>): Promise<LeaseHandle<A & JsonObject>>;
  /** Writes a release command for a lease. */
  release(leaseId: string, options?: { reason?: string; author?: string }): Promise<void>;
  /**
   * Renews a lease by id (`{ ttl }` from now, or `{ until }`), as `lease.extend()` does:
   * resolves with the new expiry once the lease's worker has applied it.
   */
  extendLease(leaseId: string, renewal: Renewal, options?: ExtendOptions): Promise<DateTime>;
  /** Writes a release command for a resource; its leases are released first. */
  releaseResource(resourceId: string, options?: { reason?: string; author?: string }): Promise<void>;
  /** Writes a reclaim command: an idle active resource is released, a leased one is left alone. */
  reclaimResource(resourceId: string, options?: { author?: string }): Promise<void>;
  /** Writes a break command: the resource breaks, its active leases break with the reason. */
  breakResource(resourceId: string, reason: string, options?: { author?: string }): Promise<void>;
  readonly leases: { get(id: string): Promise<LeaseRecord | null>; list(query?: LeaseQuery): Promise<LeaseRecord[]> };
  readonly resources: { get(id: string): Promise<ResourceRecord | null>; list(query?: ResourceQuery): Promise<ResourceRecord[]> };
  logs(filter?: { lease?: string; resource?: string; blueprint?: string; type?: string }): Promise<LogEntry[]>;
  /**
   * Which owners may use the blueprints that require authorization. An owner pattern is an
   * exact owner or a prefix ending in `/*`; the most specific decision (authorized or
   * declined) that covers an owner counts. `request` records a `requested` row unless the
   * pattern has one; `authorize` and `decline` set its state, wake the pending leases it
   * concerns, and release nothing (`release` does). Each returns the pattern's row.
   */
  readonly authorizations: {
    request(blueprint: string, owner: string, options?: { author?: string }): Promise<AuthorizationRecord>;
    authorize(blueprint: string, owner: string, options?: { author?: string }): Promise<AuthorizationRecord>;
    decline(blueprint: string, owner: string, options?: { author?: string }): Promise<AuthorizationRecord>;
    list(query?: AuthorizationQuery): Promise<AuthorizationRecord[]>;
  };
  /**
   * Drains a blueprint, for every broker of the database: it serves no new lease and builds
   * no resource; its idle resources are released now and its leased ones when their leases
   * end. Waiting leases go to other blueprints of their type, or wait. Stored until
   * `resumeBlueprint`: unlike `enabled: false`, which is this broker's configuration.
   */
  drainBlueprint(blueprint: string, options?: { author?: string }): Promise<DrainResult>;
  /** Ends a drain: the blueprint serves leases again, and the best waiting lease looks at once. */
  resumeBlueprint(blueprint: string, options?: { author?: string }): Promise<DrainResult>;
  on<E extends keyof BrokerEvents>(event: E, listener: (payload: BrokerEvents[E]) => void): () => void;
  stats(): Promise<BrokerStats>;
  /**
   * Deletes history older than `olderThan` (default: the broker's `retention`) now:
   * destroyed leases and resources with their logs, and consumed commands. Live objects
   * and their logs are never touched. Returns how many rows of each went.
   */
  gc(options?: { olderThan?: DurationInput }): Promise<GcResult>;
  /** Stops claiming work, waits up to the grace period for hooks in flight, and keeps all state. Releases nothing. */
  close(options?: { grace?: DurationInput }): Promise<void>;
}
