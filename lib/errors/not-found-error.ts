import { SlipwayError } from './slipway-error.js';

export class NotFoundError extends SlipwayError {
  constructor(kind: string, id: string) {
    super('NOT_FOUND', `${kind} ${id} does not exist`);
  }
}
