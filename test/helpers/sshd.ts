import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, Socket } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';

/**
 * A real `sshd` for tests, on 127.0.0.1 and a free port, with its own host key and a
 * user key, everything in a temp directory. Run as the current user (root in CI:
 * `PermitRootLogin yes`). `npm test` on a machine without `openssh-server` skips the
 * suites that need it (see `sshdUnavailable`); `.ci/run` installs it.
 */
export interface TestSshd {
  host: string;
  port: number;
  user: string;
  /** The user key (private), authorized for `user`. */
  identityFile: string;
  /** A known_hosts file holding this server's host key for `[127.0.0.1]:port` and `[localhost]:port`. */
  knownHostsFile: string;
  /** A known_hosts file holding another key for the same name: what a man in the middle looks like. */
  wrongKnownHostsFile: string;
  /** An empty known_hosts file. */
  emptyKnownHostsFile: string;
  /** A fresh directory of the temp dir, for a test's own files. */
  dir: string;
  stop(): Promise<void>;
}

export const SSHD = '/usr/sbin/sshd';

/** Why sshd cannot run here, or null when it can. */
export function sshdUnavailable(): string | null {
  if (process.platform === 'win32') return 'no sshd on Windows';
  if (!existsSync(SSHD)) return `${SSHD} is not installed (apt-get install openssh-server; .ci/run does it)`;
  for (const tool of ['ssh', 'ssh-keygen']) {
    try {
      execFileSync(tool, ['-V'], { stdio: 'ignore' });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return `${tool} is not installed`;
    }
  }
  return null;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

const keygen = (file: string) => execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'slipway-test', '-f', file], { stdio: 'ignore' });

/** Starts sshd and resolves once it accepts connections. */
export async function startSshd(): Promise<TestSshd> {
  const dir = await mkdtemp(join(tmpdir(), 'slipway-sshd-'));
  // sshd refuses to start without its privilege-separation directory.
  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
  const hostKey = join(dir, 'host_key');
  const otherKey = join(dir, 'other_host_key');
  const identityFile = join(dir, 'id_user');
  keygen(hostKey);
  keygen(otherKey);
  keygen(identityFile);
  writeFileSync(join(dir, 'authorized_keys'), readFileSync(`${identityFile}.pub`), { mode: 0o600 });

  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const config = join(dir, 'sshd_config');
    writeFileSync(
      config,
      [
        `ListenAddress 127.0.0.1:${port}`,
        `HostKey ${hostKey}`,
        `PidFile ${join(dir, 'sshd.pid')}`,
        `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'PubkeyAuthentication yes',
        'PermitRootLogin yes',
        'StrictModes no',
        'UsePAM no',
        'LogLevel ERROR',
        '',
      ].join('\n'),
    );
    const child = spawn(SSHD, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (c) => (stderr += c));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const ready = await waitForPort(port, exited);
    if (!ready) {
      if (attempt < 3 && /Address already in use/.test(stderr)) continue;
      throw new Error(`sshd did not start: ${stderr.trim() || 'no output'}`);
    }
    const host = '127.0.0.1';
    const name = `[${host}]:${port}`;
    const knownHostsFile = join(dir, 'known_hosts');
    const wrongKnownHostsFile = join(dir, 'known_hosts.wrong');
    const emptyKnownHostsFile = join(dir, 'known_hosts.empty');
    // Also as `localhost`: a second name for this machine, for tests of a pool of two hosts.
    writeFileSync(knownHostsFile, `${name},[localhost]:${port} ${readFileSync(`${hostKey}.pub`, 'utf8').split(' ').slice(0, 2).join(' ')}\n`);
    writeFileSync(wrongKnownHostsFile, `${name} ${readFileSync(`${otherKey}.pub`, 'utf8').split(' ').slice(0, 2).join(' ')}\n`);
    writeFileSync(emptyKnownHostsFile, '');
    const work = join(dir, 'work');
    mkdirSync(work);
    return {
      host,
      port,
      user: userInfo().username,
      identityFile,
      knownHostsFile,
      wrongKnownHostsFile,
      emptyKnownHostsFile,
      dir: work,
      stop: () => stop(child, exited, dir),
    };
  }
}

/** The pids whose parent is `pid` (Linux; elsewhere none). */
function childrenOf(pid: number): number[] {
  if (!existsSync('/proc/self/stat')) return [];
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((name) => {
      try {
        const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid;
      } catch {
        return false;
      }
    })
    .map(Number);
}

async function stop(child: ChildProcess, exited: Promise<number | null>, dir: string): Promise<void> {
  // sshd leaves its connections' processes running when it stops: they go first, and
  // the master connections of the tests' resources, left open by brokers that were
  // closed without releasing them, end with them.
  if (child.pid !== undefined) {
    for (const pid of childrenOf(child.pid)) {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // Gone already.
      }
    }
  }
  if (child.exitCode === null && child.signalCode === null) {
    child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise((r) => (timer = setTimeout(r, 3_000)))]);
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  await rm(dir, { recursive: true, force: true });
}

/** Polls until something listens on the port (true) or sshd exits (false). */
async function waitForPort(port: number, exited: Promise<number | null>): Promise<boolean> {
  let gone = false;
  void exited.then(() => (gone = true));
  const deadline = Date.now() + 10_000;
  while (!gone && Date.now() < deadline) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = new Socket();
      socket.once('connect', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
      socket.connect(port, '127.0.0.1');
    });
    if (open) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}
