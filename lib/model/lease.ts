import type { DateTime } from 'luxon';
import type { StandardInterfaces } from './interfaces.js';
import type { JsonObject } from './spec.js';
import type { LeaseStatus, ResourceStatus } from './states.js';

export interface ResourceInfo<ResourceAttrs extends JsonObject = JsonObject> {
  id: string;
  type: string;
  blueprint: string;
  attributes: ResourceAttrs;
}

/** A lease as stored: what `broker.leases.get/list` return. */
export interface LeaseRecord<LeaseAttrs extends JsonObject = JsonObject> {
  id: string;
  type: string;
  status: LeaseStatus;
  attributes: LeaseAttrs;
  owner: string | null;
  priority: number;
  resourceId: string | null;
  parentResourceId: string | null;
  expiresAt: DateTime | null;
  createdAt: DateTime;
  statusChangedAt: DateTime;
  brokenReason: string | null;
}

export interface ResourceRecord<ResourceAttrs extends JsonObject = JsonObject> {
  id: string;
  type: string;
  blueprint: string;
  status: ResourceStatus;
  attributes: ResourceAttrs;
  createdAt: DateTime;
  statusChangedAt: DateTime;
  brokenReason: string | null;
}

/** An active lease, handed over only once its resource and the lease itself are usable. */
export interface Lease<LeaseAttrs extends JsonObject = JsonObject, ResourceAttrs extends JsonObject = JsonObject> extends AsyncDisposable {
  readonly id: string;
  readonly type: string;
  /** The status when this object was handed over; `broker.leases.get(id)` reads the current one. */
  readonly status: LeaseStatus;
  readonly attributes: LeaseAttrs;
  readonly owner: string | null;
  /** When the lease expires: as handed over, then as this object's `extend()` last set it. */
  readonly expiresAt: DateTime | null;
  readonly resource: ResourceInfo<ResourceAttrs>;
  /**
   * Aborts when the lease leaves `active`: at `expiresAt` (on the broker's clock, even
   * before a worker has processed the expiry), or once it is released (by anyone, in any
   * broker on the database) or broken. Its `reason` is a `LeaseNotActiveError` saying
   * which. Pass it to whatever works on the lease, so that the work stops with the lease.
   *
   * Watched from its first read (this property is lazy); the watch ends with the lease.
   * Already aborted when `release()` resolves. After `broker.close()` the broker learns
   * nothing more: a signal that has not aborted by then stays as it is.
   */
  readonly signal: AbortSignal;
  interface<Name extends keyof StandardInterfaces>(name: Name): StandardInterfaces[Name];
  interface<T = unknown>(name: string): T;
  /**
   * Writes a release command. By default resolves once the lease is destroyed. Disposing
   * the lease (`await using`) releases it the same way, and does nothing once a
   * `release()` of this object has seen it destroyed, also after `broker.close()`.
   */
  release(options?: { wait?: boolean }): Promise<void>;
  /**
   * Renews the lease: `extend({ minutes: 30 })` (or `'PT30M'`, `{ ttl: ... }`) makes it expire 30 minutes from
   * now, `extend({ until })` at that time (later or earlier than before, but in the future).
   * The lease's worker applies it; by default this resolves with the new expiry once it
   * has, and `signal` then aborts at the new expiry instead of the old one. Rejects with
   * LeaseEndedError once the lease is released, broken or expired.
   */
  extend(renewal: Renewal, options?: ExtendOptions): Promise<DateTime>;
}

/** A lease that may still be pending, as `broker.requestLease` returns it. */
export interface LeaseHandle<LeaseAttrs extends JsonObject = JsonObject, ResourceAttrs extends JsonObject = JsonObject> extends AsyncDisposable {
  readonly id: string;
  whenActive(options?: { timeout?: import('../time.js').DurationInput; signal?: AbortSignal }): Promise<Lease<LeaseAttrs, ResourceAttrs>>;
  status(): Promise<LeaseStatus>;
  release(options?: { wait?: boolean }): Promise<void>;
  /** Renews the lease, pending or active, as `Lease.extend` does. */
  extend(renewal: Renewal, options?: ExtendOptions): Promise<DateTime>;
}

/** A renewal: a new ttl counted from now (`'30m'`, `{ minutes: 30 }`, `{ ttl: '30m' }`), or a new expiry (`{ until }`). */
export type Renewal = import('../time.js').DurationInput | { ttl: import('../time.js').DurationInput } | { until: import('../time.js').DateTimeInput };

export interface ExtendOptions {
  /** Who renews, for the log ("extended by ci"). */
  author?: string;
  /** false: resolve once the renewal is written, before the lease's worker applies it. @defaultValue true */
  wait?: boolean;
}
