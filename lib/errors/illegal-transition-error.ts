import { SlipwayError } from './slipway-error.js';

/** A status change that the transition table forbids, or whose compare-and-set found another status. */
export class IllegalTransitionError extends SlipwayError {
  constructor(kind: string, id: string, from: string, to: string, actual?: string) {
    super(
      'ILLEGAL_TRANSITION',
      `${kind} ${id}: ${from} → ${to} ` + (actual === undefined ? 'is not a legal transition' : `refused: status is ${actual}`),
    );
  }
}
