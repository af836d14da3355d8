import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { localHosts, workingCopies } from '../blueprints/index.js';
import type { RegistryEntry } from '../blueprints/local-hosts/process-registry.js';
import type { DatabaseOptions } from '../lib/store/open.js';
import { guardBrokers, realBroker } from './helpers/broker.js';
import { TestRepo } from './helpers/git-repo.js';
import { freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

const child = fileURLToPath(new URL('./fixtures/working-copy-crash-child.ts', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'slipway-wc-crash-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function waitFor<T>(find: () => T | undefined | false | Promise<T | undefined | false>, what: string, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = await find();
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** A repository of many small objects: a file:// clone of it takes a second or more. */
function bigRepo(path: string): { url: string; commit: string } {
  const repo = new TestRepo(path);
  const lines = ['commit refs/heads/main', 'committer t <t@t> 0 +0000', 'data 4', 'big', ''];
  for (let i = 0; i < 20_000; i++) {
    const data = `${i} ${Math.random().toString(36).repeat(4)}\n`;
    lines.push(`M 644 inline d/${i % 200}/${i}.txt`, `data ${Buffer.byteLength(data)}`, data);
  }
  execFileSync('git', ['fast-import', '--quiet'], { cwd: path, input: `${lines.join('\n')}\n`, maxBuffer: 1 << 28 });
  return { url: repo.url, commit: repo.git('rev-parse', 'main') };
}

/**
 * Pids of running `git clone` processes whose argv names `path` and that lead their own process
 * group (the test signals the group). A process read as it exits or execs is skipped.
 */
function clonesInto(path: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let argv: string[];
    let group: number;
    try {
      argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      // stat is "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ')'.
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      group = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
    } catch {
      continue;
    }
    const pid = Number(name);
    if (argv[0] === 'git' && argv[1] === 'clone' && argv.some((a) => a.startsWith(path)) && group === pid) pids.push(pid);
  }
  return pids;
}

/** The process groups localHosts' registry names, for every lease under `root`. */
function registeredGroups(root: string): number[] {
  const registry = join(root, '.processes');
  if (!existsSync(registry)) return [];
  return readdirSync(registry).flatMap((lease) =>
    readdirSync(join(registry, lease))
      .filter((f) => f.endsWith('.json'))
      .map((f) => {
        try {
          return (JSON.parse(readFileSync(join(registry, lease, f), 'utf8')) as RegistryEntry).group?.pid ?? 0;
        } catch {
          return 0;
        }
      }),
  );
}

/** Whether any process of the group led by `pid` is still there (a zombie counts as gone). */
function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
  } catch {
    return false;
  }
  return readdirSync('/proc').some((name) => {
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return fields[2] === String(pid) && fields[0] !== 'Z';
    } catch {
      return false;
    }
  });
}

