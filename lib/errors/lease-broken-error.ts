import { SlipwayError } from './slipway-error.js';

/** The lease broke before it became active, or while waiting for it. `cause` holds the recorded reason. */
export class LeaseBrokenError extends SlipwayError {
  readonly leaseId: string;
  constructor(leaseId: string, reason: string, options?: { cause?: unknown }) {
    super('LEASE_BROKEN', `lease ${leaseId} broke: ${reason}`, options);
    this.leaseId = leaseId;
  }
}
