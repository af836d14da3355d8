import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { lstat, mkdir, open, readFile, rm, unlink } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CommandStartError } from '../local-hosts/command-error.js';
import { hostKey, type SshHostsSettings } from './config.js';
import { CONTROL_PERSIST_SECONDS, redact, sshArgv, type SshTarget } from './ssh-args.js';
import { SshError } from './ssh-error.js';
import { SSH, spawnSsh } from './ssh-process.js';

/**
 * Multiplexing: each resource has one master connection, and every ssh of its leases
 * goes through it (`ControlPath`), so a build's hundred commands pay one handshake. The
 * master is started with `ControlMaster=auto` (which also takes over a stale socket and
 * joins a live one that another process started) and `ControlPersist`, so it outlives
 * the ssh that started it, and exits on its own after `CONTROL_PERSIST_SECONDS` idle
 * (a broker that died leaves no connection open for long). Commands use
 * `ControlMaster=no`: one that started a master itself would hold its output pipes open
 * for as long as that master lives.
 */

/** Unix socket paths are limited to 104 bytes on macOS, 108 on Linux. */
const MAX_SOCKET_PATH = 100;

/**
 * The directory of the control sockets: one per user on this machine, private (0700),
 * so that no other user can reach a socket and run commands as us.
 */
export function controlDirectory(): string {
  return join(tmpdir(), `slipway-ssh-${process.getuid?.() ?? 'user'}`);
}

/** The control socket of a resource: a short hash, as socket paths are short. The same in every broker process of this machine. */
export function controlPathOf(resourceId: string): string {
  const path = join(controlDirectory(), createHash('sha256').update(resourceId).digest('hex').slice(0, 24));
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH) throw new Error(`the ssh control socket path ${path} is longer than ${MAX_SOCKET_PATH} bytes: set TMPDIR to a shorter directory`);
  return path;
}

/** Creates the control directory, or checks the one there: ours, a directory (not a link), and private. */
async function privateDirectory(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const info = await lstat(dir);
  const uid = process.getuid?.();
  if (!info.isDirectory() || (uid !== undefined && info.uid !== uid) || (info.mode & 0o077) !== 0) {
    throw new Error(`the ssh control directory ${dir} must be a directory of this user with mode 0700 (found ${info.isSymbolicLink() ? 'a symbolic link' : `mode ${(info.mode & 0o777).toString(8)}, owner ${info.uid}`}): remove it`);
  }
}

/** Whether a master answers on the socket (a stale socket left by a dead master refuses the connection). */
function masterAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection(path);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

const starting = new Map<string, Promise<void>>();

/** Makes sure the resource's master connection runs; starts it when it does not. Throws an SshError when ssh cannot connect. */
export async function ensureMaster(settings: SshHostsSettings, target: SshTarget): Promise<void> {
  if (await masterAnswers(target.controlPath)) return;
  // One start at a time per socket in this process; another process's start is joined by ControlMaster=auto.
  let start = starting.get(target.controlPath);
  if (!start) {
    start = startMaster(settings, target).finally(() => starting.delete(target.controlPath));
    starting.set(target.controlPath, start);
  }
  await start;
}

async function startMaster(settings: SshHostsSettings, target: SshTarget): Promise<void> {
  await privateDirectory(controlDirectory());
  // The master keeps the stderr it was started with: a pipe would keep this ssh's
  // output open for as long as the master lives, so stderr goes to a file, read once
  // the foreground ssh exits (after authenticating, with -f).
  const log = `${target.controlPath}.${randomUUID().slice(0, 8)}.log`;
  const handle = await open(log, 'w', 0o600);
  try {
    const argv = sshArgv(settings, target, ['-n', '-N', '-f', '-o', 'ControlMaster=auto', '-o', `ControlPersist=${CONTROL_PERSIST_SECONDS}`]);
    const child = spawn(SSH, argv, { stdio: ['ignore', 'ignore', handle.fd], windowsHide: true });
    const timer = setTimeout(() => child.kill('SIGKILL'), (settings.connectTimeoutSeconds + 30) * 1000);
    const exitCode = await new Promise<number | null>((resolve, reject) => {
      child.on('error', (error) => child.pid === undefined && reject(new CommandStartError(SSH, error)));
      child.on('exit', (code) => resolve(code));
    }).finally(() => clearTimeout(timer));
    if (exitCode !== 0) {
      const stderr = await readFile(log, 'utf8').catch(() => '');
      throw new SshError(hostKey(target), 'connect', exitCode, redact(stderr, settings));
    }
  } finally {
    await handle.close();
    await rm(log, { force: true });
  }
}

/** Closes the resource's master connection (`ssh -O exit`) and removes its socket. Nothing running is success. */
export async function closeMaster(settings: SshHostsSettings, target: SshTarget): Promise<void> {
  if (await masterAnswers(target.controlPath)) {
    const child = spawnSsh(sshArgv(settings, target, ['-O', 'exit']), 'ignore');
    child.stdout!.resume();
    child.stderr!.resume();
    await new Promise<void>((resolve) => {
      child.on('error', () => resolve());
      child.on('close', () => resolve());
    });
    // The master removes its socket as it exits, a moment after the request.
    for (let i = 0; i < 50 && (await masterAnswers(target.controlPath)); i++) await sleep(20);
  }
  await unlink(target.controlPath).catch(() => undefined);
}
