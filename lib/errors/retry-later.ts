import { Duration, type DurationLike } from 'luxon';
import { SlipwayError } from './slipway-error.js';

/**
 * Thrown by a blueprint hook that cannot make progress yet (a host is busy, a quota is
 * exhausted). The hook is called again after `after`, or with backoff when omitted;
 * the object is not broken.
 */
export class RetryLater extends SlipwayError {
  readonly after: Duration | undefined;
  constructor(reason = 'retry later', after?: DurationLike) {
    super('RETRY_LATER', reason);
    this.after = after === undefined ? undefined : Duration.fromDurationLike(after);
  }
}
