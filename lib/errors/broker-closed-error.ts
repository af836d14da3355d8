import { SlipwayError } from './slipway-error.js';

/** A call on a broker that is closed, or that closed while the call ran (`cause`: what the call met). */
export class BrokerClosedError extends SlipwayError {
  constructor(options?: { cause?: unknown }) {
    super('BROKER_CLOSED', 'the broker is closed', options);
  }
}
