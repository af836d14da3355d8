import type { Duration } from 'luxon';
import { SlipwayError } from './slipway-error.js';

/** A blueprint hook that did not settle within its timeout (`timeouts` of the blueprint's options). */
export class HookTimeoutError extends SlipwayError {
  readonly hook: string;
  readonly blueprint: string;
  readonly timeout: Duration;
  constructor(blueprint: string, hook: string, timeout: Duration) {
    super('HOOK_TIMEOUT', `did not finish within ${timeout.shiftTo('seconds').toHuman({ maximumFractionDigits: 3 })} (timeouts.${hook} of blueprint ${blueprint}); treated as a failure and its signal aborted`);
    this.hook = hook;
    this.blueprint = blueprint;
    this.timeout = timeout;
  }
}
