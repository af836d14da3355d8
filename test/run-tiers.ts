/**
 * `npm test`: the whole jest suite once per storage tier.
 *
 *   embedded  PGlite in memory (always)
 *   postgres  the server at SLIPWAY_TEST_DATABASE_URL, or a throwaway cluster started
 *             here when the PostgreSQL server binaries are installed (initdb)
 *
 * SLIPWAY_TEST_TIERS=embedded (or postgres) runs one tier. Arguments go to jest, so
 * `npm test -- test/waking.test.ts` runs one file on both tiers.
 *
 * The two tiers run at the same time, each in its own jest process: the embedded tier
 * spends its time in PGlite (one core), the postgres tier mostly waits on the server, so
 * together they take little longer than the embedded tier alone. The embedded tier prints
 * as it goes; the postgres tier's output is held and printed whole once the embedded tier
 * is done (a line says how far it is meanwhile), so the two never interleave.
 * SLIPWAY_TEST_SERIAL=1 runs them one after the other instead.
 *
 * A tier whose jest has not exited 60 s after it wrote its report (a test left a process or
 * handle open) is stopped and counts as failed.
 *
 * Each tier prints jest's own summary; the last line adds them up as
 * `tests: N passed, N failed, N skipped`. The exit code is non-zero if any tier failed or
 * the postgres tier was asked for and no server could be had.
 */
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { postgresAvailable, startPostgres, type ThrowawayPostgres } from './helpers/postgres.js';

type Tier = 'embedded' | 'postgres';
type Counts = { passed: number; failed: number; skipped: number };
type Outcome = { tier: Tier; result: string; ok: boolean; counts?: Counts };

const asked = (process.env.SLIPWAY_TEST_TIERS ?? 'embedded,postgres').split(',').map((t) => t.trim()).filter(Boolean);
for (const t of asked) if (t !== 'embedded' && t !== 'postgres') throw new Error(`SLIPWAY_TEST_TIERS: unknown tier ${t} (embedded, postgres)`);
const explicit = process.env.SLIPWAY_TEST_TIERS !== undefined;
const serial = Boolean(process.env.SLIPWAY_TEST_SERIAL) && process.env.SLIPWAY_TEST_SERIAL !== '0';
const jest = fileURLToPath(new URL('../node_modules/jest/bin/jest.js', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'slipway-test-tiers-'));
const EMBEDDED_WORKERS = Number(process.env.SLIPWAY_TEST_EMBEDDED_WORKERS ?? 2);
/** How long jest may take to exit after it wrote its report. */
const EXIT_GRACE_MS = 60_000;
/** The tiers whose jest was stopped for not exiting. */
const hung = new Set<Tier>();

/** jest's own counts for a tier, from the JSON report it wrote beside its usual output. */
function countsOf(tier: Tier): Counts | undefined {
  try {
    const report = JSON.parse(readFileSync(join(scratch, `${tier}.json`), 'utf8')) as { numPassedTests: number; numFailedTests: number; numPendingTests: number; numTodoTests: number };
    return { passed: report.numPassedTests, failed: report.numFailedTests, skipped: report.numPendingTests + report.numTodoTests };
  } catch {
    return undefined;
  }
}

/**
 * One jest process for `tier`. `held`: its output goes to a file, printed by the caller
 * later, instead of to this terminal.
 */
function runJest(tier: Tier, env: NodeJS.ProcessEnv, held: boolean): { done: Promise<number>; output?: string } {
  const header = `\n== tier ${tier}: jest ${process.argv.slice(2).join(' ')}`.trimEnd();
  const given = process.argv.slice(2);
  // The embedded tier waits on real clocks and child processes as much as it computes: two
  // jest workers keep both cores busy beside the postgres tier. Arguments that choose
  // the workers themselves win.
  const chooses = given.some((a) => /^(-w|--maxWorkers|-i|--runInBand)(=|$)/.test(a));
  const workers = tier === 'embedded' && !chooses ? [`--maxWorkers=${EMBEDDED_WORKERS}`] : [];
  const args = ['--experimental-vm-modules', jest, '--json', `--outputFile=${join(scratch, `${tier}.json`)}`, ...workers, ...given];
  const output = held ? join(scratch, `${tier}.log`) : undefined;
  if (!held) console.log(header);
  const child = spawn(process.execPath, args, { stdio: held ? ['ignore', 'pipe', 'pipe'] : 'inherit', env: { ...process.env, ...env, SLIPWAY_TEST_TIER: tier } });
  const file = output ? createWriteStream(output) : undefined;
  if (file) {
    file.write(`${header}\n`);
    child.stdout!.pipe(file, { end: false });
    child.stderr!.pipe(file, { end: false });
    child.on('close', () => file.end());
  }
  // A test that leaves a process or handle open keeps jest from exiting after it wrote its
  // report: stop it then, rather than hang until the CI's time limit with nothing printed.
  const report = join(scratch, `${tier}.json`);
  let reportSeenAt: number | undefined;
  const watchdog = setInterval(() => {
    if (reportSeenAt === undefined) {
      if (existsSync(report)) reportSeenAt = Date.now();
      return;
    }
    if (Date.now() - reportSeenAt < EXIT_GRACE_MS) return;
    clearInterval(watchdog);
    hung.add(tier);
    const say = `\n== tier ${tier}: jest wrote its results but had not exited ${EXIT_GRACE_MS / 1000} s later (a test left a process or handle open): stopped\n`;
    if (file) file.write(say);
    else console.log(say);
    child.kill('SIGKILL');
  }, 1_000);
  watchdog.unref();
  const done = new Promise<number>((resolve) => {
    child.on('close', (code, signal) => {
      clearInterval(watchdog);
      resolve(code ?? (signal ? 1 : 0));
    });
    // Stopped: a process it left may still hold its output open.
    child.on('exit', () => {
      if (hung.has(tier)) setTimeout(() => resolve(1), 1_000);
    });
  });
  return { done, output };
}

