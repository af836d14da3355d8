import { SlipwayError } from './slipway-error.js';

/** No candidate blueprint could ever serve a lease; the lease broke at once. */
export class NoBlueprintError extends SlipwayError {
  readonly type: string;
  readonly considered: string[];
  constructor(type: string, considered: string[], reasons: string[] = []) {
    super(
      'NO_BLUEPRINT',
      `no blueprint can ever serve a lease of type "${type}"; considered: ${considered.length ? considered.join(', ') : 'none'}` +
        (reasons.length ? ` (${reasons.join('; ')})` : ''),
    );
    this.type = type;
    this.considered = considered;
  }
}
