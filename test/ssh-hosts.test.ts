/**
 * sshHosts against a real sshd (test/helpers/sshd.ts), on 127.0.0.1: commands, slots,
 * scratch directories, host keys, multiplexing, the remote processes of a lease that
 * ends, bad config, redaction of the identity file, and workingCopies on top. The
 * host is this machine, so a test may look at a remote path or pid directly as well.
 */
import { spawn } from 'node:child_process';
import { copyFileSync, existsSync, lstatSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { CommandStartError, sshHosts, workingCopies, type SshHostsConfig } from '../blueprints/index.js';
import { validateSshHostsConfig } from '../blueprints/ssh-hosts/config.js';
import { controlPathOf } from '../blueprints/ssh-hosts/master.js';
import { redact, remoteShellCommand, shellQuote, sshArgv } from '../blueprints/ssh-hosts/ssh-args.js';
import { AbortError, createBroker, LeaseBrokenError, LeaseNotActiveError, ValidationError, type Broker, type CommandOptions, type Lease } from '../lib/index.js';
import { guardBrokers, realBroker } from './helpers/broker.js';
import { TestRepo } from './helpers/git-repo.js';
import { testDatabase } from './helpers/tier.js';
import { startSshd, sshdUnavailable, type TestSshd } from './helpers/sshd.js';

guardBrokers();

// One sshd for the file. Where it cannot run, the file is skipped, and says why.
let why = sshdUnavailable();
const sshd: TestSshd | null = why ? null : await startSshd().catch((error: Error) => ((why = error.message), null));
if (!sshd) console.warn(`test/ssh-hosts.test.ts: the tests against a real sshd are skipped, as sshd cannot run on this machine: ${why}`);
const describeSsh = sshd ? describe : describe.skip;

/**
 * How long a lease may take to become active here: a safety net, not a speed check (the
 * bench measures speed). Every command is an ssh session, and each session starts the
 * remote user's login shell, which reads ~/.bashrc when run by sshd: where that file
 * runs `pyenv init`, a session took 0.55 s on an idle machine (0.03 s without it), and
 * many times that with both test tiers running. A first checkout is about ten sessions:
 * one CI run timed out at 30 s.
 */
const PATIENCE = { seconds: 120 };
/** Jest's bound for a test that may wait for PATIENCE more than once. */
const PATIENT_TEST_MS = 300_000;
afterAll(async () => {
  await sshd?.stop();
});

const commandChild = fileURLToPath(new URL('./fixtures/ssh-command-child.ts', import.meta.url));

/** A config for the test sshd; `root` is on the same machine, so the test can look at it too. */
function config(overrides: Partial<SshHostsConfig> & { slots?: number } = {}): SshHostsConfig {
  const { slots = 1, ...rest } = overrides;
  return {
    hosts: [{ host: sshd!.host, port: sshd!.port, user: sshd!.user, slots }],
    identityFile: sshd!.identityFile,
    knownHostsFile: sshd!.knownHostsFile,
    root: join(sshd!.dir, 'root'),
    ...rest,
  };
}

/** A process still runs, zombies aside (this container's init may never reap an orphan). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]!);
  } catch {
    return false;
  }
}

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

describeSsh('sshHosts against a real sshd', () => {
  let broker: Broker;
  // Not under the leak guard, which closes a test's brokers after each test: this one serves the block, and afterAll closes it.
  beforeAll(async () => {
    broker = await createBroker({
      database: testDatabase(),
      blueprints: [
        sshHosts({ name: 'ssh', config: config({ slots: 2 }) }),
        sshHosts({ name: 'ssh-wc', config: config({ slots: 2, root: join(sshd!.dir, 'wc-root') }) }),
        workingCopies({ name: 'wc', config: { hosts: ['ssh-wc'] } }),
        // Two names of this machine: a pool of two hosts, with unequal slots.
        sshHosts({ name: 'pool', config: config({ hosts: [{ host: sshd!.host, port: sshd!.port, slots: 1 }, { host: 'localhost', port: sshd!.port, slots: 2 }], root: join(sshd!.dir, 'pool-root') }) }),
      ],
      sweepInterval: { milliseconds: 100 },
    });
  });
  afterAll(async () => {
    await broker?.close();
  });
  const acquire = (spec: { ttl?: { seconds: number } } = {}) => broker.acquire({ type: 'host', blueprints: ['ssh'], timeout: PATIENCE, ...spec });

  describe('the command interface', () => {
    let lease: Lease;
    beforeAll(async () => {
      lease = await acquire();
    });
    afterAll(async () => {
      await lease?.release();
    });
    const run = (argv: readonly string[], options?: CommandOptions) => lease.interface('command').run(argv, options);

    test('runs on the host: exit code, stdout and stderr, in the lease directory, which exists there', async () => {
      const dir = lease.interface('filesystem').path;
      expect(dir).toBe(join(sshd!.dir, 'root', lease.id));
      expect(lease.attributes.path).toBe(dir);
      const result = await run(['sh', '-c', 'echo out; echo err >&2; pwd; test -d "$PWD" && exit 3']);
      expect(result).toEqual({ exitCode: 3, signal: null, stdout: `out\n${dir}\n`, stderr: 'err\n', timedOut: false });
      // Over ssh, not here: sshd sets SSH_CONNECTION in the session.
      expect((await run(['sh', '-c', 'echo "$SSH_CONNECTION"'])).stdout).toMatch(/^127\.0\.0\.1 \d+ 127\.0\.0\.1 \d+\n$/);
    });

    test('argv reaches the program word for word: quotes, $(...), ;, globs, newlines and backslashes are not the shell\'s', async () => {
      const tricky = ["it's", '$(touch pwned)', 'a; touch pwned', '"x" \'y\'', '*', '$HOME', 'two\nlines', 'back\\slash', '', ' spaced '];
      const result = await run(['node', '-e', 'console.log(JSON.stringify(process.argv.slice(1)))', ...tricky]);
      expect(JSON.parse(result.stdout)).toEqual(tricky);
      expect(existsSync(join(lease.interface('filesystem').path, 'pwned'))).toBe(false);
      // The program, not the shell builtin: dash's echo would turn \n into a newline.
      expect((await run(['echo', 'a\\nb'])).stdout).toBe('a\\nb\n');
      expect((await run(['echo $((1 + 2)) | tr 3 X;', 'echo', 'second'], { shell: true })).stdout).toBe('X\nsecond\n');
    });

    test('cwd (relative to the lease directory, or absolute), env (set and unset) and stdin', async () => {
      await run(['mkdir', '-p', 'sub dir']);
      expect((await run(['pwd'], { cwd: 'sub dir' })).stdout).toBe(`${join(lease.interface('filesystem').path, 'sub dir')}\n`);
      expect((await run(['pwd'], { cwd: '/' })).stdout).toBe('/\n');
      const env = await run(['sh', '-c', 'echo "$GREETING|${HOME:-unset}"'], { env: { GREETING: "it's $HOME; `x`", HOME: undefined } });
      expect(env.stdout).toBe("it's $HOME; `x`|unset\n");
      expect((await run(['sh', '-c', 'tr a-z A-Z; echo done >&2'], { stdin: 'streamed\ninput\n' })).stdout).toBe('STREAMED\nINPUT\n');
      const chunks: string[] = [];
      await run(['printf', 'a\\nb\\n'], { onStdout: (c) => chunks.push(c) });
      expect(chunks.join('')).toBe('a\nb\n');
    });

    test('a missing program is a CommandStartError, a missing cwd a ValidationError, a bad env name a ValidationError before anything runs', async () => {
      await expect(run(['no-such-program-here'])).rejects.toThrow(CommandStartError);
      await expect(run(['pwd'], { cwd: 'nowhere' })).rejects.toThrow(/options\.cwd: .*nowhere does not exist on /);
      await expect(run(['true'], { env: { 'A B': '1' } })).rejects.toThrow(ValidationError);
      await expect(run(['true', 'nul\0'])).rejects.toThrow(/argv\[1\]: must not contain a NUL/);
    });

    test('a timeout kills the remote process, not only the local ssh', async () => {
      const pidFile = join(lease.interface('filesystem').path, 'timeout.pid');
      const started = Date.now();
      const result = await run(['sh', '-c', `echo $$ > '${pidFile}'; exec sleep 60`], { timeout: { milliseconds: 700 } });
      expect(result.timedOut).toBe(true);
      expect(result.exitCode).toBeNull();
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(running(Number(readFileSync(pidFile, 'utf8')))).toBe(false);
    });

    test('an abort kills the remote process and rejects with AbortError once it is gone', async () => {
      const pidFile = join(lease.interface('filesystem').path, 'abort.pid');
      const controller = new AbortController();
      const pending = run(['sh', '-c', `echo $$ > '${pidFile}'; exec sleep 60`], { signal: controller.signal });
      await until('the remote process', () => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() !== '');
      const pid = Number(readFileSync(pidFile, 'utf8'));
      expect(running(pid)).toBe(true);
      controller.abort();
      await expect(pending).rejects.toThrow(AbortError);
      expect(running(pid)).toBe(false);
    });
  });

  test('slots: 2 leases at once; a third and fourth wait, and take the freed slots; scratch directories go on release', async () => {
    const first = await acquire();
    const second = await acquire();
    expect([first.attributes.slot, second.attributes.slot].sort()).toEqual([0, 1]);
    const paths = [first, second].map((l) => l.interface('filesystem').path);
    expect(paths.every((p) => existsSync(p))).toBe(true);
    const third = await broker.requestLease({ type: 'host', blueprints: ['ssh'] });
    const fourth = await broker.requestLease({ type: 'host', blueprints: ['ssh'] });
    await sleep(300);
    expect([await third.status(), await fourth.status()]).toEqual(['pending', 'pending']);

    await first.release();
    expect(existsSync(paths[0]!)).toBe(false);
    const thirdActive = await third.whenActive({ timeout: PATIENCE });
    expect(thirdActive.attributes.slot).toBe(first.attributes.slot);
    expect(await fourth.status()).toBe('pending');
    await second.release();
    const fourthActive = await fourth.whenActive({ timeout: PATIENCE });
    expect(fourthActive.attributes.slot).toBe(second.attributes.slot);
    expect((await fourthActive.interface('command').run(['true'])).exitCode).toBe(0);
    await Promise.all([thirdActive.release(), fourthActive.release()]);
    expect(existsSync(thirdActive.interface('filesystem').path)).toBe(false);
    // One resource is the one host, however many leases it served.
    expect(await broker.resources.list({ blueprint: 'ssh' })).toHaveLength(1);
  }, PATIENT_TEST_MS);

  test('a pool of two hosts: one resource each, each host\'s own slots, and a lease beyond them all waits', async () => {
    const leases = await Promise.all([1, 2, 3].map(() => broker.acquire({ type: 'host', blueprints: ['pool'], timeout: PATIENCE })));
    const byHost = new Map<string, number[]>();
    for (const lease of leases) byHost.set(lease.resource.attributes.host as string, [...(byHost.get(lease.resource.attributes.host as string) ?? []), lease.attributes.slot as number]);
    expect(Object.fromEntries([...byHost].map(([host, slots]) => [host, slots.sort()]))).toEqual({ [sshd!.host]: [0], localhost: [0, 1] });
    // Each runs on its own host, as ssh names it.
    const hosts = await Promise.all(leases.map(async (l) => (await l.interface('command').run(['true'])).exitCode));
    expect(hosts).toEqual([0, 0, 0]);
    const fourth = await broker.requestLease({ type: 'host', blueprints: ['pool'] });
    await sleep(300);
    expect(await fourth.status()).toBe('pending');
    const onLocalhost = leases.find((l) => l.resource.attributes.host === 'localhost')!;
    await onLocalhost.release();
    expect((await fourth.whenActive({ timeout: PATIENCE })).resource.id).toBe(onLocalhost.resource.id);
    expect(await broker.resources.list({ blueprint: 'pool' })).toHaveLength(2);
    await Promise.all([...leases.filter((l) => l !== onLocalhost).map((l) => l.release()), fourth.release()]);
  }, PATIENT_TEST_MS);

  test('a lease that expires stops its running command and, at its destroy, what its commands left in the background', async () => {
    // Long enough to be acquired and start two commands on a loaded machine (5 s was not, in a CI run on 2 busy cores).
    const lease = await acquire({ ttl: { seconds: 10 } });
    const run = lease.interface('command').run;
    const background = Number((await run(['sh', '-c', 'sleep 60 >/dev/null 2>&1 & echo $!'])).stdout);
    const pidFile = join(lease.interface('filesystem').path, 'long.pid');
    const long = run(['sh', '-c', `echo $$ > '${pidFile}'; exec sleep 60`]).catch((e: unknown) => e);
    await until('the remote process', () => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() !== '');
    const pid = Number(readFileSync(pidFile, 'utf8'));
    expect([running(background), running(pid)]).toEqual([true, true]);

    const error = await long;
    expect(error).toBeInstanceOf(LeaseNotActiveError);
    expect((error as LeaseNotActiveError).why).toBe('expired');
    expect(running(pid)).toBe(false);
    await until('the lease to be destroyed', async () => (await broker.leases.get(lease.id))?.status === 'destroyed', 15_000);
    expect(running(background)).toBe(false);
    expect(existsSync(lease.interface('filesystem').path)).toBe(false);
    const logs = (await broker.logs({ lease: lease.id })).map((l) => l.message).join('\n');
    // The background group, at least. The expiry stops the running command through its own
    // ssh session while the destroy runs on the host: when the destroy looks first, that
    // group still runs and is counted (and stopped) by both, so the count may be 2.
    expect(logs).toMatch(/Stopped [12] process group\(s\) the lease's commands left running on /);
  });

  test('a broker killed in the middle of a command leaves it running on the host; the next process to use the lease stops it first', async () => {
    const lease = await acquire();
    const child = spawn(process.execPath, ['--import', 'tsx', commandChild, JSON.stringify({
      id: lease.id,
      directory: lease.interface('filesystem').path,
      registry: join(sshd!.dir, 'root', '.processes', lease.id),
      settings: validateSshHostsConfig(config({ slots: 2 })),
      target: { host: sshd!.host, port: sshd!.port, user: sshd!.user, controlPath: controlPathOf(lease.resource.id) },
    })], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout!.on('data', (c) => (out += c));
    await until('the command to run on the host', () => /pid \d+\n/.test(out), 20_000);
    const pid = Number(/pid (\d+)/.exec(out)![1]);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    await sleep(200);
    // Nothing stops it on its own: no terminal, no hangup.
    expect(running(pid)).toBe(true);
    expect((await lease.interface('command').run(['echo', 'next'])).stdout).toBe('next\n');
    expect(running(pid)).toBe(false);
    await lease.release();
  });

  test('workingCopies on sshHosts: clones over the ssh command interface once, and each lease checks out its own commit', async () => {
    const repo = new TestRepo(join(sshd!.dir, 'origin'));
    const commits = [1, 2].map((i) => repo.commit({ 'version.txt': `v${i}\n` }));
    for (const [i, commit] of commits.entries()) {
      const lease = await broker.acquire({ type: 'working-copy', attributes: { repositories: { app: { url: repo.url, commit } } }, timeout: PATIENCE });
      expect((lease.attributes.repositories as any).app.head).toBe(commit);
      const command = lease.interface('command');
      expect((await command.run(['cat', 'version.txt'], { cwd: 'app' })).stdout).toBe(`v${i + 1}\n`);
      expect((await command.run(['git', 'rev-parse', 'HEAD'], { cwd: 'app' })).stdout.trim()).toBe(commit);
      // The checkout is on the ssh host's lease, in its scratch directory.
      expect(lease.interface('filesystem').path.startsWith(join(sshd!.dir, 'wc-root'))).toBe(true);
      expect((await command.run(['sh', '-c', 'echo "$SSH_CONNECTION"'])).stdout).toMatch(/^127\.0\.0\.1 /);
      await lease.release();
    }
    expect(await broker.logs({ type: 'working-copies.clone' })).toHaveLength(1);
  }, PATIENT_TEST_MS);

  test('multiplexing: one connection per resource, its control socket there while the resource lives and gone after its destroy', async () => {
    const lease = await acquire();
    const socket = controlPathOf(lease.resource.id);
    expect(lstatSync(socket).isSocket()).toBe(true);
    // Every command is a session of the one connection: the same client port each time.
    const ports = new Set<string>();
    for (let i = 0; i < 3; i++) ports.add((await lease.interface('command').run(['sh', '-c', 'echo "$SSH_CONNECTION"'])).stdout);
    expect(ports.size).toBe(1);
    await lease.release();
    await broker.releaseResource(lease.resource.id);
    await until('the resource to be destroyed', async () => (await broker.resources.get(lease.resource.id))?.status === 'destroyed');
    expect(existsSync(socket)).toBe(false);
    const logs = (await broker.logs({ resource: lease.resource.id })).map((l) => l.message);
    expect(logs).toContain(`Closed the connection to ${sshd!.user}@${sshd!.host}:${sshd!.port}.`);
  });
});

describeSsh('sshHosts: host keys and the identity file', () => {
  test('a wrong host key is refused under strict; accept-new takes a new host; the identity file path is in no error and no log', async () => {
    const acceptNew = join(sshd!.dir, 'known_hosts.accept-new');
    copyFileSync(sshd!.emptyKnownHostsFile, acceptNew);
    const secretKey = join(sshd!.dir, 'do-not-log-this-key-path');
    const broker = await realBroker({
      blueprints: [
        sshHosts({ name: 'strict', config: config({ knownHostsFile: sshd!.wrongKnownHostsFile }) }),
        sshHosts({ name: 'accept-new', config: config({ knownHostsFile: acceptNew, hostKeyPolicy: 'accept-new' }) }),
        sshHosts({ name: 'bad-key', config: config({ identityFile: secretKey }) }),
      ],
      sweepInterval: { milliseconds: 100 },
      maxAllocationFailures: 1,
    });
    const acquire = (name: string) => broker.acquire({ type: 'host', blueprints: [name], timeout: PATIENCE });

    const refused = await acquire('strict').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LeaseBrokenError);
    expect((refused as Error).message).toMatch(/ssh to .*127\.0\.0\.1:\d+ failed to connect \(exit code 255\): [\s\S]*Host key verification failed\./);

    const lease = await acquire('accept-new');
    expect((await lease.interface('command').run(['echo', 'hi'])).stdout).toBe('hi\n');
    expect(readFileSync(acceptNew, 'utf8')).toMatch(/ssh-ed25519 /);
    await lease.release();

    const denied = await acquire('bad-key').catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(LeaseBrokenError);
    // ssh names the file in its warning; the error says <identityFile> instead.
    expect((denied as Error).message).toMatch(/Permission denied/);
    expect((denied as Error).message).toContain('<identityFile>');
    const everything = JSON.stringify(await broker.logs()) + String((denied as Error).message);
    expect(everything).not.toContain('do-not-log-this-key-path');
    expect(everything).not.toContain(sshd!.identityFile);
    await broker.close();
  });
});

describe('sshHosts: bad config is refused before anything runs, naming the field', () => {
  const good = { hosts: [{ host: 'build-1.example.com' }] };
  const corpus: Array<[field: string, config: unknown]> = [
    ['config', null],
    ['config', 'build-1'],
    ['config.hosts', {}],
    ['config.hosts', { hosts: [] }],
    ['config.hosts', { hosts: 'build-1' }],
    ['config.hosts[0]', { hosts: ['build-1'] }],
    ['config.hosts[0].host', { hosts: [{ host: '-oProxyCommand=touch pwned' }] }],
    ['config.hosts[0].host', { hosts: [{ host: 'build 1' }] }],
    ['config.hosts[0].host', { hosts: [{ host: 'build-1\nevil' }] }],
    ['config.hosts[0].host', { hosts: [{ host: 'build\u00001' }] }],
    ['config.hosts[0].host', { hosts: [{ host: '' }] }],
    ['config.hosts[0].host', { hosts: [{ host: 'user@build-1' }] }],
    ['config.hosts[0].host', { hosts: [{ host: '[::1]' }] }],
    ['config.hosts[0].host', { hosts: [{ host: 'a..b' }] }],
    ['config.hosts[0].host', { hosts: [{ host: 42 }] }],
    ['config.hosts[0].port', { hosts: [{ host: 'h', port: 0 }] }],
    ['config.hosts[0].port', { hosts: [{ host: 'h', port: 65536 }] }],
    ['config.hosts[0].port', { hosts: [{ host: 'h', port: 22.5 }] }],
    ['config.hosts[0].port', { hosts: [{ host: 'h', port: '22' }] }],
    ['config.hosts[0].user', { hosts: [{ host: 'h', user: '-lroot' }] }],
    ['config.hosts[0].user', { hosts: [{ host: 'h', user: 'ci user' }] }],
    ['config.hosts[0].user', { hosts: [{ host: 'h', user: 'ci;rm' }] }],
    ['config.hosts[0].slots', { hosts: [{ host: 'h', slots: 0 }] }],
    ['config.hosts[0].slots', { hosts: [{ host: 'h', slots: 1.5 }] }],
    ['config.hosts[0].slots', { hosts: [{ host: 'h', slots: 5000 }] }],
    ['config.hosts[0].password', { hosts: [{ host: 'h', password: 'x' }] }],
    ['config.hosts[1]', { hosts: [{ host: 'h' }, { host: 'h', port: 22 }] }],
    ['config.identityFile', { ...good, identityFile: 'keys/id_ed25519' }],
    ['config.identityFile', { ...good, identityFile: '/keys/id\n_ed25519' }],
    ['config.identityFile', { ...good, identityFile: '/keys/%d/id' }],
    ['config.knownHostsFile', { ...good, knownHostsFile: '/a b/known_hosts' }],
    ['config.knownHostsFile', { ...good, knownHostsFile: 'known_hosts' }],
    ['config.hostKeyPolicy', { ...good, hostKeyPolicy: 'no' }],
    ['config.hostKeyPolicy', { ...good, hostKeyPolicy: 'off' }],
    ['config.connectTimeout', { ...good, connectTimeout: { milliseconds: 10 } }],
    ['config.connectTimeout', { ...good, connectTimeout: 'soon' }],
    ['config.root', { ...good, root: 'relative' }],
    ['config.root', { ...good, root: '/' }],
    ['config.root', { ...good, root: '/tmp/../etc' }],
    ['config.root', { ...good, root: '/tmp/x\0y' }],
    ['config.password', { ...good, password: 'hunter2' }],
  ];

  test.each(corpus.map(([field, value]) => [field, JSON.stringify(value), value] as const))('%s: %s', (field, _shown, value) => {
    let error: unknown;
    try {
      sshHosts({ name: 'pool', config: value as SshHostsConfig });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe(field);
  });

  test('a bad identity file path is not repeated in the error', () => {
    const secret = '/home/ci/keys/deploy key';
    expect(() => sshHosts({ name: 'pool', config: { ...good, identityFile: secret } })).toThrow(ValidationError);
    try {
      sshHosts({ name: 'pool', config: { ...good, identityFile: secret } });
    } catch (error) {
      expect(String((error as Error).message)).not.toContain('deploy');
    }
  });

  test('limits.maxResources beyond one per host is refused; the defaults are one resource per host and its slots', () => {
    expect(() => sshHosts({ name: 'pool', config: good, limits: { maxResources: 2 } })).toThrow(/limits\.maxResources: must be at most 1/);
    const pool = sshHosts({ name: 'pool', config: { hosts: [{ host: 'a', slots: 3 }, { host: 'b', slots: 3 }] } });
    expect(pool.limits.maxResources).toBe(2);
    expect(pool.limits.maxLeasesPerResource).toBe(3);
    expect(sshHosts({ name: 'pool', config: good, limits: { maxResources: undefined } }).limits.maxResources).toBe(1);
    // Unequal slots: no blueprint-wide maxLeasesPerResource, each host's own count is asked of canAcquireLease.
    expect(sshHosts({ name: 'pool', config: { hosts: [{ host: 'a', slots: 1 }, { host: 'b', slots: 4 }] } }).limits.maxLeasesPerResource).toBeNull();
    expect(pool.config).toMatchObject({ hostKeyPolicy: 'strict', root: '/tmp/slipway-ssh' });
  });
});

describe('sshHosts: the ssh argv and the remote quoting', () => {
  const settings = validateSshHostsConfig({ hosts: [{ host: 'build-1.example.com', port: 2222, user: 'ci' }], identityFile: '/etc/ci/id', knownHostsFile: '/etc/ci/known_hosts', connectTimeout: { seconds: 5 } });
  const target = { host: 'build-1.example.com', port: 2222, user: 'ci', controlPath: '/tmp/slipway-ssh-0/0123abcd' };

  test('every option is its own word, checking is strict, and the destination comes after "--"', () => {
    const argv = sshArgv(settings, target, ['-n'], 'true');
    expect(argv).toEqual([
      '-T', '-o', 'BatchMode=yes', '-o', 'StrictHostKeyChecking=yes', '-o', 'UserKnownHostsFile=/etc/ci/known_hosts', '-o', 'ConnectTimeout=5',
      '-o', 'IdentitiesOnly=yes', '-i', '/etc/ci/id', '-o', 'LogLevel=ERROR', '-o', 'ControlPath=/tmp/slipway-ssh-0/0123abcd', '-p', '2222', '-l', 'ci',
      '-n', '--', 'build-1.example.com', 'true',
    ]);
    const acceptNew = validateSshHostsConfig({ hosts: [{ host: 'h' }], hostKeyPolicy: 'accept-new' });
    expect(sshArgv(acceptNew, { ...target, user: null }, [])).toEqual(expect.arrayContaining(['StrictHostKeyChecking=accept-new']));
    expect(sshArgv(acceptNew, { ...target, user: null }, [])).not.toContain('-l');
  });

  test('each word is single-quoted for the remote shell, a quote as \'\\\'\', and a NUL is refused', () => {
    expect(shellQuote("it's $HOME")).toBe("'it'\\''s $HOME'");
    expect(remoteShellCommand('echo "$1"', 'slipway', ['a b', ''])).toBe(`sh -c 'echo "$1"' 'slipway' 'a b' ''`);
    expect(() => shellQuote('a\0b', 'argv[1]')).toThrow(/argv\[1\]: must not contain a NUL/);
  });

  test('the identity file path is redacted from text', () => {
    expect(redact('Warning: Identity file /etc/ci/id not accessible', settings)).toBe('Warning: Identity file <identityFile> not accessible');
  });
});
