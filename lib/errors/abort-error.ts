import { SlipwayError } from './slipway-error.js';

/** `spec.signal` (or a wait's signal) aborted. A pending lease is released. */
export class AbortError extends SlipwayError {
  constructor(message = 'the operation was aborted', options?: { cause?: unknown }) {
    super('ABORTED', message, options);
  }
}
