import { SlipwayError } from './slipway-error.js';

/**
 * `database.migrate` is false and the schema is not ready for this version of slipway: it
 * does not exist, or migrations are missing from its ledger. Nothing was written; run one
 * broker with migrations (the default) first, e.g. as a deploy step with a role that may
 * run DDL.
 */
export class SchemaNotMigratedError extends SlipwayError {
  readonly schema: string;
  /** Ids of the migrations this version needs that the schema's ledger lacks (all of them when the schema is missing). */
  readonly missing: number[];
  constructor(schema: string, problem: string, missing: number[]) {
    super(
      'SCHEMA_NOT_MIGRATED',
      `database.migrate is false and schema ${JSON.stringify(schema)} ${problem}; start one broker with migrate: true (the default) on this schema first, with a role that may create it`,
    );
    this.schema = schema;
    this.missing = missing;
  }
}
