import { SlipwayError } from './slipway-error.js';

/** Why a lease is no longer active: its expiry passed, someone released it, or it (or its resource) broke. */
export type LeaseEnding = 'expired' | 'released' | 'broken';

const SAID: Record<LeaseEnding, string> = { expired: 'it expired', released: 'it was released', broken: 'it broke' };

/**
 * The lease is no longer active. The `reason` of `lease.signal` once it aborts, and what
 * work on a lease that left `active` rejects with (a blueprint's `command.run()`).
 */
export class LeaseNotActiveError extends SlipwayError {
  readonly leaseId: string;
  readonly why: LeaseEnding;
  constructor(leaseId: string, why: LeaseEnding, options?: { cause?: unknown }) {
    super('LEASE_NOT_ACTIVE', `lease ${leaseId} is no longer active: ${SAID[why]}`, options);
    this.leaseId = leaseId;
    this.why = why;
  }
}
