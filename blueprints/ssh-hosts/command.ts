import { randomUUID } from 'node:crypto';
import { posix } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AbortError, LeaseNotActiveError, ValidationError, type CommandInterface, type CommandOptions, type CommandResult } from '../../lib/index.js';
import { checkArgv, checkCommandOptions, KILL_GRACE_MS, verdict, type CommandOptionRules } from '../command-options.js';
import { hostname } from 'node:os';
import { CommandStartError } from '../local-hosts/command-error.js';
import { isRunning, thisProcess } from '../local-hosts/process-identity.js';
import { hostKey, type SshHostsSettings } from './config.js';
import { ensureMaster } from './master.js';
import { ORPHANS, STOP, WRAPPER } from './remote-scripts.js';
import { redact, remoteShellCommand, sshArgv, type SshTarget } from './ssh-args.js';
import { SshError } from './ssh-error.js';
import { runScript, spawnSsh } from './ssh-process.js';

/** How long a stop waits for a command that is still connecting to reach the host, so as to stop it there too. */
const MARKER_WAIT_MS = 2_000;

/** The lease a command interface works for, on its host. */
export interface SshCommandLease {
  id: string;
  /** Its scratch directory on the host: the default working directory. */
  directory: string;
  /** Its process registry on the host (see `remote-scripts.ts`). */
  registry: string;
  settings: SshHostsSettings;
  target: SshTarget;
  /** The lease's signal, read when a command starts (reading it starts the broker's watch). */
  signal(): AbortSignal;
}

/** The `command` interface of a lease. */
export function commandInterface(lease: SshCommandLease): CommandInterface {
  return { run: (argv, options) => runCommand(argv, options, lease) };
}

/** The first bytes the wrapper writes: `\x01` and a letter (see `WRAPPER`). */
const MARK = '\u0001';

/**
 * Runs one program on the host and collects its output, with the semantics of
 * `localHosts`' `run()`: argv reaches the program as it is (each word quoted for the
 * remote shell; `shell: true` runs the joined argv through the remote `sh -c`), `cwd` is
 * taken from the lease directory, `env` is applied on top of the remote login
 * environment, `stdin` is streamed. Resolves with the exit code, also when it is not zero;
 * rejects with CommandStartError when the program is not found on the host, SshError when
 * ssh fails before the command starts, AbortError when `options.signal` aborts and
 * LeaseNotActiveError when the lease is or becomes not active (both after the remote
 * process group is gone), and ValidationError on bad input.
 *
 * A process killed by a signal on the host is reported as the shell reports it, exit code
 * 128 + the signal number, with `signal` null: ssh does not pass the signal on. A
 * connection lost once the command runs is exit code 255, as ssh reports it.
 */
