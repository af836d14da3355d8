import { SlipwayError } from './slipway-error.js';

/**
 * The connection died while a write's COMMIT was in flight: it may or may not have
 * committed. slipway's own writes are idempotent and run again after it (a lease request,
 * a command); a caller that meets it (only during a server outage) may repeat the call:
 * a second release of a lease, say, is consumed with "no effect".
 */
export class CommitOutcomeUnknownError extends SlipwayError {
  constructor(cause: unknown) {
    super('COMMIT_OUTCOME_UNKNOWN', 'the connection was lost while committing; the transaction may or may not have committed', { cause });
  }
}
