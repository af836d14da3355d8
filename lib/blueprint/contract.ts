import type { DateTime, Duration } from 'luxon';
import type { Clock } from '../clock.js';
import type { DurationInput } from '../time.js';
import type { JsonObject, LeaseSpec } from '../model/spec.js';
import type { Lease } from '../model/lease.js';
import type { HookTimeouts, NormalizedTimeouts } from './timeouts.js';

/** What a hook sees of a resource. */
export interface ResourceView<ResourceAttrs extends JsonObject = JsonObject> {
  id: string;
  type: string;
  blueprint: string;
  status: string;
  attributes: ResourceAttrs;
  /** Leases on this resource that are not destroyed yet (acquired, active or being torn down). */
  leaseCount: number;
}

/** What a hook sees of a lease. */
export interface LeaseView<LeaseAttrs extends JsonObject = JsonObject> {
  id: string;
  type: string;
  attributes: LeaseAttrs;
  owner: string | null;
  expiresAt: DateTime | null;
}

export interface HookContext<Config> {
  blueprint: { name: string; type: string; config: Config };
  clock: Clock;
  /** Aborts when the broker closes past its grace period. */
  signal: AbortSignal;
  /** True when this hook already ran for this object and its outcome was never recorded (a crash or a close). Hooks must then be idempotent. */
  resume: boolean;
  /** Writes a log entry about this object, rendered by `logTypes[type]` of the blueprint, or as `message` for the built-in `blueprint.note`. Throws a ValidationError at once for an undeclared type or data that is not a JSON object. */
  log(type: string, data?: JsonObject): Promise<void>;
}

/** What every context bound to a resource offers: its hooks, its leases' hooks and their interface factories. */
export interface ResourceBound {
  /**
   * The active child lease this resource took in `allocateResource` with
   * `ctx.acquireLease(spec, { key })`, found by that key: how a working copy's lease hooks
   * and interfaces reach the host it lives on. Throws a ValidationError when the resource
   * has no child of that key, and a LeaseNotActiveError when the child is not active.
   */
  childLease(key: string): Promise<Lease>;
}

export interface ResourceContext<Config, ResourceAttrs extends JsonObject> extends HookContext<Config>, ResourceBound {
  resource: ResourceView<ResourceAttrs>;
}

export interface AllocateContext<Config, ResourceAttrs extends JsonObject, LeaseAttrs extends JsonObject>
  extends ResourceContext<Config, ResourceAttrs> {
  /** The lease whose demand started this allocation, if it is still pending. */
  lease: LeaseView<LeaseAttrs> | null;
  /**
   * Takes a child lease on another resource type, owned by this resource and released
   * when it is destroyed. Resolves once the child is active; until then the hook is
   * suspended (it is called again, with `resume: true`, when the child is ready), so it
   * must be idempotent. `key` names the child so that a repeated call finds it again.
   */
  acquireLease(spec: LeaseSpec, options?: { key?: string }): Promise<Lease>;
  /** Locks slots held by this resource until it is destroyed. */
  lockSlots(keys: string[]): void;
  /**
   * Chooses one of `keys` for this resource to hold until it is destroyed, and returns it:
   * the first that no other lease or resource holds and no other hook of this process has
   * just chosen. It is locked with the other slots in the transaction that records the
   * hook's outcome; should another process take it first, that is a slot-lock conflict,
   * retried later like one of `lockSlots`. For "one of N slots on a resource": pass the N
   * keys, and name attributes (a port, a directory) after the key returned.
   */
  lockOneOf(keys: readonly string[]): Promise<string>;
}

export interface LeaseContext<Config, LeaseAttrs extends JsonObject> extends HookContext<Config> {
  lease: LeaseView<LeaseAttrs>;
}

export interface LeaseOnResourceContext<Config, ResourceAttrs extends JsonObject, LeaseAttrs extends JsonObject>
  extends LeaseContext<Config, LeaseAttrs>, ResourceBound {
  resource: ResourceView<ResourceAttrs>;
}

/** What an interface factory (`interfaces`) receives, each time `lease.interface(name)` is called. */
export interface InterfaceContext<Config, ResourceAttrs extends JsonObject, LeaseAttrs extends JsonObject>
  extends LeaseOnResourceContext<Config, ResourceAttrs, LeaseAttrs> {
  /**
   * The lease's own `lease.signal`, not a hook's: it aborts, with a `LeaseNotActiveError`
   * as its reason, when the lease leaves `active` (expired, released by anyone, broken).
   * An interface stops what it does for the lease when it aborts (kills its processes,
   * closes its connections) and refuses new work once it has. It does not abort when the
   * broker closes. Reading it starts the watch: read it when the work starts, not in the
   * factory, so that a lease whose interface does nothing costs nothing.
   */
  signal: AbortSignal;
}

