import { SlipwayError } from './slipway-error.js';

/** One of the slot locks a status change needed is held by another object. The change is retried; it never breaks a lease. */
export class SlotLockConflictError extends SlipwayError {
  readonly keys: string[];
  constructor(keys: string[]) {
    super('SLOT_LOCK_CONFLICT', `slot lock held by another object: ${keys.join(', ')}`);
    this.keys = keys;
  }
}
