import { SlipwayError } from './slipway-error.js';

/** Bad input to a public call. `field` names the offending field (`spec.ttl`, `limits.maxResources`). Nothing was written. */
export class ValidationError extends SlipwayError {
  readonly field: string;
  constructor(field: string, message: string, options?: { cause?: unknown; code?: string }) {
    super(options?.code ?? 'INVALID_INPUT', `${field}: ${message}`, options);
    this.field = field;
  }
}
