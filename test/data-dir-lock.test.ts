import { execFile, fork, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { createBroker, DataDirLockedError, SchemaNotMigratedError, type Broker } from '../lib/index.js';
import { LOCK_FILE, lockDataDir } from '../lib/store/data-dir-lock.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import type { DataDirChildLine } from './fixtures/data-dir-child.js';
import type { LockChildMessage } from './fixtures/lock-child.js';
import { guardBrokers, track } from './helpers/broker.js';
import { describeOnEmbedded } from './helpers/tier.js';

// Invariant 10 (one owner per embedded database), with real processes, the real clock and real createBroker.

guardBrokers();

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'slipway-lock-'));
  dirs.push(dir);
  return dir;
}

// A fresh on-disk PGlite costs an initdb (~10 s on a small machine); a copy of one migrated, closed dataDir opens in under one.
let template: string | undefined;
async function freshDataDir(): Promise<string> {
  if (!template) {
    template = join(tempDir(), 'template');
    await (await createBroker({ database: { embedded: true, dataDir: template }, workers: false })).close();
  }
  const dataDir = join(tempDir(), 'data');
  cpSync(template, dataDir, { recursive: true });
  return dataDir;
}

const children = new Set<{ kill(): Promise<void> }>();
afterEach(async () => {
  for (const child of children) await child.kill();
  children.clear();
});
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const fixture = fileURLToPath(new URL('./fixtures/data-dir-child.ts', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A forked broker process (test/fixtures/data-dir-child.ts) and the lines it wrote. */
class Child {
  readonly proc: ChildProcess;
  readonly lines: DataDirChildLine[] = [];
  private out = '';
  private err = '';

  constructor(dataDir: string, start: 'now' | 'on-go') {
    this.proc = fork(fixture, [dataDir, start], { execPath: process.execPath, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    this.proc.stdout!.on('data', (chunk) => {
      this.out += chunk;
      const lines = this.out.split('\n');
      this.out = lines.pop()!;
      for (const line of lines) if (line.trim()) this.lines.push(JSON.parse(line));
    });
    this.proc.stderr!.on('data', (chunk) => (this.err = (this.err + chunk).slice(-10_000)));
    children.add(this);
  }

  get pid(): number {
    return this.proc.pid!;
  }

  /** The child's first line of one of `kinds`; fails when it exits first or takes longer than `ms`. */
  async next<K extends DataDirChildLine['t']>(kinds: K[], ms = 30_000): Promise<Extract<DataDirChildLine, { t: K }>> {
    const deadline = Date.now() + ms;
    for (;;) {
      const line = this.lines.find((l) => (kinds as string[]).includes(l.t));
      if (line) return line as Extract<DataDirChildLine, { t: K }>;
      if (this.proc.exitCode !== null || this.proc.signalCode !== null || Date.now() > deadline) {
        throw new Error(`child ${this.pid} never said ${kinds.join(' or ')} (exit ${this.proc.exitCode ?? this.proc.signalCode}); stdout: ${JSON.stringify(this.lines)}; stderr: ${this.err}`);
      }
      await sleep(10);
    }
  }

  send(message: 'close' | { go: number }) {
    this.proc.send(message);
  }

  /** Closes its broker the ordinary way and waits for the process to end. */
  async close() {
    const exited = new Promise((resolve) => this.proc.once('exit', resolve));
    this.send('close');
    await this.next(['closed']);
    await exited;
    children.delete(this);
  }

  /** SIGKILL: no close, no cleanup of any kind. */
  kill(): Promise<void> {
    children.delete(this);
    return new Promise((resolve) => {
      if (this.proc.exitCode !== null || this.proc.signalCode !== null) return resolve();
      this.proc.once('exit', () => resolve());
      this.proc.kill('SIGKILL');
    });
  }
}

function warnings() {
  const seen: Array<{ data: Record<string, unknown>; message: string }> = [];
  const logger = { debug() {}, info() {}, error() {}, warn: (data: Record<string, unknown>, message: string) => void seen.push({ data, message }) };
  return { seen, logger };
}

const open = async (dataDir: string, options: Partial<Parameters<typeof createBroker>[0]> = {}): Promise<Broker> =>
  track(await createBroker({ database: { embedded: true, dataDir }, blueprints: [fakeBlueprint({ name: 'f' })], ...options }));

async function expectLockedBy(opening: Promise<unknown>, dataDir: string, pid: number) {
  const error = await opening.then(
    (broker) => {
      void (broker as Broker).close();
      throw new Error('createBroker did not refuse the second opener');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(DataDirLockedError);
  expect(error).toMatchObject({ code: 'DATA_DIR_LOCKED', dataDir, pid, hostname: hostname() });
  expect((error as Error).message).toContain(dataDir);
  expect((error as Error).message).toContain(String(pid));
}

describeOnEmbedded('one opener per embedded dataDir', () => {
  test('a second process is refused while a child holds the dataDir, and writes nothing', async () => {
    const dataDir = await freshDataDir();
    const child = new Child(dataDir, 'now');
    const { leaseId } = await child.next(['opened']);

    await expectLockedBy(open(dataDir), dataDir, child.pid);
    // A refused opener with a lease to write (the lost-write case of the bug) never gets that far.
    await child.close();

    const broker = await open(dataDir);
    const leases = await broker.leases.list();
    expect(leases.map((l) => [l.id, l.status])).toEqual([[leaseId, 'active']]);
    expect(await broker.resources.list()).toHaveLength(1);
    await broker.close();
  });

  test('the same process is refused a second broker on a dataDir it holds, by any spelling; after close() it opens again', async () => {
    const dataDir = await freshDataDir();
    const alias = join(tempDir(), 'alias');
    symlinkSync(dataDir, alias);
    const first = await open(dataDir);
    await expectLockedBy(open(dataDir), dataDir, process.pid);
    await expectLockedBy(open(`${alias}/`), `${alias}/`, process.pid);
    await first.close();

    const again = await open(dataDir);
    await again.close();
  });

  test('a stale lock of a SIGKILLed process is taken over, said in a warning, and its committed lease is there', async () => {
    const dataDir = await freshDataDir();
    const child = new Child(dataDir, 'now');
    const { leaseId } = await child.next(['opened']);
    await child.kill();

    const { seen, logger } = warnings();
    const broker = await open(dataDir, { logger });
    expect(seen.filter((w) => /stale lock/.test(w.message))).toEqual([expect.objectContaining({ data: expect.objectContaining({ dataDir, pid: child.pid, hostname: hostname() }), message: expect.stringMatching(/stale lock/) })]);
    // and the lease the dead holder left active is reported too
    expect(seen.filter((w) => /active lease/.test(w.message))).toEqual([expect.objectContaining({ data: expect.objectContaining({ active: 1, withoutTtl: 1 }) })]);
    const leases = await broker.leases.list();
    expect(leases.map((l) => [l.id, l.status])).toEqual([[leaseId, 'active']]);
    await broker.close();
  });

  test('two processes racing on a fresh dataDir, then on the stale lock of the winner: exactly one wins each time', async () => {
    const dataDir = await freshDataDir();
    const race = async () => {
      const pair = [new Child(dataDir, 'on-go'), new Child(dataDir, 'on-go')];
      await Promise.all(pair.map((c) => c.next(['loaded'])));
      const go = Date.now() + 300;
      for (const c of pair) c.send({ go });
      const outcomes = await Promise.all(pair.map((c) => c.next(['opened', 'refused'])));
      const winners = pair.filter((_, i) => outcomes[i]!.t === 'opened');
      expect(outcomes.map((o) => o.t).sort()).toEqual(['opened', 'refused']);
      const refused = outcomes.find((o) => o.t === 'refused') as Extract<DataDirChildLine, { t: 'refused' }>;
      expect(refused).toMatchObject({ name: 'DataDirLockedError', code: 'DATA_DIR_LOCKED', dataDir, holderPid: winners[0]!.pid });
      return winners[0]!;
    };

    const first = await race();
    await first.kill();
    const second = await race();
    await second.close();

    const broker = await open(dataDir);
    expect(await broker.leases.list()).toHaveLength(2);
    await broker.close();
  });

  test('a failed open releases the lock it took', async () => {
    const dataDir = await freshDataDir();
    await expect(open(dataDir, { database: { embedded: true, dataDir, migrate: false, schema: 'elsewhere' } })).rejects.toBeInstanceOf(SchemaNotMigratedError);
    expect(readdirSync(dataDir).filter((f) => f.includes('lock'))).toEqual([]);
    const broker = await open(dataDir);
    await broker.close();
    expect(readdirSync(dataDir).filter((f) => f.includes('lock'))).toEqual([]);
  });
});

/** A pid that no process has: one of a process that has exited. */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '']).pid!;
}
const record = (fields: Record<string, unknown>) => `${JSON.stringify({ hostname: hostname(), startTime: null, bootId: null, nonce: 'n', since: 'then', ...fields })}\n`;
const lockFiles = (dir: string) => readdirSync(dir).filter((f) => f.startsWith(LOCK_FILE)).sort();

// Only the directory, no database: once per run is enough.
describeOnEmbedded('the lock file of a dataDir', () => {
  test('creates a missing directory, holds slipway.lock in it, and release() removes only its own', () => {
    const dir = join(tempDir(), 'not', 'yet');
    const lock = lockDataDir(dir)!;
    expect(lock.tookOver).toBeNull();
    expect(lockFiles(dir)).toEqual([LOCK_FILE]);
    expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8'))).toMatchObject({ pid: process.pid, hostname: hostname() });
    expect(() => lockDataDir(dir)).toThrow(DataDirLockedError);
    lock.release();
    lock.release();
    expect(lockFiles(dir)).toEqual([]);

    const next = lockDataDir(`file://${dir}`)!;
    lock.release();
    expect(lockFiles(dir)).toEqual([LOCK_FILE]);
    next.release();
  });

  test('takes no lock on a dataDir with a scheme (PGlite storage that is not a local directory)', () => {
    expect(lockDataDir('memory://x')).toBeNull();
    expect(lockDataDir('idb://x')).toBeNull();
  });

  // The start time comes from /proc; elsewhere a live pid is taken to be the holder.
  (existsSync('/proc/self/stat') ? test : test.skip)('a live pid whose process started later than the holder (pid reuse) does not hold the lock', () => {
    const dir = tempDir();
    writeFileSync(join(dir, LOCK_FILE), record({ pid: process.pid, startTime: '1' }));
    const lock = lockDataDir(dir)!;
    expect(lock.tookOver).toEqual({ pid: process.pid, hostname: hostname(), reason: expect.stringMatching(/newer process has its pid/) });
    lock.release();
  });

  test('a holder on another host is never judged dead from here; an unreadable lock file is stale', () => {
    const dir = tempDir();
    writeFileSync(join(dir, LOCK_FILE), record({ pid: deadPid(), hostname: 'elsewhere.example' }));
    expect(() => lockDataDir(dir)).toThrow(expect.objectContaining({ code: 'DATA_DIR_LOCKED', hostname: 'elsewhere.example' }));

    writeFileSync(join(dir, LOCK_FILE), 'not a lock');
    const lock = lockDataDir(dir)!;
    expect(lock.tookOver).toEqual({ pid: null, hostname: null, reason: 'the lock file is unreadable' });
    lock.release();
  });

  test('a process killed in the middle of a takeover leaves a takeover file that the next opener takes over too', () => {
    const dir = tempDir();
    const stale = record({ pid: deadPid() });
    const takeover = `${LOCK_FILE}.${createHash('sha256').update(stale).digest('hex').slice(0, 16)}`;
    writeFileSync(join(dir, LOCK_FILE), stale);
    writeFileSync(join(dir, takeover), record({ pid: deadPid() }));
    const lock = lockDataDir(dir)!;
    expect(lock.tookOver).toMatchObject({ reason: expect.stringMatching(/no longer running/) });
    expect(lockFiles(dir)).toEqual([LOCK_FILE]);
    expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), 'utf8'))).toMatchObject({ pid: process.pid });
    lock.release();
  });

  test.each([
    ['right after the first has read the stale record: the second takes it over, the first is refused', 'read', { first: 'DATA_DIR_LOCKED', second: 'won' }],
    ['right after the first has created its takeover file: the second is refused, the first takes over', 'takeover-link', { first: 'won', second: 'DATA_DIR_LOCKED' }],
  ])('a second opener slipped in %s', async (_, step, outcomes) => {
    const dir = tempDir();
    const fixture = fileURLToPath(new URL('./fixtures/lock-interleave-child.ts', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', fixture, dir, step]);
    expect(JSON.parse(stdout)).toEqual({ ...outcomes, leftAfterLoserRelease: true, leftAfterWinnerRelease: false, files: [] });
  });

  test('six processes racing for a free lock, then for the stale lock of each winner: exactly one wins each round', async () => {
    const dir = tempDir();
    const fixture = fileURLToPath(new URL('./fixtures/lock-child.ts', import.meta.url));
    const racers = Array.from({ length: 6 }, () => {
      const proc = fork(fixture, [dir], { execPath: process.execPath, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
      const messages: LockChildMessage[] = [];
      proc.on('message', (m: LockChildMessage) => messages.push(m));
      const racer = {
        proc,
        messages,
        kill: () =>
          new Promise<void>((resolve) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
            proc.once('exit', () => resolve());
            proc.kill('SIGKILL');
          }),
      };
      children.add(racer);
      return racer;
    });
    const settled = async (n: number) => {
      const deadline = Date.now() + 30_000;
      while (racers.some((r) => r.messages.length < n && r.proc.signalCode === null)) {
        if (Date.now() > deadline) throw new Error('racers did not answer');
        await sleep(10);
      }
    };
    await settled(1);
    let left = racers;
    for (let round = 1; round <= 3; round++) {
      const go = Date.now() + 200;
      for (const r of left) r.proc.send({ go });
      await settled(round + 1);
      const outcomes = left.map((r) => r.messages[round]!);
      const winners = left.filter((_, i) => outcomes[i]!.t === 'won');
      expect(winners).toHaveLength(1);
      expect(outcomes.filter((o) => o.t !== 'won')).toEqual(Array(left.length - 1).fill({ t: 'refused', holder: winners[0]!.proc.pid }));
      await winners[0]!.kill();
      left = left.filter((r) => r !== winners[0]);
    }
    expect(lockFiles(dir)).toEqual([LOCK_FILE]);
  });
});
