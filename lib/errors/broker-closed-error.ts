import { SlipwayError } from './slipway-error.js';

export class BrokerClosedError extends SlipwayError {
  constructor() {
    super('BROKER_CLOSED', 'the broker is closed');
  }
}
