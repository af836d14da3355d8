/**
 * `npm test`: the whole jest suite once per storage tier.
 *
 *   embedded  PGlite in memory (always)
 *   postgres  the server at SLIPWAY_TEST_DATABASE_URL, or a throwaway cluster started
 *             here when the PostgreSQL server binaries are installed (initdb)
 *
 * SLIPWAY_TEST_TIERS=embedded (or postgres) runs one tier. Arguments go to jest, so
 * `npm test -- test/waking.test.ts` runs one file on both tiers. Each tier prints jest's
 * own summary; the last lines sum them up. The exit code is non-zero if any tier failed
 * or the postgres tier was asked for and no server could be had.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { postgresAvailable, startPostgres, type ThrowawayPostgres } from './helpers/postgres.js';

type Tier = 'embedded' | 'postgres';
const asked = (process.env.SLIPWAY_TEST_TIERS ?? 'embedded,postgres').split(',').map((t) => t.trim()).filter(Boolean);
for (const t of asked) if (t !== 'embedded' && t !== 'postgres') throw new Error(`SLIPWAY_TEST_TIERS: unknown tier ${t} (embedded, postgres)`);
const explicit = process.env.SLIPWAY_TEST_TIERS !== undefined;
const jest = fileURLToPath(new URL('../node_modules/jest/bin/jest.js', import.meta.url));

function runJest(tier: Tier, env: NodeJS.ProcessEnv): Promise<number> {
  console.log(`\n== tier ${tier}: jest ${process.argv.slice(2).join(' ')}`.trimEnd());
  const child = spawn(process.execPath, ['--experimental-vm-modules', jest, ...process.argv.slice(2)], {
    stdio: 'inherit',
    env: { ...process.env, ...env, SLIPWAY_TEST_TIER: tier },
  });
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0))));
}

const results: Array<{ tier: Tier; result: string; ok: boolean }> = [];

if (asked.includes('embedded')) {
  const code = await runJest('embedded', {});
  results.push({ tier: 'embedded', result: code === 0 ? 'passed' : `failed (exit ${code})`, ok: code === 0 });
}

if (asked.includes('postgres')) {
  if (!postgresAvailable()) {
    // Not asked for by name: a machine without Postgres still runs the embedded tier.
    results.push({ tier: 'postgres', result: 'skipped: no SLIPWAY_TEST_DATABASE_URL and no initdb on this machine', ok: !explicit });
  } else {
    let pg: ThrowawayPostgres | undefined;
    try {
      pg = await startPostgres();
      const code = await runJest('postgres', { SLIPWAY_TEST_DATABASE_URL: pg.url });
      results.push({ tier: 'postgres', result: code === 0 ? 'passed' : `failed (exit ${code})`, ok: code === 0 });
    } catch (error) {
      results.push({ tier: 'postgres', result: `could not start: ${(error as Error).message}`, ok: false });
    } finally {
      await pg?.stop();
    }
  }
}

console.log('\n== slipway test tiers');
for (const r of results) console.log(`   ${r.tier.padEnd(9)} ${r.result}`);
process.exit(results.every((r) => r.ok) ? 0 : 1);