export async function runCommand(argv: readonly string[], options: CommandOptions | undefined, lease: SshCommandLease): Promise<CommandResult> {
  const leaseSignal = lease.signal();
  if (leaseSignal.aborted) throw leaseSignal.reason;
  checkArgv(argv);
  const o = checkCommandOptions(options, REMOTE_RULES);
  const cwd = o.cwd === undefined ? lease.directory : posix.isAbsolute(o.cwd) ? o.cwd : posix.join(lease.directory, o.cwd);
  if (o.signal?.aborted) throw new AbortError(`command ${JSON.stringify(argv[0])} was aborted before it started`, { cause: o.signal.reason });

  await ensureMaster(lease.settings, lease.target);
  await stopOrphansOnce(lease);
  const entry = randomUUID();
  const envWords = Object.entries(o.env ?? {}).map(([name, value]) => (value === undefined ? name : `${name}=${value}`));
  const program = o.shell ? ['sh', '-c', argv.join(' ')] : [...argv];
  const remote = remoteShellCommand(WRAPPER, 'slipway', [lease.registry, entry, lease.directory, cwd, runner(), ...envWords, '--', ...program]);
  const extra = o.stdin === undefined ? ['-n', '-o', 'ControlMaster=no'] : ['-o', 'ControlMaster=no'];
  const child = spawnSsh(sshArgv(lease.settings, lease.target, extra, remote), o.stdin === undefined ? 'ignore' : 'pipe');
  const stopRemote = () => runScript(lease.settings, lease.target, STOP, [posix.join(lease.registry, `${entry}.pid`), String(KILL_GRACE_MS / 100)], KILL_GRACE_MS + 15_000);
  const outcome = await supervise(child, o, leaseSignal, stopRemote);

  const command = JSON.stringify(argv[0]);
  const stderr = redact(outcome.stderr, lease.settings);
  if (outcome.callbackError) throw outcome.callbackError;
  if (outcome.leaseEnded) throw leaseSignal.reason;
  if (outcome.aborted) throw new AbortError(`command ${command} was aborted`, { cause: o.signal?.reason });
  switch (outcome.marker) {
    case '+':
      break;
    case 'C':
      throw (await verdict(leaseSignal)) ?? new LeaseNotActiveError(lease.id, 'released');
    case 'G':
      throw (await verdict(leaseSignal)) ?? new ValidationError('options.cwd', `${lease.directory} does not exist on ${hostKey(lease.target)}: the lease directory was removed while the lease is active`);
    case 'D':
      throw new ValidationError('options.cwd', `${cwd} does not exist on ${hostKey(lease.target)}, or is not a directory`);
    case 'N':
      throw new CommandStartError(argv[0]!, Object.assign(new Error(`not found on ${hostKey(lease.target)}`), { code: 'ENOENT' }));
    default:
      // No marker: ssh failed before the wrapper ran (or the wrapper could not record the command).
      if (!outcome.timedOut) throw new SshError(hostKey(lease.target), `run ${command}`, outcome.exitCode, stderr);
  }
  if (outcome.timedOut) return { exitCode: null, signal: outcome.stopSignal, stdout: outcome.stdout, stderr, timedOut: true };
  return { exitCode: outcome.exitCode, signal: null, stdout: outcome.stdout, stderr, timedOut: false };
}

/** This broker process, as the registry on the host names a command's runner: `<machine> <pid> <start time>`. */
function runner(): string {
  const self = thisProcess();
  return `${hostname().replace(/\s/g, '_')} ${self.pid} ${self.startTime === null ? '-' : encodeURIComponent(self.startTime)}`;
}

/** Leases whose leftovers this process has stopped (see `stopOrphansOnce`). */
const checked = new Set<string>();

/**
 * Before this process's first command on a lease: stops the commands whose runner, a
 * broker process of this machine, is dead. A broker SIGKILLed in the middle of a command
 * leaves it running on the host, and a resumed hook that starts the same work over (a
 * `git clone` into the same directory) must not share the lease with it. Once per lease
 * and process, as it costs a round trip: the case it is for is a new process taking over
 * a lease. Runners of other machines are left alone, as in `localHosts`.
 */
async function stopOrphansOnce(lease: SshCommandLease): Promise<void> {
  if (checked.has(lease.id)) return;
  const listed = await runScript(lease.settings, lease.target, ORPHANS, [lease.registry], 30_000);
  if (listed.exitCode !== 0) throw new SshError(hostKey(lease.target), 'list the lease\'s commands', listed.exitCode, listed.stderr);
  const here = hostname().replace(/\s/g, '_');
  for (const line of listed.stdout.split('\n')) {
    const [file, host, pid, startTime] = line.split(' ');
    if (!file || !/^[0-9a-f-]+\.pid$/.test(file) || host !== here || !/^\d+$/.test(pid ?? '')) continue;
    if (isRunning({ pid: Number(pid), startTime: startTime === '-' || startTime === undefined ? null : decodeURIComponent(startTime) })) continue;
    const stopped = await runScript(lease.settings, lease.target, STOP, [posix.join(lease.registry, file), String(KILL_GRACE_MS / 100)], KILL_GRACE_MS + 15_000);
    if (stopped.exitCode !== 0) throw new SshError(hostKey(lease.target), 'stop what a dead broker left running', stopped.exitCode, stopped.stderr);
  }
  checked.add(lease.id);
  // Bounded: a long-lived process serves many leases; forgetting one costs a round trip.
  if (checked.size > 10_000) checked.delete(checked.values().next().value!);
}

interface Outcome {
  marker: string | null;
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  aborted: boolean;
  leaseEnded: boolean;
  callbackError: unknown;
  /** What the remote group was last sent, when this side stopped it. */
  stopSignal: string | null;
}

/**
 * Follows one ssh: strips the wrapper's marker from stdout, feeds stdin, and on a timeout,
 * an abort or the end of the lease stops the remote process group through another
 * session (`STOP`), then the local ssh. Resolves once both are over.
 */