export interface AcquireContext<Config, ResourceAttrs extends JsonObject, LeaseAttrs extends JsonObject>
  extends LeaseOnResourceContext<Config, ResourceAttrs, LeaseAttrs> {
  /** Slot locks this lease holds until it is destroyed. Taken all or nothing in the transaction that acquires the lease; a conflict is retried. */
  lockSlots(keys: string[]): void;
  /**
   * Chooses one of `keys` for this lease to hold until it is destroyed, and returns it:
   * the first that no other lease or resource holds and no other hook of this process has
   * just chosen. It is locked with the other slots in the transaction that records the
   * hook's outcome; should another process take it first, that is a slot-lock conflict,
   * retried later like one of `lockSlots`. For "one of N slots on a resource": pass the N
   * keys, and name attributes (a port, a directory) after the key returned.
   */
  lockOneOf(keys: readonly string[]): Promise<string>;
}

/** What `allocateResource` and `activateResource` may return: attributes merged into the resource's. */
export type ResourceOutcome<ResourceAttrs extends JsonObject> = void | { attributes?: Partial<ResourceAttrs> };
export type LeaseOutcome<LeaseAttrs extends JsonObject> = void | { attributes?: Partial<LeaseAttrs> };

type MaybePromise<T> = T | Promise<T>;

export type { CommandOptions, CommandResult, CommandInterface, FilesystemInterface, StandardInterfaces } from '../model/interfaces.js';

/**
 * The plugin contract. A blueprint implementation knows how to build, hand out and tear
 * down one kind of resource. Hooks receive a context and return data; the library does
 * every write, and never calls a hook inside a transaction or while holding a lock.
 *
 * A hook may throw `RetryLater` to be called again with backoff; anything else it
 * throws breaks the object it was working on, with the error recorded in its log.
 *
 * Phases, as in Drydock: `canEverAllocate` → (`canAllocate` → `allocateResource` →
 * `activateResource`) → `canAcquireLease` → `acquireLease` → `activateLease` →
 * `releaseLease` → `destroyLease` → `destroyResource`.
 */
export interface BlueprintImplementation<
  Config = unknown,
  ResourceAttrs extends JsonObject = JsonObject,
  LeaseAttrs extends JsonObject = JsonObject,
> {
  /** The resource type this implementation builds (`host`, `working-copy`). */
  type: string;
  description?: string;
  /** Checks and normalizes `config`; throw to reject it (reported as a ValidationError on `config`). */
  validateConfig?(config: unknown): Config;
  /** Resources of this blueprint with no leases for this long release themselves. Off by default. */
  idleExpiry?: DurationInput | ((config: Config) => DurationInput | undefined);
  /** Could this blueprint ever serve the lease? If no candidate can, the lease breaks at once. Default: true. */
  canEverAllocate?(ctx: LeaseContext<Config, LeaseAttrs>): MaybePromise<boolean>;
  /** Is there capacity to build a new resource now? Rough and lock-free. Default: true. */
  canAllocate?(ctx: LeaseContext<Config, LeaseAttrs>): MaybePromise<boolean>;
  /** Builds the resource. Idempotent per resource id: it may be called again after a crash. */
  allocateResource(ctx: AllocateContext<Config, ResourceAttrs, LeaseAttrs>): Promise<ResourceOutcome<ResourceAttrs>>;
  /** Makes an allocated resource usable. Leases become active only after this returns. */
  activateResource?(ctx: AllocateContext<Config, ResourceAttrs, LeaseAttrs>): Promise<ResourceOutcome<ResourceAttrs>>;
  /** Can this active resource take this lease now? Default: true. */
  canAcquireLease?(ctx: LeaseOnResourceContext<Config, ResourceAttrs, LeaseAttrs>): MaybePromise<boolean>;
  /** Reserves what the lease needs, chiefly slot locks (`ctx.lockSlots`). */
  acquireLease?(ctx: AcquireContext<Config, ResourceAttrs, LeaseAttrs>): Promise<LeaseOutcome<LeaseAttrs>>;
  /** Prepares the lease (a scratch directory, a checkout). */
  activateLease?(ctx: LeaseOnResourceContext<Config, ResourceAttrs, LeaseAttrs>): Promise<LeaseOutcome<LeaseAttrs>>;
  /** Called once when the lease is released, before its destroy phase. */
  releaseLease?(ctx: LeaseOnResourceContext<Config, ResourceAttrs, LeaseAttrs>): Promise<void>;
  /** Tears down what the lease used. Idempotent; retried with backoff until it succeeds. */
  destroyLease?(ctx: LeaseOnResourceContext<Config, ResourceAttrs, LeaseAttrs>): Promise<void>;
  /** Tears the resource down. Idempotent (something already gone is success); retried with backoff until it succeeds. */
  destroyResource?(ctx: ResourceContext<Config, ResourceAttrs>): Promise<void>;
  /**
   * Interfaces a lease offers through `lease.interface(name)`. `ctx.signal` is the lease's
   * signal (see `InterfaceContext`): work an interface starts must stop when it aborts,
   * and its destroy hooks must not tear down what a process of the lease still uses.
   */
  interfaces?: { [name: string]: (ctx: InterfaceContext<Config, ResourceAttrs, LeaseAttrs>) => unknown };
  /** Renderers for the log types this blueprint writes with `ctx.log`. */
  logTypes?: Record<string, (data: JsonObject) => string>;
}

