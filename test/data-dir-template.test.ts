import { fork } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createBroker } from '../lib/index.js';
import { INCOMPLETE_MARKER } from '../lib/store/open.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { describeOnEmbedded } from './helpers/tier.js';

/*
 * A new embedded dataDir is a copy of the migrated template, not an initdb of its own. The
 * copy writes many files; a process killed in the middle must not leave a directory that
 * the next open takes for a database.
 */

guardBrokers();

const fixture = fileURLToPath(new URL('./fixtures/data-dir-child.ts', import.meta.url));
let scratch: string;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'slipway-template-'));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let n = 0;
const newDir = () => join(scratch, `data-${++n}`);
/** What PGlite (or the copy) has written: anything but slipway's lock and marker. */
const written = (dir: string) => (existsSync(dir) ? readdirSync(dir).filter((f) => !f.startsWith('slipway.lock') && f !== INCOMPLETE_MARKER) : []);

const open = (dataDir: string) => createBroker({ database: { embedded: true, dataDir }, blueprints: [fakeBlueprint({ name: 'f' })], logger: { debug() {}, info() {}, warn() {}, error() {} } }).then(track);

/** A lease written before a close is there after the reopen: the directory is a whole database. */
async function usable(dataDir: string): Promise<void> {
  const broker = await open(dataDir);
  const lease = await broker.acquire({ type: 'fake', timeout: { seconds: 30 } });
  await broker.close();
  const again = await open(dataDir);
  expect((await again.leases.list()).map((l) => [l.id, l.status])).toEqual([[lease.id, 'active']]);
  await again.close();
}

describeOnEmbedded('a new dataDir, made from the migrated template', () => {
  test('opens whole, with no marker left, and keeps its rows across a reopen', async () => {
    const dir = newDir();
    await usable(dir);
    expect(existsSync(join(dir, 'PG_VERSION'))).toBe(true);
    expect(existsSync(join(dir, INCOMPLETE_MARKER))).toBe(false);
  });

  test('a process SIGKILLed while it makes the directory leaves one the next open starts over', async () => {
    const dir = newDir();
    const child = fork(fixture, [dir, 'now'], { execPath: process.execPath, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr = (stderr + chunk).slice(-5_000)));
    // Killed as soon as the first file of the database is on disk: the copy has begun, and is surely not finished.
    const deadline = Date.now() + 60_000;
    while (written(dir).length === 0) {
      if (child.exitCode !== null) throw new Error(`the child exited before writing its dataDir: ${stderr}`);
      if (Date.now() > deadline) throw new Error('the child wrote nothing in its dataDir within 60 s');
      await new Promise((r) => setImmediate(r));
    }
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(existsSync(join(dir, INCOMPLETE_MARKER))).toBe(true);

    await usable(dir);
    expect(existsSync(join(dir, INCOMPLETE_MARKER))).toBe(false);
  });

  test('a half-copied directory under the marker is emptied and copied again; a directory without it is left alone', async () => {
    const dir = newDir();
    mkdirSync(join(dir, 'base'), { recursive: true });
    writeFileSync(join(dir, 'PG_VERSION'), '17\n');
    writeFileSync(join(dir, 'base', 'half-a-table'), 'x');
    writeFileSync(join(dir, INCOMPLETE_MARKER), '');
    await usable(dir);
    expect(existsSync(join(dir, 'base', 'half-a-table'))).toBe(false);

    // The same junk with no marker is somebody's directory, not a copy of ours: refused, not wiped.
    const other = newDir();
    mkdirSync(join(other, 'base'), { recursive: true });
    writeFileSync(join(other, 'PG_VERSION'), '17\n');
    writeFileSync(join(other, 'base', 'half-a-table'), 'x');
    await expect(open(other)).rejects.toThrow();
    expect(existsSync(join(other, 'base', 'half-a-table'))).toBe(true);
  });
});
