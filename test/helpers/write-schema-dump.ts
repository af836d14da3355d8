/**
 * `npm run schema:dump`: writes lib/store/schema.sql, the schema `slipway` as the migrations
 * leave it, from a fresh in-memory PGlite. Run it after adding or changing a migration and
 * commit the result, so that the schema change shows in review; test/schema-dump.test.ts
 * fails until the two agree.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { openDatabase } from '../../lib/store/open.js';
import { dumpSchema, SCHEMA_SQL } from './schema-dump.js';

const db = await openDatabase({ embedded: true, schema: 'slipway' });
try {
  const dump = await dumpSchema(db, 'slipway');
  let before = '';
  try {
    before = readFileSync(SCHEMA_SQL, 'utf8');
  } catch {
    // the first dump
  }
  writeFileSync(SCHEMA_SQL, dump);
  console.log(`${fileURLToPath(SCHEMA_SQL)}: ${before === dump ? 'unchanged' : 'written'}`);
} finally {
  await db.close();
}