function outcome(tier: Tier, code: number): Outcome {
  if (hung.has(tier)) return { tier, result: 'failed (jest did not exit: a test left a process or handle open)', ok: false, counts: countsOf(tier) };
  return { tier, result: code === 0 ? 'passed' : `failed (exit ${code})`, ok: code === 0, counts: countsOf(tier) };
}

async function runEmbedded(held: boolean): Promise<{ outcome: Promise<Outcome>; output?: string }> {
  const run = runJest('embedded', {}, held);
  return { outcome: run.done.then((code) => outcome('embedded', code)), output: run.output };
}

async function runPostgres(held: boolean): Promise<{ outcome: Promise<Outcome>; output?: string }> {
  if (!postgresAvailable()) {
    // Not asked for by name: a machine without Postgres still runs the embedded tier.
    return { outcome: Promise.resolve({ tier: 'postgres', result: 'skipped: no SLIPWAY_TEST_DATABASE_URL and no initdb on this machine', ok: !explicit }) };
  }
  let pg: ThrowawayPostgres;
  try {
    pg = await startPostgres();
  } catch (error) {
    return { outcome: Promise.resolve({ tier: 'postgres', result: `could not start: ${(error as Error).message}`, ok: false }) };
  }
  const run = runJest('postgres', { SLIPWAY_TEST_DATABASE_URL: pg.url }, held);
  const result = run.done.then(async (code) => {
    await pg.stop();
    return outcome('postgres', code);
  });
  return { outcome: result, output: run.output };
}

// dist/ once, before the tiers: the CLI tests run the built bin, and a build of their own
// in one tier would empty dist/ under the other's.
console.log('== building dist/ (npm run build) for the tests that run the built bin');
const build = spawnSync('npm', ['run', 'build', '--silent'], { stdio: 'inherit', cwd: fileURLToPath(new URL('..', import.meta.url)) });
if (build.status !== 0) {
  console.log('tests: 0 passed, 1 failed, 0 skipped');
  process.exit(1);
}
process.env.SLIPWAY_TEST_DIST_BUILT = '1';

const outcomes: Outcome[] = [];
const both = asked.includes('embedded') && asked.includes('postgres');
try {
  if (both && !serial) {
    // The postgres tier starts first (its cluster takes a moment) and is held; the embedded tier prints live.
    const postgres = await runPostgres(true);
    const embedded = await runEmbedded(false);
    let postgresDone = false;
    void postgres.outcome.then(() => (postgresDone = true));
    outcomes.push(await embedded.outcome);
    if (!postgresDone) console.log('\n== tier postgres: still running; its output follows when it is done');
    const pg = await postgres.outcome;
    if (postgres.output) process.stdout.write(readFileSync(postgres.output, 'utf8'));
    outcomes.push(pg);
  } else {
    if (asked.includes('embedded')) outcomes.push(await (await runEmbedded(false)).outcome);
    if (asked.includes('postgres')) outcomes.push(await (await runPostgres(false)).outcome);
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

console.log('\n== slipway test tiers');
for (const r of outcomes) {
  const counts = r.counts ? `: ${r.counts.passed} passed, ${r.counts.failed} failed, ${r.counts.skipped} skipped` : '';
  console.log(`   ${r.tier.padEnd(9)} ${r.result}${counts}`);
}
const total = outcomes.reduce((sum, r) => ({ passed: sum.passed + (r.counts?.passed ?? 0), failed: sum.failed + (r.counts?.failed ?? 0), skipped: sum.skipped + (r.counts?.skipped ?? 0) }), { passed: 0, failed: 0, skipped: 0 });
// A tier that failed with no failed test in a report (it could not start, jest crashed or did not exit) still counts as a failure.
const unreported = outcomes.filter((r) => !r.ok && !r.counts?.failed).length;
console.log(`tests: ${total.passed} passed, ${total.failed + unreported} failed, ${total.skipped} skipped`);
process.exit(outcomes.every((r) => r.ok) ? 0 : 1);
