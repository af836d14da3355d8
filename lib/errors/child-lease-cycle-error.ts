import { SlipwayError } from './slipway-error.js';

/**
 * A blueprint's resource asked for a child lease that only a blueprint already in its
 * own parent chain could serve (A's resource takes a B, whose resource takes an A), or
 * child leases nest deeper than the library allows. Every lease of the chain breaks
 * with this message; `chain` names the blueprints from the top.
 */
export class ChildLeaseCycleError extends SlipwayError {
  readonly chain: string[];
  constructor(chain: string[], message = `child lease cycle: ${chain.join(' → ')}`) {
    super('CHILD_LEASE_CYCLE', message);
    this.chain = chain;
  }
}
