import { SlipwayError } from './slipway-error.js';

/**
 * The lease was not active within its timeout (`spec.timeout`, or `whenActive({ timeout })`).
 * `released` says whether it is released already or its release was only requested (its
 * worker is still in a hook); `lastFailure` is the error of the last allocation that
 * failed for it, when a failing blueprint was why it waited (also the `cause`).
 */
export class LeaseTimeoutError extends SlipwayError {
  readonly leaseId: string;
  readonly released: boolean;
  readonly lastFailure: string | null;
  constructor(leaseId: string, timeout: string, options: { released?: boolean; lastFailure?: string | null } = {}) {
    const released = options.released ?? false;
    const lastFailure = options.lastFailure ?? null;
    super(
      'LEASE_TIMEOUT',
      `lease ${leaseId} was not active within ${timeout}; ${released ? 'it has been released' : 'its release was requested'}${lastFailure ? `; the last allocation failed: ${lastFailure}` : ''}`,
      lastFailure ? { cause: lastFailure } : undefined,
    );
    this.leaseId = leaseId;
    this.released = released;
    this.lastFailure = lastFailure;
  }
}
