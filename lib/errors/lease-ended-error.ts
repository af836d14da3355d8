import { SlipwayError } from './slipway-error.js';

/** How a lease that cannot be renewed ended: its status, or `expired` before the renewal came. */
export type LeaseEnd = 'released' | 'broken' | 'destroyed' | 'expired';

/** A renewal (`extend`) came for a lease that has ended: released, broken, destroyed, or past its expiry. */
export class LeaseEndedError extends SlipwayError {
  readonly leaseId: string;
  readonly end: LeaseEnd;
  constructor(leaseId: string, end: LeaseEnd) {
    super('LEASE_ENDED', `lease ${leaseId} ${end === 'expired' ? 'has expired' : `is already ${end}`}: it cannot be extended`);
    this.leaseId = leaseId;
    this.end = end;
  }
}