function start(database: DatabaseOptions, root: string, url: string, commit: string): { proc: ChildProcess; leaseId: Promise<string>; exited: Promise<unknown> } {
  const proc = fork(child, [JSON.stringify(database), root, url, commit], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  let out = '';
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  const leaseId = new Promise<string>((resolve, reject) => {
    proc.stdout!.on('data', (d) => {
      out += d;
      const match = /lease (\S+)/.exec(out);
      if (match) resolve(match[1]!);
    });
    proc.stderr!.on('data', (d) => (out += d));
    void exited.then(() => reject(new Error(`the child exited before it requested its lease: ${out}`)));
  });
  return { proc, leaseId, exited };
}

const git = (cwd: string, ...args: string[]) => execFileSync('git', args, { cwd, encoding: 'utf8', env: { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null' } });

// Invariant 4 with a real process: the broker that clones is SIGKILLed in the middle of
// `git clone`. Its clone runs in its own process group, so it outlives the broker; here it
// is frozen (SIGSTOP) just before the kill, so that it is surely still in flight and
// still there when the next broker resumes, and thawed once that broker has cloned again:
// whatever a dead broker's clone does later must not touch the working copy handed out.
describe('a broker SIGKILLed in the middle of git clone', () => {
  test('the next broker on the same database resumes to a complete, clean checkout, with no half-clone left', async () => {
    const origin = bigRepo(join(scratch, 'origin'));
    const root = join(scratch, 'hosts');
    const database: DatabaseOptions = tierUrl ? { url: tierUrl, schema: freshSchema('wc_crash') } : { embedded: true, dataDir: join(scratch, 'data') };

    const first = start(database, root, origin.url, origin.commit);
    let orphan: number | undefined;
    // Whatever fails, neither the first broker nor its clone outlives the test (a live child
    // process keeps jest from exiting).
    try {
      const leaseId = await first.leaseId;
      // One search per try: a second search could come back empty and leave no pid to signal.
      [orphan] = await waitFor(() => {
        const pids = clonesInto(root);
        return pids.length > 0 && pids;
      }, 'the first broker to start git clone');
      // git makes the directory a moment after it starts (later still on a loaded machine):
      // freeze the clone once the half-made directory is there, before anything else, so it
      // is surely still in flight. (Waiting for the registry first, the test once missed a
      // whole clone on a loaded machine and timed out.)
      const [hostLease] = await waitFor(() => {
        const leases = readdirSync(root).filter((d) => !d.startsWith('.'));
        return leases.length > 0 && leases;
      }, 'the host lease directory');
      const wcRoot = join(root, hostLease!, 'working-copy');
      await waitFor(() => existsSync(join(wcRoot, 'app')), 'git clone to make its directory');
      process.kill(-orphan!, 'SIGSTOP');
      // In flight for localHosts too: its process registry names the clone's process group. (A
      // broker killed between the spawn and that write leaves a process no one can find.)
      await waitFor(() => registeredGroups(root).includes(orphan!), 'the clone to be registered');
      first.proc.kill('SIGKILL');
      await first.exited;
      expect(first.proc.signalCode).toBe('SIGKILL');
      // Killed in flight: the clone's process group is still there, and its directory is half made.
      expect(groupAlive(orphan!)).toBe(true);
      expect(existsSync(join(wcRoot, 'app'))).toBe(true);

      const broker = await realBroker({
        database,
        blueprints: [localHosts({ name: 'local', config: { root, slots: 2 } }), workingCopies({ name: 'wc', config: { hosts: ['local'] } })],
        claimTtl: { seconds: 1 },
        sweepInterval: { milliseconds: 100 },
      });
      try {
        const active = await waitFor(async () => {
          const lease = await broker.leases.get(leaseId);
          if (lease?.status === 'broken' || lease?.status === 'destroyed') throw new Error(`the lease ended ${lease.status}: ${JSON.stringify(await broker.logs({ lease: leaseId }))}`);
          return lease?.status === 'active' && lease;
        }, 'the lease to become active');
        // Now let the dead broker's clone go on, if it is still there, and wait until it is gone.
        try {
          process.kill(-orphan!, 'SIGCONT');
        } catch {
          // already gone: the resumed broker stopped it
        }
        await waitFor(() => !groupAlive(orphan!), 'the dead broker\'s clone to be gone', 20_000);

        const checkout = join(wcRoot, 'app');
        expect(existsSync(join(checkout, '.git'))).toBe(true);
        expect((active.attributes.repositories as any).app.head).toBe(origin.commit);
        expect(git(checkout, 'rev-parse', 'HEAD').trim()).toBe(origin.commit);
        expect(git(checkout, 'status', '--porcelain')).toBe('');
        git(checkout, 'fsck', '--no-progress');
        expect(readdirSync(wcRoot)).toEqual(['app']);
        expect(clonesInto(root)).toEqual([]);

        await broker.release(leaseId);
        await waitFor(async () => (await broker.leases.get(leaseId))?.status === 'destroyed', 'the lease to be destroyed');
      } finally {
        await broker.close();
      }
    } finally {
      if (first.proc.exitCode === null && first.proc.signalCode === null) first.proc.kill('SIGKILL');
      if (orphan) {
        try {
          process.kill(-orphan, 'SIGKILL');
        } catch {
          // gone
        }
      }
    }
  }, 180_000);
});
