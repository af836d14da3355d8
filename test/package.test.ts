/**
 * The package as a user gets it: `npm pack` of a copy of this working tree (its prepack
 * builds a clean dist), then a consumer project that has nothing but the tarball and the
 * tarball's own dependencies (plus what a Node TypeScript project has anyway: @types/node,
 * and for the jest example jest, ts-jest and @types/jest).
 *
 * `npm install --offline` cannot work here (the npm cache holds tarballs, not the registry's
 * metadata), so the consumer's node_modules is built the way npm would lay it out: the
 * tarball unpacked as node_modules/slipway, and each package of its `dependencies` linked
 * from this repository's node_modules. A dependency missing from package.json is then
 * missing in the consumer too, as it would be for a user (that is how TS7016 showed).
 *
 * Runs on the embedded tier only: nothing here uses the tier's database.
 */
import { execFile } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import { readmeSamples, repoRoot } from './helpers/readme-samples.js';
import { tier } from './helpers/tier.js';

const run = promisify(execFile);
/** What an application that traces installs beside @opentelemetry/api: its SDK (the README's tracing sample sets one up). */
const OTEL_SDK = ['@opentelemetry/sdk-trace-base', '@opentelemetry/context-async-hooks'];
const repoModules = realpathSync(join(repoRoot, 'node_modules'));
const describeEmbedded = tier === 'embedded' ? describe : describe.skip;

interface PackResult {
  filename: string;
  files: Array<{ path: string }>;
}

let work: string;
let stage: string;
let consumer: string;
let pack: PackResult;
let dryRun: PackResult;
let shipped: Set<string>;
let packageJson: { dependencies: Record<string, string>; peerDependencies: Record<string, string>; peerDependenciesMeta?: Record<string, { optional?: boolean }>; exports: Record<string, Record<string, string>>; bin?: Record<string, string>; repository?: unknown; license?: string };