function supervise(child: ReturnType<typeof spawnSsh>, o: CommandOptions & { timeoutMs?: number }, leaseSignal: AbortSignal, stopRemote: () => Promise<unknown>): Promise<Outcome> {
  return new Promise<Outcome>((resolve, reject) => {
    const out: Outcome = { marker: null, exitCode: null, stdout: '', stderr: '', timedOut: false, aborted: false, leaseEnded: false, callbackError: null, stopSignal: null };
    let pending = '';
    let stopping: Promise<unknown> | null = null;
    let exited = false;
    let neverStarted = false;
    let localKill: NodeJS.Timeout | undefined;

    let markerSeen: () => void = () => undefined;
    const started = new Promise<void>((done) => (markerSeen = done));
    const stop = () => {
      if (exited || stopping) return;
      out.stopSignal = 'SIGTERM';
      // The remote group first: killing the local ssh alone would leave it running. The
      // wrapper records the group before it writes its marker: once the marker is here
      // (or soon after the stop), STOP finds the group.
      stopping = Promise.race([started, sleep(MARKER_WAIT_MS)])
        .then(stopRemote)
        .catch(() => undefined)
        .then(() => child.kill('SIGTERM'));
      // Should the host not answer, the local ssh goes anyway; the lease's destroy stops what is left there.
      localKill = setTimeout(() => child.kill('SIGKILL'), KILL_GRACE_MS + 20_000);
    };
    const timer = o.timeoutMs === undefined ? undefined : setTimeout(() => ((out.timedOut = true), stop()), o.timeoutMs);
    const onAbort = () => ((out.aborted = true), stop());
    o.signal?.addEventListener('abort', onAbort, { once: true });
    const onLeaseEnd = () => ((out.leaseEnded = true), stop());
    leaseSignal.addEventListener('abort', onLeaseEnd, { once: true });
    // Either may have aborted while the connection was being checked.
    if (leaseSignal.aborted) onLeaseEnd();
    else if (o.signal?.aborted) onAbort();
    const cleanup = () => {
      if (timer) clearTimeout(timer);
      if (localKill) clearTimeout(localKill);
      o.signal?.removeEventListener('abort', onAbort);
      leaseSignal.removeEventListener('abort', onLeaseEnd);
    };

    const emit = (chunk: string, callback: ((chunk: string) => void) | undefined, append: (c: string) => void) => {
      if (chunk === '') return;
      append(chunk);
      if (!callback || out.callbackError) return;
      try {
        callback(chunk);
      } catch (error) {
        out.callbackError = error;
        stop();
      }
    };
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (chunk: string) => {
      if (out.marker === null) {
        // Anything before the marker is the login shell's (a noisy profile), not the command's.
        pending += chunk;
        const at = pending.indexOf(MARK);
        if (at < 0 || at + 1 >= pending.length) return;
        out.marker = pending[at + 1]!;
        markerSeen();
        chunk = pending.slice(at + 2);
        pending = '';
      }
      emit(chunk, o.onStdout, (c) => (out.stdout += c));
    });
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => emit(chunk, o.onStderr, (c) => (out.stderr += c)));

    if (child.stdin) {
      // A program that exits without reading its input makes the write fail with EPIPE; that is its business.
      child.stdin.on('error', () => undefined);
      child.stdin.end(o.stdin);
    }

    child.on('error', (error) => {
      if (child.pid !== undefined) return;
      exited = true;
      neverStarted = true;
      cleanup();
      reject(new CommandStartError('ssh', error));
    });
    child.on('close', (exitCode) => {
      if (neverStarted) return;
      exited = true;
      markerSeen();
      out.exitCode = exitCode;
      // A stop under way finishes first: the caller learns of the abort once the remote group is gone.
      void Promise.resolve(stopping).then(() => {
        cleanup();
        resolve(out);
      });
    });
  });
}

// The remote shell sets the variables: a name it cannot take would be refused there, or taken as something else.
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const REMOTE_RULES: CommandOptionRules = {
  envName: (key) => (ENV_NAME.test(key) ? null : new ValidationError(`options.env.${JSON.stringify(key)}`, 'is not a variable name a remote shell can set: letters, digits and "_", not starting with a digit')),
  singleLineCwd: true,
};
