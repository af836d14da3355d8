import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, stat, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Duration } from 'luxon';
import { CommandStartError, localHosts } from '../blueprints/index.js';
import { registryDirectory, stopLeaseProcesses, type RegistryEntry } from '../blueprints/local-hosts/process-registry.js';
import { AbortError, createBroker, LeaseNotActiveError, ValidationError, type Broker, type CommandOptions, type DatabaseOptions, type Lease } from '../lib/index.js';
import { guardBrokers, track } from './helpers/broker.js';
import { freshSchema, testDatabase, tierUrl } from './helpers/tier.js';

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
async function realBroker(slots: number, name = 'local', root?: string, database: DatabaseOptions | undefined = testDatabase()): Promise<Broker> {
  root ??= await mkdtemp(join(scratch, 'root-'));
  return createBroker({ database, blueprints: [localHosts({ name, config: { slots, root } })], sweepInterval: { milliseconds: 100 } });
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
    // The timeout leaves Node seconds to start and install its handler even on a loaded machine
    // (CI once took over 500 ms, and the SIGTERM then found no handler).
    const script = 'process.on("SIGTERM", () => {}); console.log("ready"); setInterval(() => {}, 1000)';
    const started = Date.now();
    const result = await run([node, '-e', script], { timeout: { seconds: 3 } });
    expect(result).toMatchObject({ timedOut: true, signal: 'SIGKILL', stdout: 'ready\n' });
    // 3 s of timeout, then the 2 s grace before SIGKILL.
    expect(Date.now() - started).toBeGreaterThanOrEqual(5_000 - 50);
    expect(Date.now() - started).toBeLessThan(10_000);
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

/** The state letter of each process in /proc whose pid, or (for a negative pid) process group, is this one. */
function procStates(pid: number): string[] {
  const states: string[] = [];
  for (const name of pid > 0 ? [String(pid)] : readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const fields = readFileSync(`/proc/${name}/stat`, 'utf8').split(') ').at(-1)!.split(' ');
      if (pid > 0 || fields[2] === String(-pid)) states.push(fields[0]!);
    } catch {
      // gone while listed
    }
  }
  return states;
}

/**
 * Whether a process (or, with a negative pid, any process of a group) still runs. A
 * zombie does not: it has exited, and an orphan's zombie may wait forever for a
 * container's init to reap it.
 */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  return process.platform !== 'linux' || procStates(pid).some((state) => state !== 'Z' && state !== 'X');
}

/** Waits for a file a child writes, and reads the pid in it. */
async function pidFrom(file: string, ms = 5_000): Promise<number> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const text = await readFile(file, 'utf8').catch(() => '');
    if (/^\d+\s*$/.test(text)) return Number(text);
    await sleep(10);
  }
  throw new Error(`no pid in ${file} after ${ms} ms`);
}

/** How a promise settled, and when (Date.now()). */
function settled<T>(p: Promise<T>) {
  const state: { at?: number; value?: T; error?: unknown } = {};
  const done = p.then(
    (value) => Object.assign(state, { at: Date.now(), value }),
    (error: unknown) => Object.assign(state, { at: Date.now(), error }),
  );
  return { state, done };
}