/** Runs a command; on failure the error carries its output. */
async function sh(file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<{ stdout: string; stderr: string }> {
  try {
    return await run(file, args, { cwd, env: { ...process.env, ...env }, maxBuffer: 64 * 1024 * 1024, timeout: 240_000 });
  } catch (error) {
    const e = error as Error & { stdout?: string; stderr?: string };
    throw new Error(`${file} ${args.join(' ')} failed in ${cwd}: ${e.message}\n--- stdout\n${e.stdout ?? ''}\n--- stderr\n${e.stderr ?? ''}`);
  }
}

/** Links `name` from this repository's node_modules into `modules`, as npm would have installed it. */
function link(modules: string, name: string): void {
  const target = join(modules, name);
  mkdirSync(dirname(target), { recursive: true });
  symlinkSync(realpathSync(join(repoModules, name)), target);
}

beforeAll(async () => {
  if (tier !== 'embedded') return;
  work = mkdtempSync(join(tmpdir(), 'slipway-package-'));
  // A copy of the working tree as git would clone it (uncommitted edits included), so the
  // pack starts without a dist/ and a stale file cannot slip in.
  stage = join(work, 'repo');
  const { stdout } = await sh('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], repoRoot);
  for (const file of stdout.split('\0').filter(Boolean)) {
    if (file === 'node_modules' || !existsSync(join(repoRoot, file))) continue;
    mkdirSync(dirname(join(stage, file)), { recursive: true });
    cpSync(join(repoRoot, file), join(stage, file));
  }
  symlinkSync(repoModules, join(stage, 'node_modules'));
  pack = JSON.parse((await sh('npm', ['pack', '--json', '--pack-destination', work], stage)).stdout)[0];
  dryRun = JSON.parse((await sh('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], stage)).stdout)[0];
  shipped = new Set(dryRun.files.map((f) => f.path));

  consumer = join(work, 'consumer');
  const slipway = join(consumer, 'node_modules', 'slipway');
  mkdirSync(slipway, { recursive: true });
  await sh('tar', ['xzf', join(work, pack.filename), '-C', slipway, '--strip-components=1'], work);
  packageJson = JSON.parse(readFileSync(join(slipway, 'package.json'), 'utf8'));
  for (const name of Object.keys(packageJson.dependencies)) link(join(consumer, 'node_modules'), name);
  // A consumer that uses slipway/metrics and slipway/tracing installs their optional peers, as npm tells it to.
  for (const name of Object.keys(packageJson.peerDependencies)) link(join(consumer, 'node_modules'), name);
  for (const name of ['@types/node', 'typescript', 'jest', 'ts-jest', '@types/jest', ...OTEL_SDK]) link(join(consumer, 'node_modules'), name);
  writeFileSync(join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }, null, 2));
}, 300_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describeEmbedded('the packed package', () => {
  test('npm pack --dry-run: the library, its types and maps, LICENSE, CHANGELOG, README and package.json; nothing else', () => {
    expect(dryRun.files.map((f) => f.path).sort()).toEqual(pack.files.map((f) => f.path).sort());
    for (const file of ['LICENSE', 'CHANGELOG.md', 'README.md', 'package.json']) expect(shipped).toContain(file);
    expect([...shipped].filter((f) => !f.startsWith('dist/') && !['LICENSE', 'CHANGELOG.md', 'README.md', 'package.json'].includes(f))).toEqual([]);
    for (const [entry, conditions] of Object.entries(packageJson.exports)) {
      expect(Object.keys(conditions)).toEqual(['types', 'default']);
      for (const target of Object.values(conditions)) expect([entry, shipped.has(target.replace(/^\.\//, ''))]).toEqual([entry, true]);
    }
    expect([...shipped].filter((f) => /\.test\.|^dist\/(test|examples|bench)\//.test(f))).toEqual([]);
  });

  test('LICENSE is the MIT license of package.json, and package.json names its repository', () => {
    expect(packageJson.license).toBe('MIT');
    const license = readFileSync(join(consumer, 'node_modules/slipway/LICENSE'), 'utf8');
    expect(license).toMatch(/^MIT License\n\nCopyright \(c\) \d{4} the slipway authors\n/);
    expect(packageJson.repository).toEqual({ type: 'git', url: expect.stringMatching(/^git\+https:\/\//) });
  });

  test('every source map carries its sources and points inside the package; every sourceMappingURL names a shipped map', () => {
    const root = join(consumer, 'node_modules/slipway');
    const maps = [...shipped].filter((f) => f.endsWith('.map'));
    expect(maps.length).toBeGreaterThan(10);
    const problems: string[] = [];
    for (const file of maps) {
      const map = JSON.parse(readFileSync(join(root, file), 'utf8')) as { sources: string[]; sourcesContent?: Array<string | null>; sourceRoot?: string };
      map.sources.forEach((source, i) => {
        const path = resolve(dirname(join(root, file)), map.sourceRoot ?? '', source);
        if (isAbsolute(source) || relative(root, path).startsWith('..')) problems.push(`${file}: source ${source} is outside the package`);
        if (typeof map.sourcesContent?.[i] !== 'string' || map.sourcesContent[i] === '') problems.push(`${file}: source ${source} is not embedded`);
      });
    }
    for (const file of [...shipped].filter((f) => f.endsWith('.js'))) {
      const url = /\/\/# sourceMappingURL=(\S+)\s*$/.exec(readFileSync(join(root, file), 'utf8'))?.[1];
      if (url && !shipped.has(join(dirname(file), url))) problems.push(`${file}: sourceMappingURL ${url} is not in the package`);
    }
    expect(problems).toEqual([]);
  });

  test('README links: none leaves the repository, each target exists, and one the package lacks is said to be in the repository', () => {
    const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
    const paragraphs = readme.split(/\n\s*\n/);
    const problems: string[] = [];
    for (const paragraph of paragraphs) {
      for (const [, target] of paragraph.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^(https?:|mailto:|#)/.test(target!)) continue;
        const path = target!.replace(/#.*$/, '');
        const absolute = resolve(repoRoot, path);
        if (isAbsolute(path) || relative(repoRoot, absolute).startsWith('..')) {
          problems.push(`${target}: outside the repository`);
          continue;
        }
        if (!existsSync(absolute)) {
          problems.push(`${target}: no such file in the repository`);
          continue;
        }
        const inPackage = statSync(absolute).isDirectory() ? [...shipped].some((f) => f.startsWith(`${relative(repoRoot, absolute)}/`)) : shipped.has(relative(repoRoot, absolute));
        if (!inPackage && !/\bin the repository\b/.test(paragraph)) problems.push(`${target}: not in the package, and its paragraph does not say it is in the repository`);
      }
    }
    expect(problems).toEqual([]);
  });

  test('require() and import() of every entry point work (Node >= 20.19 loads ES modules from CommonJS)', async () => {
    writeFileSync(
      join(consumer, 'entries.cjs'),
      `const names = { slipway: 'createBroker', 'slipway/blueprints': 'localHosts', 'slipway/testing': 'createTestBroker', 'slipway/metrics': 'slipwayMetrics', 'slipway/tracing': 'slipwayTracing', 'slipway/dashboard': 'createDashboard' };
       for (const [entry, name] of Object.entries(names)) if (typeof require(entry)[name] !== 'function') throw new Error(entry + ': no ' + name);
       Promise.all(Object.entries(names).map(([entry, name]) => import(entry).then((m) => { if (typeof m[name] !== 'function') throw new Error(entry); })))
         .then(() => console.log('ok'));`,
    );
    const { stdout, stderr } = await sh(process.execPath, ['entries.cjs'], consumer);
    expect(stdout.trim()).toBe('ok');
    expect(stderr).toBe('');
  });
});

describeEmbedded('prom-client and @opentelemetry/api, optional peer dependencies', () => {
  test('without them installed, every entry point loads, and slipwayMetrics() and slipwayTracing() say which package to install', async () => {
    expect(packageJson.peerDependencies).toEqual({ 'prom-client': expect.stringMatching(/^\^15/), '@opentelemetry/api': expect.stringMatching(/^\^1\./) });
    expect(packageJson.peerDependenciesMeta).toEqual({ 'prom-client': { optional: true }, '@opentelemetry/api': { optional: true } });
    expect(Object.keys(packageJson.dependencies)).not.toContain('prom-client');
    expect(Object.keys(packageJson.dependencies)).not.toContain('@opentelemetry/api');
    const project = join(work, 'no-prom-client');
    const slipway = join(project, 'node_modules', 'slipway');
    mkdirSync(slipway, { recursive: true });
    await sh('tar', ['xzf', join(work, pack.filename), '-C', slipway, '--strip-components=1'], work);
    for (const name of Object.keys(packageJson.dependencies)) link(join(project, 'node_modules'), name);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'no-prom-client', private: true, type: 'module' }, null, 2));
    writeFileSync(
      join(project, 'probe.js'),
      `for (const entry of ['slipway', 'slipway/blueprints', 'slipway/testing', 'slipway/dashboard']) await import(entry);
       const { slipwayMetrics } = await import('slipway/metrics');
       try { slipwayMetrics({}); console.log('no error'); } catch (error) { console.log(error.code + ': ' + error.message); }
       const { slipwayTracing } = await import('slipway/tracing');
       try { slipwayTracing({}); console.log('no error'); } catch (error) { console.log(error.code + ': ' + error.message); }`,
    );
    const { stdout, stderr } = await sh(process.execPath, ['probe.js'], project);
    expect(stdout.trim().split('\n')).toEqual([
      'MISSING_PEER_DEPENDENCY: slipway/metrics needs the package prom-client (^15), which is not installed: npm install prom-client',
      'MISSING_PEER_DEPENDENCY: slipway/tracing needs the package @opentelemetry/api (^1.3.0), which is not installed: npm install @opentelemetry/api',
    ]);
    expect(stderr).toBe('');
  }, 60_000);
});

describeEmbedded('the slipway bin of the package', () => {
  test('package.json names a shipped bin with a node shebang; npx slipway runs it in a project that installed the package', async () => {
    expect(packageJson.bin).toEqual({ slipway: './dist/lib/cli/main.js' });
    const bin = packageJson.bin!.slipway!.replace(/^\.\//, '');
    expect(shipped).toContain(bin);
    expect(readFileSync(join(consumer, 'node_modules/slipway', bin), 'utf8')).toMatch(/^#!\/usr\/bin\/env node\n/);
    // As npm's install does (bin-links): node_modules/.bin/slipway, and the target made executable.
    mkdirSync(join(consumer, 'node_modules/.bin'), { recursive: true });
    symlinkSync(join('..', 'slipway', bin), join(consumer, 'node_modules/.bin/slipway'));
    chmodSync(join(consumer, 'node_modules/slipway', bin), 0o755);

    const npx = (...args: string[]) => sh('npx', ['--offline', '--no-install', 'slipway', ...args], consumer, { NO_COLOR: '1' });
    expect((await npx('--version')).stdout.trim()).toBe(JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')).version);
    const dataDir = join(work, 'cli-data');
    expect(JSON.parse((await npx('migrate', '--data-dir', dataDir, '--json')).stdout)).toEqual({ schema: dataDir, version: expect.any(Number), applied: expect.any(Array) });
    expect(JSON.parse((await npx('leases', '--data-dir', dataDir, '--json')).stdout)).toEqual([]);
    const bad = await npx('leases', '--data-dir', dataDir, '--status', 'weird').catch((e: Error) => e);
    expect(bad instanceof Error ? bad.message : '').toMatch(/--- stderr\nslipway: --status: "weird" is not a status[^\n]*\n$/);
  }, 120_000);
});

/** A type probe: luxon's types are there (not any), whoever installed them. */
const TYPES_PROBE = `import type { LeaseRecord, Lease } from 'slipway';
type IsAny<T> = 0 extends 1 & T ? true : false;
declare const record: LeaseRecord;
declare const lease: Lease;
const createdAtIsAny: IsAny<LeaseRecord['createdAt']> = false;
const expiresAtIsAny: IsAny<NonNullable<Lease['expiresAt']>> = false;
// @ts-expect-error a DateTime is no number: with luxon's types missing it would be any, and this line would compile
const millis: number = record.createdAt;
const iso: string | null = record.createdAt.toISO();
export { createdAtIsAny, expiresAtIsAny, millis, iso, lease };
`;

/**
 * Copies the README samples and the type probe into `project/src` and runs tsc there, strict and
 * with skipLibCheck false. examples/readme/typed-attributes.ts holds `@ts-expect-error`
 * lines, which tsc reports as unused if the lease attributes ever stop being typed.
 */
async function compileSamples(project: string): Promise<void> {
  const src = join(project, 'src');
  mkdirSync(src, { recursive: true });
  for (const file of readdirSync(join(repoRoot, 'examples/readme'))) cpSync(join(repoRoot, 'examples/readme', file), join(src, file));
  expect(readFileSync(join(src, 'typed-attributes.ts'), 'utf8')).toMatch(/@ts-expect-error[^\n]*\n[^\n]*lease\.attributes\.slot/);
  writeFileSync(join(src, 'types-probe.ts'), TYPES_PROBE);
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify(
      {
        compilerOptions: {
          target: 'ES2022',
          lib: ['ES2023', 'ESNext.Disposable'],
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          skipLibCheck: false,
          types: ['node'],
          outDir: 'out',
        },
        include: ['src'],
      },
      null,
      2,
    ),
  );
  const tsc = await sh(process.execPath, [join(repoModules, 'typescript/bin/tsc'), '-p', '.'], project).catch((e: Error) => e);
  expect(tsc instanceof Error ? tsc.message : '').toBe('');
}

// The three run at once: each is mostly a child process.
describeEmbedded('a TypeScript consumer of the package', () => {
  test.concurrent('compiles the README samples, typed attributes included, and a type probe with skipLibCheck: false (no TS7016; DateTime is not any), and the compiled first sample runs', async () => {
    await compileSamples(consumer);
    expect(readmeSamples(readFileSync(join(repoRoot, 'README.md'), 'utf8')).samples.map((s) => s.file)).toEqual(expect.arrayContaining(['examples/readme/use.ts', 'examples/readme/typed-attributes.ts']));
    const { stdout } = await sh(process.execPath, ['out/use.js'], consumer);
    expect(stdout).toMatch(/^0 git version/);
  }, 180_000);

  test.concurrent('compiles the same without @types/luxon among its own packages: slipway\'s dependencies nested under it, as pnpm lays them out', async () => {
    // Only slipway and what any Node TypeScript project has at the top; luxon and its
    // types are slipway's own business, reachable from its files only.
    const project = join(work, 'strict-consumer');
    const slipway = join(project, 'node_modules', 'slipway');
    mkdirSync(slipway, { recursive: true });
    await sh('tar', ['xzf', join(work, pack.filename), '-C', slipway, '--strip-components=1'], work);
    for (const name of Object.keys(packageJson.dependencies)) link(join(slipway, 'node_modules'), name);
    link(join(project, 'node_modules'), '@types/node');
    // The TypeORM sample is the app's own code on its own DataSource: the app depends on typeorm.
    link(join(project, 'node_modules'), 'typeorm');
    // The metrics sample makes the app's own registry: the app depends on prom-client, slipway's optional peer.
    link(join(project, 'node_modules'), 'prom-client');
    // The tracing sample sets up the app's own SDK: the app depends on the OTel API (slipway's optional peer) and SDK.
    for (const name of ['@opentelemetry/api', ...OTEL_SDK]) link(join(project, 'node_modules'), name);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'strict-consumer', private: true, type: 'module', dependencies: { slipway: '*' } }, null, 2));
    expect(existsSync(join(project, 'node_modules/@types/luxon'))).toBe(false);
    expect(existsSync(join(project, 'node_modules/luxon'))).toBe(false);
    await compileSamples(project);
  }, 180_000);

  test.concurrent('the jest example runs twice with the README jest config verbatim, matching its inline snapshot each time', async () => {
    const dir = join(consumer, 'jest');
    cpSync(join(repoRoot, 'examples/jest'), dir, { recursive: true });
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { target: 'ES2022', lib: ['ES2023', 'ESNext.Disposable'], module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, isolatedModules: true, skipLibCheck: false, types: ['node', 'jest'] } }, null, 2),
    );
    const testFile = readFileSync(join(dir, 'ci-job.test.ts'), 'utf8');
    for (const round of [1, 2]) {
      const jest = join(consumer, 'node_modules/jest/bin/jest.js');
      const result = await sh(process.execPath, [jest, '--ci', '--cacheDirectory', join(work, 'jest-cache')], dir, { NODE_OPTIONS: '--experimental-vm-modules' }).catch((e: Error) => e);
      if (result instanceof Error) throw new Error(`round ${round}: ${result.message}`);
      expect([round, result.stderr]).toEqual([round, expect.stringMatching(/Tests:\s+2 passed, 2 total[\s\S]*Snapshots:\s+1 passed, 1 total/)]);
    }
    expect(readFileSync(join(dir, 'ci-job.test.ts'), 'utf8')).toBe(testFile);
  }, 180_000);
});
