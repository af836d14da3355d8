import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, realpath, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Duration } from 'luxon';
import { CommandStartError, localHosts } from '../blueprints/index.js';
import { SlotPicker } from '../blueprints/local-hosts/slot-picker.js';
import { AbortError, createBroker, ValidationError, type Broker, type CommandOptions, type Lease } from '../lib/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { testDatabase } from './helpers/tier.js';

guardBrokers();

const node = process.execPath;
let scratch: string;

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'slipway-local-hosts-test-'));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

/** A real broker (real clock, real processes) on this run's tier. */
async function realBroker(slots: number, name = 'local'): Promise<Broker> {
  const root = await mkdtemp(join(scratch, 'root-'));
  return createBroker({ database: testDatabase(), blueprints: [localHosts({ name, config: { slots, root } })], sweepInterval: { milliseconds: 100 } });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('localHosts: slots and scratch directories', () => {
  test('with slots: 2, a third lease waits until one is released, and takes the freed slot', async () => {
    const broker = track(await realBroker(2));
    const first = await broker.acquire({ type: 'host', timeout: { seconds: 10 } });
    const second = await broker.acquire({ type: 'host', timeout: { seconds: 10 } });
    expect([first.attributes.slot, second.attributes.slot].sort()).toEqual([0, 1]);

    const third = await broker.requestLease({ type: 'host' });
    await sleep(500);
    expect(await third.status()).toBe('pending');
    expect(await broker.leases.list({ status: 'active' })).toHaveLength(2);

    const freedSlot = first.attributes.slot;
    await first.release();
    const started = Date.now();
    const active = await third.whenActive({ timeout: { seconds: 5 } });
    // A release hands the slot over at once, not at the next periodic recheck.
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(active.attributes.slot).toBe(freedSlot);
    // The local machine is one resource however many leases it serves.
    expect(await broker.resources.list()).toHaveLength(1);

    await Promise.all([second.release(), active.release()]);
    await broker.close();
  });

  test('concurrent requests on free slots all become active promptly', async () => {
    const broker = track(await realBroker(3));
    const started = Date.now();
    const leases = await Promise.all([1, 2, 3].map(() => broker.acquire({ type: 'host', timeout: { seconds: 10 } })));
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(leases.map((l) => l.attributes.slot).sort()).toEqual([0, 1, 2]);
    await Promise.all(leases.map((l) => l.release()));
    await broker.close();
  });

  test('each lease has its own scratch directory while active, removed after release', async () => {
    const broker = track(await realBroker(2));
    const a = await broker.acquire({ type: 'host' });
    const b = await broker.acquire({ type: 'host' });
    const pathA = a.interface('filesystem').path;
    const pathB = b.interface('filesystem').path;
    expect(pathA).not.toBe(pathB);
    expect(a.attributes.path).toBe(pathA);
    expect(pathA.endsWith(a.id)).toBe(true);
    expect((await stat(pathA)).isDirectory()).toBe(true);
    expect((await stat(pathB)).isDirectory()).toBe(true);
    await writeFile(join(pathA, 'output.txt'), 'left behind');

    await a.release();
    expect(existsSync(pathA)).toBe(false);
    expect(existsSync(pathB)).toBe(true);
    await b.release();
    expect(existsSync(pathB)).toBe(false);
    await broker.close();
  });

  test('a scratch directory that is already gone does not stop the lease from being destroyed', async () => {
    const broker = track(await realBroker(1));
    const lease = await broker.acquire({ type: 'host' });
    await rm(lease.interface('filesystem').path, { recursive: true });
    await lease.release();
    expect((await broker.leases.get(lease.id))?.status).toBe('destroyed');
    expect(await broker.logs({ lease: lease.id, type: 'hook.failure' })).toEqual([]);
    await broker.close();
  });

  test('the scratch directory is not taken from lease attributes the requester wrote', async () => {
    const broker = track(await realBroker(1));
    const decoy = await mkdtemp(join(scratch, 'decoy-'));
    const lease = await broker.acquire({ type: 'host', attributes: { path: decoy } });
    expect(lease.interface('filesystem').path).not.toBe(decoy);
    await lease.release();
    expect(existsSync(decoy)).toBe(true);
    await broker.close();
  });
});

describe('localHosts: the command interface', () => {
  let broker: Broker;
  let lease: Lease;
  let dir: string;

  // One broker and lease for the whole block, closed in afterAll: starting a broker per
  // command would make this block slow without testing anything more.
  beforeAll(async () => {
    broker = await realBroker(1, 'commands');
    lease = await broker.acquire({ type: 'host' });
    dir = lease.interface('filesystem').path;
  });
  afterAll(async () => {
    await lease.release();
    await broker.close();
  });
  const run = (argv: readonly string[], options?: CommandOptions) => lease.interface('command').run(argv, options);

  test('argv goes to the program without a shell: $(...), ; and quotes are passed literally', async () => {
    const tricky = ['$(echo hi)', 'a; touch pwned', '"quoted" \'single\'', '*', '$HOME'];
    const result = await run([node, '-e', 'console.log(JSON.stringify(process.argv.slice(1)))', ...tricky]);
    expect(JSON.parse(result.stdout)).toEqual(tricky);
    expect(existsSync(join(dir, 'pwned'))).toBe(false);
    expect((await run(['echo', '$HOME'])).stdout).toBe('$HOME\n');
  });

  test('shell: true runs the joined argv through the shell', async () => {
    const result = await run(['echo $((1 + 2)) | tr 3 X;', 'echo', 'second'], { shell: true });
    expect(result.stdout).toBe('X\nsecond\n');
  });

  test('runs in the lease directory by default; cwd may be absolute or relative to it', async () => {
    const here = await run([node, '-e', 'console.log(process.cwd())']);
    expect(await realpath(here.stdout.trim())).toBe(await realpath(dir));
    await mkdir(join(dir, 'sub'), { recursive: true });
    const relative = await run(['pwd'], { cwd: 'sub' });
    expect(await realpath(relative.stdout.trim())).toBe(await realpath(join(dir, 'sub')));
    const absolute = await run(['pwd'], { cwd: scratch });
    expect(await realpath(absolute.stdout.trim())).toBe(await realpath(scratch));
  });

  test('env is merged onto the process environment; undefined unsets a variable', async () => {
    process.env.SLIPWAY_INHERITED = 'from-parent';
    process.env.SLIPWAY_UNSET_ME = 'present';
    try {
      const script = 'console.log(JSON.stringify([process.env.SLIPWAY_OWN, process.env.SLIPWAY_INHERITED, process.env.SLIPWAY_UNSET_ME ?? null]))';
      const result = await run([node, '-e', script], { env: { SLIPWAY_OWN: 'mine', SLIPWAY_UNSET_ME: undefined } });
      expect(JSON.parse(result.stdout)).toEqual(['mine', 'from-parent', null]);
    } finally {
      delete process.env.SLIPWAY_INHERITED;
      delete process.env.SLIPWAY_UNSET_ME;
    }
  });

  test('a non-zero exit resolves with its code and both outputs', async () => {
    const result = await run([node, '-e', 'process.stdout.write("out"); process.stderr.write("err"); process.exit(3)']);
    expect(result).toEqual({ exitCode: 3, signal: null, stdout: 'out', stderr: 'err', timedOut: false });
  });

  test('stdin is written to the process', async () => {
    const result = await run([node, '-e', 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => console.log(s.toUpperCase()))'], { stdin: 'hello' });
    expect(result.stdout).toBe('HELLO\n');
  });

  test('onStdout and onStderr receive output while the process runs, and it is also collected', async () => {
    const seen: Array<{ stream: string; chunk: string; at: number }> = [];
    const script = 'process.stdout.write("first "); process.stderr.write("warn"); setTimeout(() => process.stdout.write("second"), 400)';
    const result = await run([node, '-e', script], {
      onStdout: (chunk) => seen.push({ stream: 'out', chunk, at: Date.now() }),
      onStderr: (chunk) => seen.push({ stream: 'err', chunk, at: Date.now() }),
    });
    const done = Date.now();
    expect(result.stdout).toBe('first second');
    expect(result.stderr).toBe('warn');
    expect(seen.filter((s) => s.stream === 'out').map((s) => s.chunk).join('')).toBe(result.stdout);
    expect(seen.filter((s) => s.stream === 'err').map((s) => s.chunk).join('')).toBe('warn');
    const firstOut = seen.find((s) => s.stream === 'out')!;
    expect(firstOut.chunk).toBe('first ');
    expect(done - firstOut.at).toBeGreaterThanOrEqual(300);
  });

  test('a callback that throws stops the process and rejects with its error', async () => {
    const boom = new Error('listener failed');
    const started = Date.now();
    const run1 = run([node, '-e', 'console.log("x"); setTimeout(() => {}, 10000)'], { onStdout: () => { throw boom; } });
    await expect(run1).rejects.toBe(boom);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  test('a timeout kills the process and resolves with timedOut', async () => {
    for (const timeout of [300, { milliseconds: 300 }, 'PT0.3S', Duration.fromMillis(300)]) {
      const started = Date.now();
      const result = await run([node, '-e', 'setTimeout(() => console.log("finished"), 10000)'], { timeout });
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(result.timedOut).toBe(true);
      expect(result.signal).toBe('SIGTERM');
      expect(result.exitCode).toBeNull();
      expect(result.stdout).toBe('');
    }
    const quick = await run(['true'], { timeout: { seconds: 10 } });
    expect(quick).toMatchObject({ exitCode: 0, timedOut: false });
  });

  test('a timeout also stops what the process started (its process group)', async () => {
    const started = Date.now();
    const result = await run(['sleep 10; echo late'], { shell: true, timeout: 300 });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(result.timedOut).toBe(true);
    expect(result.stdout).toBe('');
  });

  test('a process that ignores SIGTERM gets SIGKILL after the grace period', async () => {
    const script = 'process.on("SIGTERM", () => {}); console.log("ready"); setInterval(() => {}, 1000)';
    const started = Date.now();
    const result = await run([node, '-e', script], { timeout: { milliseconds: 500 } });
    expect(result).toMatchObject({ timedOut: true, signal: 'SIGKILL', stdout: 'ready\n' });
    expect(Date.now() - started).toBeLessThan(6_000);
  });

  test('aborting the signal kills the process and rejects with AbortError', async () => {
    const controller = new AbortController();
    const marker = join(dir, 'late-marker');
    const script = `setTimeout(() => require("fs").writeFileSync(${JSON.stringify(marker)}, "x"), 1000)`;
    const started = Date.now();
    const running = run([node, '-e', script], { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('user gave up')), 200);
    await expect(running).rejects.toBeInstanceOf(AbortError);
    expect(Date.now() - started).toBeLessThan(1_000);
    await sleep(1_200);
    expect(existsSync(marker)).toBe(false);
  });

  test('an already aborted signal rejects without starting the process', async () => {
    const marker = join(dir, 'never');
    await expect(run(['touch', marker], { signal: AbortSignal.abort() })).rejects.toBeInstanceOf(AbortError);
    expect(existsSync(marker)).toBe(false);
  });

  test('a missing executable rejects with CommandStartError naming it', async () => {
    const missing = run(['slipway-no-such-program-xyz', '--help']);
    await expect(missing).rejects.toBeInstanceOf(CommandStartError);
    await expect(missing).rejects.toMatchObject({ code: 'COMMAND_NOT_FOUND', command: 'slipway-no-such-program-xyz', errno: 'ENOENT' });
    await expect(missing).rejects.toThrow(/slipway-no-such-program-xyz/);
  });

  test('bad argv and options are ValidationErrors naming the field', async () => {
    const field = async (p: Promise<unknown>) => {
      const error = await p.then(() => null, (e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      return (error as ValidationError).field;
    };
    expect(await field(run([]))).toBe('argv');
    expect(await field(run('ls' as unknown as string[]))).toBe('argv');
    expect(await field(run(['ls', 3 as unknown as string]))).toBe('argv[1]');
    expect(await field(run([''] as string[]))).toBe('argv[0]');
    expect(await field(run(['ls'], { timeout: 'soon' }))).toBe('options.timeout');
    expect(await field(run(['ls'], { timeout: 0 }))).toBe('options.timeout');
    expect(await field(run(['ls'], { env: { A: 1 as unknown as string } }))).toBe('options.env.A');
    expect(await field(run(['ls'], { cwd: 'does-not-exist' }))).toBe('options.cwd');
  });
});

describe('localHosts: config', () => {
  const fieldOf = (make: () => unknown) => {
    try {
      make();
    } catch (error) {
      expect(error).toBeInstanceOf(ValidationError);
      return (error as ValidationError).field;
    }
    throw new Error('expected a ValidationError');
  };

  test('bad config is rejected with a ValidationError naming the field', () => {
    expect(fieldOf(() => localHosts({ name: 'x', config: { slots: 0 } }))).toBe('config.slots');
    expect(fieldOf(() => localHosts({ name: 'x', config: { slots: 1.5 } }))).toBe('config.slots');
    expect(fieldOf(() => localHosts({ name: 'x', config: { slots: '2' as unknown as number } }))).toBe('config.slots');
    expect(fieldOf(() => localHosts({ name: 'x', config: { root: 'relative/dir' } }))).toBe('config.root');
    expect(fieldOf(() => localHosts({ name: 'x', config: { root: '' } }))).toBe('config.root');
    expect(fieldOf(() => localHosts({ name: 'x', config: { slotz: 2 } as never }))).toBe('config.slotz');
    expect(fieldOf(() => localHosts({ name: 'x', config: 'two' as never }))).toBe('config');
    expect(fieldOf(() => localHosts({ name: 'x', limits: { maxResources: 2 } }))).toBe('limits.maxResources');
  });

  test('defaults: one slot, a root under the system temp directory, one resource', () => {
    const blueprint = localHosts({ name: 'defaults' });
    expect(blueprint.type).toBe('host');
    expect(blueprint.config).toEqual({ slots: 1, root: join(tmpdir(), 'slipway-local-hosts') });
    expect(blueprint.limits.maxResources).toBe(1);
    expect(localHosts({ name: 'given', config: { slots: 4, root: '/var/tmp/x/' } }).config).toEqual({ slots: 4, root: '/var/tmp/x' });
  });
});

describe('SlotPicker', () => {
  test('first guesses are the lowest slots this process has not handed out', () => {
    const picker = new SlotPicker();
    expect(picker.pick('r', 'a', 3)).toBe(0);
    expect(picker.pick('r', 'b', 3)).toBe(1);
    picker.freed('r', 'a');
    expect(picker.pick('r', 'c', 3)).toBe(0);
  });

  test('a lease asked again (its lock conflicted) tries every slot in turn, even when the memory is stale', () => {
    const picker = new SlotPicker();
    // Another process holds slots 0 and 1 of this resource; this one does not know.
    const tried = Array.from({ length: 3 }, () => picker.pick('r', 'a', 3));
    expect([...tried].sort()).toEqual([0, 1, 2]);
    // Memory that says every slot is taken still lets a lease reach each one.
    const full = new SlotPicker();
    for (const id of ['x', 'y']) full.pick('r', id, 2);
    expect([full.pick('r', 'z', 2), full.pick('r', 'z', 2)].sort()).toEqual([0, 1]);
  });
});
