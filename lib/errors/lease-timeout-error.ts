import { SlipwayError } from './slipway-error.js';

/** The lease was not active within `spec.timeout`; it has been released. */
export class LeaseTimeoutError extends SlipwayError {
  readonly leaseId: string;
  constructor(leaseId: string, timeout: string) {
    super('LEASE_TIMEOUT', `lease ${leaseId} was not active within ${timeout}; it has been released`);
    this.leaseId = leaseId;
  }
}