export interface BlueprintLimits {
  /** Hard cap on resources that are not destroyed, enforced atomically with slot locks. @defaultValue no cap */
  maxResources?: number;
  /** How many resources may be allocating at once, given how many are active. @defaultValue `max(1, ceil(0.25 × active))` */
  allocationLimit?: (activeCount: number) => number;
  /**
   * At most this many leases on one resource at a time (1: exclusive), enforced in the
   * transaction that acquires a lease. The allocator then skips full resources in its
   * query instead of asking `canAcquireLease` of each, which keeps a waiting lease's pass
   * cheap however many busy resources the pool holds. @defaultValue no limit (ask the hooks)
   */
  maxLeasesPerResource?: number;
  /** Prefer growing the pool over sharing a resource that already has leases. @defaultValue false */
  supplemental?: boolean;
  /** An idle resource may be reclaimed for another lease after no leases for this long. @defaultValue 0 (as soon as it is idle) */
  reclaimIdleAfter?: DurationInput;
  /** Overrides the implementation's `idleExpiry`. */
  idleExpiry?: DurationInput;
  /**
   * A warm pool: keep at least this many active resources with no lease, built in the
   * background (within `maxResources` and the allocation limit: warming is allocation
   * too), so that a lease that arrives takes one at once; the pool is refilled after.
   * With `idleExpiry`, only the idle resources beyond `minIdle` expire. @defaultValue 0
   */
  minIdle?: number;
  /**
   * Recycling by age: a resource active for longer than this takes no new lease, and is
   * released once its leases are gone, never while one is active. Its age counts from its
   * activation, so that a slow build never makes a resource too old to serve the lease it
   * was built for. A replacement is built when a waiting lease wants one. @defaultValue no limit
   */
  maxResourceAge?: DurationInput;
  /**
   * Recycling by use: a resource that has served this many leases takes no new one, and
   * is released once its leases are gone. @defaultValue no limit
   */
  maxLeasesPerResourceLifetime?: number;
  /**
   * One lease per resource, then teardown (ephemeral runners): the resource is released
   * as soon as its lease is gone, and the allocator never hands it a second lease. The
   * same as `maxLeasesPerResourceLifetime: 1`. @defaultValue false
   */
  destroyOnRelease?: boolean;
}

export interface BlueprintOptions<Config> {
  /** Unique among the broker's blueprints; letters, digits, `-`, `_` and `.`. */
  name: string;
  config?: Config;
  limits?: BlueprintLimits;
  /** A disabled blueprint serves no new lease. @defaultValue true */
  enabled?: boolean;
  /**
   * Serve only the owners authorized on this blueprint (`broker.authorizations.authorize`).
   * A lease of another owner waits, with a `requested` authorization recorded for it, and
   * breaks if its owner is declined on every blueprint that could serve it; a lease
   * without an owner is never authorized. A child lease is authorized as the owner its
   * parent resource was built for. @defaultValue false
   */
  requireAuthorization?: boolean;
  /**
   * How long each hook may run before it counts as a failure (its `ctx.signal` is then
   * aborted). By hook name, plus `default`. @defaultValue 1 minute for `canEverAllocate`,
   * `canAllocate` and `canAcquireLease`; 30 minutes for every other hook
   */
  timeouts?: HookTimeouts;
}

/** A configured, named instance of an implementation, ready to register with a broker. */
export interface Blueprint<Config = unknown, ResourceAttrs extends JsonObject = JsonObject, LeaseAttrs extends JsonObject = JsonObject> {
  readonly name: string;
  readonly type: string;
  readonly config: Config;
  readonly enabled: boolean;
  readonly requireAuthorization: boolean;
  readonly limits: NormalizedLimits;
  readonly timeouts: NormalizedTimeouts;
  readonly implementation: BlueprintImplementation<Config, ResourceAttrs, LeaseAttrs>;
}

export interface NormalizedLimits {
  maxResources: number | null;
  maxLeasesPerResource: number | null;
  allocationLimit: (activeCount: number) => number;
  supplemental: boolean;
  reclaimIdleAfter: Duration;
  idleExpiry: Duration | null;
  maxResourceAge: Duration | null;
  /** 1 with `destroyOnRelease`. */
  maxLeasesPerResourceLifetime: number | null;
  destroyOnRelease: boolean;
  minIdle: number;
}
