import { basename } from 'node:path';
import type { DatabaseOptions } from '../../lib/store/open.js';

/**
 * The storage tier this jest run tests: `embedded` (PGlite in memory, the default) or
 * `postgres` (the server at SLIPWAY_TEST_DATABASE_URL; `npm test` starts a throwaway
 * one). `test/run-tiers.ts` runs the whole suite once per tier.
 */
export const tier: 'embedded' | 'postgres' = process.env.SLIPWAY_TEST_TIER === 'postgres' ? 'postgres' : 'embedded';

/** The server of the postgres tier; undefined on the embedded tier. */
export const tierUrl: string | undefined = tier === 'postgres' ? process.env.SLIPWAY_TEST_DATABASE_URL : undefined;
if (tier === 'postgres' && !tierUrl) throw new Error('SLIPWAY_TEST_TIER=postgres needs SLIPWAY_TEST_DATABASE_URL (npm test sets both)');

/**
 * The long runs (`SLIPWAY_TEST_LONG=1`, which `.ci/run` sets): the property tests' full run
 * counts and the 10,000-cycle growth test. A plain `npm test` runs fewer, so that the whole
 * suite stays within minutes on a 2-core machine; every assertion is the same either way.
 */
export const longRuns: boolean = Boolean(process.env.SLIPWAY_TEST_LONG) && process.env.SLIPWAY_TEST_LONG !== '0';

let counter = 0;

/** A schema name no other broker of this run uses: test file, process and a counter. */
export function freshSchema(label = ''): string {
  const file = basename(expect.getState().testPath ?? 'test').replace(/\.test\.ts$/, '').replace(/[^a-z0-9]/gi, '_').toLowerCase();
  return `t_${file}_${label ? `${label}_` : ''}${process.pid}_${++counter}`.slice(0, 63);
}

/**
 * Database options for a fresh, empty database on this tier: on embedded, a new
 * in-memory PGlite (the default); on postgres, a new schema on the tier's server.
 */
export function testDatabase(label = ''): DatabaseOptions | undefined {
  return tierUrl ? { url: tierUrl, schema: freshSchema(label), poolSize: 4 } : undefined;
}

/** `describe` on the postgres tier only (multi-process, server restarts, connection checks). */
export const describeOnPostgres = tier === 'postgres' ? describe : describe.skip;
/** `describe` on the embedded tier only (PGlite data directories, the embedded driver). */
export const describeOnEmbedded = tier === 'embedded' ? describe : describe.skip;