/** Kills what a failed test may have left running. */
function killGroup(pid: number | undefined) {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

describe('localHosts: a lease that leaves active while its commands run', () => {
  test('slots: 1 — an expired lease\'s processes are gone, and then its directory, before the next lease gets the slot', async () => {
    const broker = track(await realBroker(1, 'expiry'));
    // The ttl runs from the request: long enough that a loaded machine builds the host and starts the command before it.
    const a = await broker.acquire({ type: 'host', ttl: { seconds: 3 } });
    const dir = a.interface('filesystem').path;
    const pidFile = join(scratch, `pid-${a.id}`);
    const vanished = join(scratch, `vanished-${a.id}`);
    // The shell and its children ignore SIGTERM: they live until SIGKILL, and meanwhile
    // report whether their directory was removed under them. Bounded, should the test fail.
    const script = `trap '' TERM; echo $$ > ${pidFile}; i=0; while [ $i -lt 400 ]; do [ -d ${dir} ] || echo gone >> ${vanished}; i=$((i+1)); sleep 0.02; done`;
    const running = settled(a.interface('command').run(['/bin/sh', '-c', script]));
    let pid: number | undefined;
    try {
      pid = await pidFrom(pidFile);
      const b = await broker.requestLease({ type: 'host', timeout: { seconds: 20 } });
      // Sample until B is active: never B active while A's process group lives, never A's directory gone while it lives.
      const samples: Array<{ groupAlive: boolean; dirExists: boolean; bStatus: string }> = [];
      for (let status = 'pending'; status !== 'active'; ) {
        const groupAlive = alive(-pid);
        const dirExists = existsSync(dir);
        status = await b.status();
        samples.push({ groupAlive, dirExists, bStatus: status });
        if (samples.length > 2_000) throw new Error('B never became active');
        await sleep(10);
      }
      const bActiveAt = Date.now();
      expect(samples.filter((s) => s.groupAlive && s.bStatus === 'active')).toEqual([]);
      expect(samples.filter((s) => s.groupAlive && !s.dirExists)).toEqual([]);
      // A lived past its expiry (it ignored SIGTERM), so the slot really waited for it.
      expect(samples.some((s) => s.groupAlive && Date.now() > a.expiresAt!.toMillis())).toBe(true);
      expect(alive(pid)).toBe(false);
      expect(alive(-pid)).toBe(false);
      expect(existsSync(vanished)).toBe(false);
      expect(existsSync(dir)).toBe(false);

      await Promise.race([running.done, sleep(5_000)]);
      expect(running.state.error).toBeInstanceOf(LeaseNotActiveError);
      expect(running.state.error).toMatchObject({ leaseId: a.id, why: 'expired' });
      expect(running.state.at!).toBeLessThanOrEqual(bActiveAt);
      await (await b.whenActive()).release();
    } finally {
      killGroup(pid);
      await running.done;
      await broker.close();
    }
  }, 30_000);

  test('release() kills the lease\'s processes (the whole group) before its directory goes, and run() rejects with LeaseNotActiveError', async () => {
    const broker = track(await realBroker(1, 'release'));
    const lease = await broker.acquire({ type: 'host' });
    const dir = lease.interface('filesystem').path;
    const pidFile = join(scratch, `pid-${lease.id}`);
    const childPidFile = join(scratch, `child-${lease.id}`);
    // A grandchild in the background: only killing the group stops it.
    const script = `sleep 30 & echo $! > ${childPidFile}; echo $$ > ${pidFile}; wait`;
    const running = settled(lease.interface('command').run(['/bin/sh', '-c', script]));
    let pid: number | undefined;
    try {
      pid = await pidFrom(pidFile);
      const grandchild = await pidFrom(childPidFile);
      await lease.release();
      expect(alive(pid)).toBe(false);
      expect(alive(grandchild)).toBe(false);
      expect(alive(-pid)).toBe(false);
      expect(existsSync(dir)).toBe(false);
      await running.done;
      expect(running.state.error).toBeInstanceOf(LeaseNotActiveError);
      expect(running.state.error).toMatchObject({ code: 'LEASE_NOT_ACTIVE', why: 'released' });
      // The registry of the lease's processes goes with the lease.
      expect(existsSync(registryDirectory((await broker.resources.get(lease.resource.id))!.attributes.root as string, lease.id))).toBe(false);
    } finally {
      killGroup(pid);
      await running.done;
      await broker.close();
    }
  });

  test('a process a command left running in the background is stopped when the lease is released', async () => {
    const broker = track(await realBroker(1, 'background'));
    const lease = await broker.acquire({ type: 'host' });
    const childPidFile = join(scratch, `child-${lease.id}`);
    // Its output is not the command's: run() resolves at once, the sleep runs on in the lease's group.
    const result = await lease.interface('command').run(['/bin/sh', '-c', `sleep 30 > /dev/null 2>&1 & echo $! > ${childPidFile}`]);
    expect(result.exitCode).toBe(0);
    const leftover = await pidFrom(childPidFile);
    try {
      expect(alive(leftover)).toBe(true);
      await lease.release();
      expect(alive(leftover)).toBe(false);
      expect(await broker.logs({ lease: lease.id, type: 'local-hosts.processes-stopped' })).toHaveLength(1);
    } finally {
      killGroup(leftover);
      await broker.close();
    }
  });

  test('run() on a released lease rejects with LeaseNotActiveError, not a ValidationError about cwd', async () => {
    const broker = track(await realBroker(2, 'after-release'));
    const first = await broker.acquire({ type: 'host' });
    const command = first.interface('command');
    await first.release();
    const marker = join(scratch, `ran-${first.id}`);
    await expect(command.run(['touch', marker])).rejects.toBeInstanceOf(LeaseNotActiveError);
    await expect(first.interface('command').run(['touch', marker])).rejects.toMatchObject({ code: 'LEASE_NOT_ACTIVE', leaseId: first.id, why: 'released' });

    // Released by id elsewhere, and the lease object's signal never read before: the same.
    const second = await broker.acquire({ type: 'host' });
    await broker.release(second.id);
    while ((await broker.leases.get(second.id))?.status !== 'destroyed') await sleep(20);
    await expect(second.interface('command').run(['touch', marker])).rejects.toMatchObject({ code: 'LEASE_NOT_ACTIVE', leaseId: second.id });
    expect(existsSync(marker)).toBe(false);
    await broker.close();
  });

  test('a broken resource kills its leases\' processes (LeaseNotActiveError, broken)', async () => {
    const broker = track(await realBroker(1, 'broken'));
    const lease = await broker.acquire({ type: 'host' });
    const pidFile = join(scratch, `pid-${lease.id}`);
    const running = settled(lease.interface('command').run(['/bin/sh', '-c', `echo $$ > ${pidFile}; exec sleep 30`]));
    let pid: number | undefined;
    try {
      pid = await pidFrom(pidFile);
      await broker.breakResource(lease.resource.id, 'the disk is on fire');
      await Promise.race([running.done, sleep(5_000)]);
      expect(running.state.error).toMatchObject({ code: 'LEASE_NOT_ACTIVE', why: 'broken' });
      expect(alive(-pid)).toBe(false);
    } finally {
      killGroup(pid);
      await running.done;
      await broker.close();
    }
  });

  test('destroyLease stops processes that another broker started, from the registry (the starter is gone)', async () => {
    const root = await mkdtemp(join(scratch, 'root-'));
    const dataDir = await mkdtemp(join(scratch, 'data-'));
    // The same database for both lives: a schema on the server, or a PGlite data directory.
    const database: DatabaseOptions = tierUrl ? { url: tierUrl, schema: freshSchema('registry') } : { embedded: true, dataDir };
    const first = track(await realBroker(1, 'registry', root, database));
    const lease = await first.acquire({ type: 'host' });
    const dir = lease.interface('filesystem').path;
    const pidFile = join(scratch, `pid-${lease.id}`);
    const running = settled(lease.interface('command').run(['/bin/sh', '-c', `echo $$ > ${pidFile}; exec sleep 30`]));
    let pid: number | undefined;
    try {
      pid = await pidFrom(pidFile);
      // The broker that started the process closes: it no longer watches the lease, and the process lives on.
      await first.close();
      await sleep(200);
      expect(alive(-pid)).toBe(true);

      const second = track(await realBroker(1, 'registry', root, database));
      await second.release(lease.id);
      while ((await second.leases.get(lease.id))?.status !== 'destroyed') await sleep(20);
      expect(alive(-pid)).toBe(false);
      expect(existsSync(dir)).toBe(false);
      expect(existsSync(registryDirectory(root, lease.id))).toBe(false);
      await second.close();
    } finally {
      killGroup(pid);
      await running.done;
    }
  });
});

describe('localHosts: the process registry', () => {
  const writeEntry = async (root: string, leaseId: string, name: string, entry: RegistryEntry) => {
    await mkdir(registryDirectory(root, leaseId), { recursive: true });
    await writeFile(join(registryDirectory(root, leaseId), name), JSON.stringify(entry));
  };

  test('stopping is idempotent: nothing registered, or already stopped, is success', async () => {
    const root = await mkdtemp(join(scratch, 'registry-'));
    expect(await stopLeaseProcesses(root, 'lease_none')).toBe(0);
    expect(await stopLeaseProcesses(root, 'lease_none')).toBe(0);
  });

  test('an entry whose pid now names another process (pid reuse) is dropped without signalling it', async () => {
    const root = await mkdtemp(join(scratch, 'registry-'));
    // This very process, with a start time that is not its own: it must survive.
    const reused = { pid: process.pid, startTime: 'not-its-start-time' };
    await writeEntry(root, 'lease_reused', 'a.json', { host: hostname(), runner: reused, group: reused, command: 'sleep' });
    expect(await stopLeaseProcesses(root, 'lease_reused')).toBe(0);
    expect(alive(process.pid)).toBe(true);
    expect(await readdir(registryDirectory(root, 'lease_reused')).catch(() => [])).not.toContain('a.json');
  });

  test('entries of dead processes and of a dead runner that never started its process are dropped', async () => {
    const root = await mkdtemp(join(scratch, 'registry-'));
    const gone = spawn('/bin/sh', ['-c', 'exit 0']);
    await new Promise((r) => gone.on('exit', r));
    const dead = { pid: gone.pid!, startTime: '1' };
    await writeEntry(root, 'lease_dead', 'a.json', { host: hostname(), runner: dead, group: dead, command: 'sh' });
    await writeEntry(root, 'lease_dead', 'b.json', { host: hostname(), runner: dead, group: null, command: 'sh' });
    expect(await stopLeaseProcesses(root, 'lease_dead')).toBe(0);
    expect((await readdir(registryDirectory(root, 'lease_dead')).catch(() => [])).filter((f) => f.endsWith('.json'))).toEqual([]);
  });

  test('a process group registered by a runner in another process is stopped (SIGTERM, then SIGKILL)', async () => {
    const root = await mkdtemp(join(scratch, 'registry-'));
    // Started here, registered as if by another process: only the registry knows it.
    const ready = join(root, 'ready');
    const child = spawn('/bin/sh', ['-c', `trap '' TERM; echo $$ > ${ready}; sleep 30 & wait; sleep 30`], { detached: true, stdio: 'ignore' });
    const exited = new Promise((r) => child.on('exit', r));
    try {
      // Once the trap is set: SIGTERM alone does not stop it.
      await pidFrom(ready);
      const stat = await readFile(`/proc/${child.pid}/stat`, 'utf8');
      const startTime = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
      const group = { pid: child.pid!, startTime };
      await writeEntry(root, 'lease_other', 'a.json', { host: hostname(), runner: { pid: process.pid, startTime: 'elsewhere' }, group, command: 'sh' });
      const started = Date.now();
      expect(await stopLeaseProcesses(root, 'lease_other', { graceMs: 300 })).toBe(1);
      expect(Date.now() - started).toBeGreaterThanOrEqual(300);
      expect(alive(-child.pid!)).toBe(false);
      await exited;
    } finally {
      killGroup(child.pid);
    }
  });

  test('an entry of another host is not signalled; stopping fails so that the destroy is retried', async () => {
    const root = await mkdtemp(join(scratch, 'registry-'));
    const self = { pid: process.pid, startTime: null };
    await writeEntry(root, 'lease_remote', 'a.json', { host: `not-${hostname()}`, runner: self, group: self, command: 'sleep' });
    await expect(stopLeaseProcesses(root, 'lease_remote')).rejects.toThrow(/another host/);
    expect(alive(process.pid)).toBe(true);
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
