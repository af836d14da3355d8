/**
 * Every code sample of the README is a file that runs: each ```ts block is exactly the
 * content of the file its marker names (see helpers/readme-samples.ts), and each sample
 * program exits 0 on the real clock, importing `slipway` by name (tsconfig `paths` map the
 * name to the sources here; test/package.test.ts compiles them against the packed
 * package). The jest sample and its config run in test/package.test.ts, from the tarball.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { readmeSamples, repoRoot } from './helpers/readme-samples.js';
import { sshdUnavailable, startSshd } from './helpers/sshd.js';
import { tier, tierUrl } from './helpers/tier.js';

const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
const { samples, unmarked, errors } = readmeSamples(readme);

/** Samples that need a PostgreSQL server: run on the postgres tier, with its server. */
const ON_POSTGRES = new Set(['examples/readme/postgres.ts', 'examples/readme/typeorm.ts']);
/** Samples that reach ssh hosts: run against a throwaway sshd (test/helpers/sshd.ts), where one can run. */
const ON_SSHD = new Set(['examples/readme/ssh-hosts.ts']);
const programs = samples.filter((s) => s.lang === 'ts' && !s.file.endsWith('.test.ts')).map((s) => s.file);
/** And `npm run example`, the README's first command for a clone. */
const QUICKSTART = 'examples/quickstart.ts';

function run(file: string, env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', file], { cwd: repoRoot, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    child.on('error', reject);
    child.on('exit', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

async function expectRuns(file: string, env?: NodeJS.ProcessEnv): Promise<void> {
  const result = await run(file, env);
  if (result.code !== 0) throw new Error(`${file} exited with ${result.code ?? result.signal}\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`);
  expect(result.stdout).not.toBe('');
}

describe('the README is in sync with its sample files', () => {
  test('every marker is followed by a block, and every ts block has a marker', () => {
    expect(errors).toEqual([]);
    expect(unmarked.map((line) => `README.md line ${line}: a \`\`\`ts block without a <!-- sample: ... --> marker`)).toEqual([]);
    expect(programs).toEqual(expect.arrayContaining(['examples/readme/use.ts', 'examples/readme/blueprint.ts', 'examples/readme/postgres.ts', 'examples/readme/local-hosts.ts', 'examples/readme/ssh-hosts.ts']));
  });

  test("the README opens with the contributor's two commands, then the user's npm install", () => {
    // The first code block: exactly `npm run example` and `npm test` (what .ci/run runs too).
    const blocks = [...readme.matchAll(/```(\w*)\n([\s\S]*?)```/g)];
    const commands = blocks[0]![2]!.trim().split('\n').map((line) => line.replace(/#.*/, '').trim());
    expect(commands).toEqual(['npm ci && npm run example', 'npm test']);
    expect(readme.slice(0, blocks[0]!.index).split('\n').filter((l) => l.startsWith('#'))).toEqual(['# slipway']);
    // Right after them, the user's install section.
    const afterCommands = readme.slice(blocks[0]!.index! + blocks[0]![0].length);
    expect(afterCommands.trimStart().split('\n')[0]).toBe('## Install');
    expect(blocks[1]![2]!.trim()).toBe('npm install slipway');
    // CI runs the same command, with the long runs at full size (issue 11).
    expect(readFileSync(join(repoRoot, '.ci/run'), 'utf8')).toMatch(/^(SLIPWAY_TEST_LONG=1 )?npm test$/m);
  });

  test.each(samples.map((s) => [s.file, s] as const))('%s is the README block verbatim', (file, sample) => {
    const content = readFileSync(join(repoRoot, file), 'utf8');
    if (sample.code !== content) {
      throw new Error(`README.md line ${sample.line} differs from ${file}: edit the file, then run \`npx tsx test/helpers/readme-samples.ts --write\``);
    }
  });
});

// The programs do not use the tier's database: each one runs once, on the tier it needs.
const describeEmbedded = tier === 'embedded' ? describe : describe.skip;
const describePostgres = tier === 'postgres' ? describe : describe.skip;

describeEmbedded('each README program, and the quickstart, exits 0', () => {
  // Concurrently: each is a process of its own.
  test.concurrent.each([...programs.filter((f) => !ON_POSTGRES.has(f) && !ON_SSHD.has(f)), QUICKSTART])('%s', async (file) => {
    await expectRuns(file);
  }, 120_000);

  const sshdMissing = sshdUnavailable();
  if (sshdMissing) console.warn(`README samples on ssh hosts skipped: sshd cannot run on this machine: ${sshdMissing}`);
  (sshdMissing ? test.concurrent.skip : test.concurrent).each([...ON_SSHD])('%s, against a throwaway sshd', async (file) => {
    const sshd = await startSshd();
    try {
      await expectRuns(file, { BUILD_HOST: sshd.host, BUILD_PORT: String(sshd.port), BUILD_USER: sshd.user, BUILD_KEY: sshd.identityFile, BUILD_KNOWN_HOSTS: sshd.knownHostsFile });
    } finally {
      await sshd.stop();
    }
  }, 120_000);
});

describePostgres('each README program on PostgreSQL exits 0', () => {
  // The sample names its schema `slipway`: start from none, and leave none behind.
  const dropSchema = async () => {
    const client = new pg.Client({ connectionString: tierUrl });
    await client.connect();
    try {
      await client.query('DROP SCHEMA IF EXISTS slipway CASCADE');
    } finally {
      await client.end();
    }
  };
  beforeAll(dropSchema);
  afterAll(dropSchema);

  test.each([...ON_POSTGRES])('%s', async (file) => {
    await expectRuns(file, { SLIPWAY_DATABASE_URL: tierUrl });
  }, 120_000);
});
