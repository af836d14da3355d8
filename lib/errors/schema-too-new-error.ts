import { SlipwayError } from './slipway-error.js';

/**
 * The schema's migration ledger holds migrations this version of slipway does not know: a
 * newer slipway migrated it. The broker does not start, with `migrate: true` or `false`, and
 * nothing was written: an older version running on a newer schema could undo or misread
 * what the newer one relies on. Run the version that migrated it (or a later one), or give
 * this one a schema of its own.
 */
export class SchemaTooNewError extends SlipwayError {
  readonly schema: string;
  /** The highest migration id this version of slipway knows. */
  readonly latestKnown: number;
  /** The highest migration id in the schema's ledger. */
  readonly latestApplied: number;
  /** The ledger's migrations that this version does not know, by id. */
  readonly unknown: Array<{ id: number; name: string }>;
  constructor(schema: string, latestKnown: number, latestApplied: number, unknown: Array<{ id: number; name: string }>) {
    const listed = unknown.map((m) => `${m.id} (${m.name})`).join(', ');
    super(
      'SCHEMA_TOO_NEW',
      `schema ${JSON.stringify(schema)} was migrated by a newer slipway: it is at migration ${latestApplied} and this version knows migrations up to ${latestKnown}; ` +
        `its ledger holds migration${unknown.length > 1 ? 's' : ''} ${listed}, unknown to this version. Nothing was written; run the slipway that migrated it (or a later one), or give this one another schema`,
    );
    this.schema = schema;
    this.latestKnown = latestKnown;
    this.latestApplied = latestApplied;
    this.unknown = unknown;
  }
}
