import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync, gzipSync } from 'node:zlib';
import { PGlite } from '@electric-sql/pglite';
import { createBroker } from '../lib/index.js';
import { templateCache } from '../lib/store/template-cache.js';
import { guardBrokers, track } from './helpers/broker.js';
import { describeOnEmbedded } from './helpers/tier.js';

/*
 * The migrated template of the embedded database is kept on disk between processes
 * (SLIPWAY_TEMPLATE_CACHE): a process's first broker loads it instead of running initdb and
 * every migration. It must be used when it is there, never be trusted when it is torn, and
 * stay off when turned off.
 */

guardBrokers();

const child = fileURLToPath(new URL('./fixtures/template-cache-child.ts', import.meta.url));
let scratch: string;
let cacheDir: string;
const saved = process.env.SLIPWAY_TEMPLATE_CACHE;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'slipway-template-cache-'));
  cacheDir = join(scratch, 'cache');
  process.env.SLIPWAY_TEMPLATE_CACHE = cacheDir;
});
afterAll(() => {
  if (saved === undefined) delete process.env.SLIPWAY_TEMPLATE_CACHE;
  else process.env.SLIPWAY_TEMPLATE_CACHE = saved;
  rmSync(scratch, { recursive: true, force: true });
});

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const open = (schema: string) => createBroker({ database: { embedded: true, schema }, workers: false, logger: quiet }).then(track);
const inChild = (schema: string) =>
  JSON.parse(execFileSync(process.execPath, ['--import', 'tsx', child, schema], { encoding: 'utf8', env: { ...process.env, SLIPWAY_TEMPLATE_CACHE: cacheDir } })) as { planted: boolean };

describeOnEmbedded('the template cache on disk', () => {
  test('the first broker writes the template, private to this user; the next process loads it from there', async () => {
    const broker = await open('tc_used');
    await broker.close();
    const { file } = (await templateCache('tc_used'))!;
    expect(existsSync(file)).toBe(true);
    expect(statSync(cacheDir).mode & 0o777).toBe(0o700);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readdirSync(cacheDir).filter((f) => f.endsWith('.partial'))).toEqual([]);

    // Plant a template that differs from one the process would make itself (a table of its
    // own): a new process that finds the table has loaded the cache, not made its own.
    const pglite = await PGlite.create({ loadDataDir: new Blob([gunzipSync(readFileSync(file))]) });
    await pglite.exec('CREATE TABLE tc_used.planted (x int)');
    const planted = Buffer.from(await ((await pglite.dumpDataDir('none')) as Blob).arrayBuffer());
    await pglite.close();
    writeFileSync(file, gzipSync(planted));
    expect(inChild('tc_used')).toEqual({ planted: true });
  });

  test('a torn or foreign file is not trusted: the broker makes the template itself and writes it again', async () => {
    const { file } = (await templateCache('tc_torn'))!;
    const whole = gzipSync(Buffer.from('not a database'));
    writeFileSync(file, whole.subarray(0, whole.length - 6)); // cut short: gzip's length and CRC check fail
    const broker = await open('tc_torn');
    expect(await broker.leases.list()).toEqual([]);
    await broker.close();
    expect(gunzipSync(readFileSync(file)).length).toBeGreaterThan(1_000_000);
    expect(inChild('tc_torn')).toEqual({ planted: false });
  });

  test('the name of the file follows the schema: another schema gets a template of its own', async () => {
    const a = (await templateCache('tc_a'))!.file;
    const b = (await templateCache('tc_b'))!.file;
    expect(a).not.toBe(b);
    expect((await templateCache('tc_a'))!.file).toBe(a);
  });

  test('SLIPWAY_TEMPLATE_CACHE=off keeps nothing on disk', async () => {
    const before = readdirSync(cacheDir).sort();
    process.env.SLIPWAY_TEMPLATE_CACHE = 'off';
    try {
      expect(await templateCache('tc_off')).toBeNull();
      const broker = await open('tc_off');
      await broker.close();
    } finally {
      process.env.SLIPWAY_TEMPLATE_CACHE = cacheDir;
    }
    expect(readdirSync(cacheDir).sort()).toEqual(before);
    expect(lstatSync(cacheDir).isDirectory()).toBe(true);
  });
});
