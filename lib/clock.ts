import type { DateTime } from 'luxon';
import { utcMillis } from './time.js';

/**
 * The one source of time. Expiry, backoff, claim expiry and scheduled work all read
 * `now()` and wait through `schedule()`, so tests move time instead of sleeping.
 */
export interface Clock {
  now(): DateTime;
  /** Calls `fn` once the clock has reached `at`. Returns a function that cancels it. */
  schedule(at: DateTime, fn: () => void): () => void;
}

const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** The wall clock, in UTC. */
export const systemClock: Clock = {
  now: () => utcMillis(Date.now()),
  schedule(at, fn) {
    let timer: NodeJS.Timeout | undefined;
    let cancelled = false;
    const arm = () => {
      const wait = at.toMillis() - Date.now();
      if (wait <= 0) return void fn();
      timer = setTimeout(() => !cancelled && arm(), Math.min(wait, MAX_TIMEOUT_MS));
      timer.unref();
    };
    arm();
    return () => {
      cancelled = true;
      if (timer) clearTimeout(timer);
    };
  },
};
