import { spawn, type ChildProcess } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';
import { AbortError, LeaseNotActiveError, ValidationError, type CommandInterface, type CommandOptions, type CommandResult } from '../../lib/index.js';
import { checkArgv, checkCommandOptions, KILL_GRACE_MS, verdict, type CommandOptionRules } from '../command-options.js';
import { CommandStartError } from './command-error.js';
import { groupRuns, startTimeOf } from './process-identity.js';
import { enterRegistry, stopOrphanedProcesses, type RegistryTicket } from './process-registry.js';

// POSIX: each command leads its own process group, so a timeout also stops what it
// started (a shell's children hold stdout open and would keep `close` from firing).
const OWN_PROCESS_GROUP = process.platform !== 'win32';

/** The lease a command interface works for. */
export interface CommandLease {
  id: string;
  /** Its scratch directory: the default working directory, and there while the lease lives. */
  directory: string;
  /** The blueprint's root, which holds the process registry. */
  root: string;
  /** The lease's signal, read when a command starts (reading it starts the broker's watch). */
  signal(): AbortSignal;
}

/** The `command` interface of a lease. */
export function commandInterface(lease: CommandLease): CommandInterface {
  return { run: (argv, options) => runCommand(argv, options, lease) };
}

/**
 * Runs one process and collects its output. argv goes straight to the executable (no
 * shell, so `;`, `$(...)` and quotes are plain characters) unless `options.shell` is true.
 * Resolves with the exit code, also when it is not zero; rejects when the process cannot
 * start (CommandStartError), when `options.signal` aborts (AbortError, after the process
 * is gone), when the lease is or becomes not active (LeaseNotActiveError, after the
 * process group is gone), and on bad input (ValidationError).
 */
export async function runCommand(argv: readonly string[], options: CommandOptions | undefined, lease: CommandLease): Promise<CommandResult> {
  const leaseSignal = lease.signal();
  if (leaseSignal.aborted) throw leaseSignal.reason;
  checkArgv(argv);
  const o = checkCommandOptions(options, LOCAL_RULES);
  const cwd = o.cwd === undefined ? lease.directory : isAbsolute(o.cwd) ? o.cwd : resolve(lease.directory, o.cwd);
  await checkDirectory(cwd, cwd === lease.directory, leaseSignal);
  if (o.signal?.aborted) throw new AbortError(`command ${JSON.stringify(argv[0])} was aborted before it started`, { cause: o.signal.reason });

  // Registered before the spawn, so that a destroy in any process finds the command: see process-registry.ts.
  const ticket = await enterRegistry(lease.root, lease.id, lease.directory, argv[0]!);
  if (ticket === 'closing') throw (await verdict(leaseSignal)) ?? new LeaseNotActiveError(lease.id, 'released');
  if (ticket === 'gone') throw (await verdict(leaseSignal)) ?? missingLeaseDirectory(lease.directory);
  // A broker that died in the middle of a command left it running, unsupervised: it goes
  // before this one starts, which may be the same work started over (a resumed clone).
  try {
    await stopOrphanedProcesses(lease.root, lease.id, { graceMs: KILL_GRACE_MS });
  } catch (error) {
    await ticket.leave();
    throw error;
  }

  const env = { ...process.env };
  for (const [key, value] of Object.entries(o.env ?? {})) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
  const stdio = [o.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] as const;
  const spawnOptions = { cwd, env, stdio: [...stdio], detached: OWN_PROCESS_GROUP, windowsHide: true };
  let child: ChildProcess;
  try {
    child = o.shell ? spawn(argv.join(' '), { ...spawnOptions, shell: true }) : spawn(argv[0]!, argv.slice(1), spawnOptions);
  } catch (error) {
    await ticket.leave();
    throw error;
  }
  // Read at once, before the event loop can reap a child that already exited.
  const registered = child.pid === undefined ? Promise.resolve() : ticket.started({ pid: child.pid, startTime: startTimeOf(child.pid) });
  return supervise(child, argv[0]!, o, { signal: leaseSignal, ticket, registered });
}

const missingLeaseDirectory = (directory: string) => new ValidationError('options.cwd', `${directory} does not exist: the lease directory was removed while the lease is active`);

/** What ties a running command to its lease: the lease signal, and the command's registry entry. */
interface LeaseBinding {
  signal: AbortSignal;
  ticket: RegistryTicket;
  /** The entry naming the process group is written. */
  registered: Promise<void>;
}

function supervise(child: ChildProcess, command: string, o: CommandOptions & { timeoutMs?: number }, lease: LeaseBinding): Promise<CommandResult> {
  return new Promise<CommandResult>((resolvePromise, reject) => {
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    let aborted = false;
    let leaseEnded = false;
    let callbackError: unknown = null;
    let exited = false;
    let neverStarted = false;
    let escalation: NodeJS.Timeout | undefined;

    const stop = () => {
      if (exited) return;
      signalProcess(child, 'SIGTERM');
      escalation ??= setTimeout(() => signalProcess(child, 'SIGKILL'), KILL_GRACE_MS);
    };
    const timer = o.timeoutMs === undefined ? undefined : setTimeout(() => ((timedOut = true), stop()), o.timeoutMs);
    const onAbort = () => ((aborted = true), stop());
    o.signal?.addEventListener('abort', onAbort, { once: true });
    const onLeaseEnd = () => ((leaseEnded = true), stop());
    lease.signal.addEventListener('abort', onLeaseEnd, { once: true });
    // It may have aborted while the command was being registered.
    if (lease.signal.aborted) onLeaseEnd();
    // A process no destroy could find must not run: stop it and report why.
    lease.registered.catch((error: unknown) => {
      callbackError ??= error;
      stop();
    });
    const cleanup = () => {
      if (timer) clearTimeout(timer);
      if (escalation) clearTimeout(escalation);
      o.signal?.removeEventListener('abort', onAbort);
      lease.signal.removeEventListener('abort', onLeaseEnd);
    };
    // The entry goes once its write is done and the whole group is gone. A process the
    // command left running in the background keeps it: the lease's destroy stops that one.
    const settle = (fn: () => void) => {
      void lease.registered
        .catch(() => undefined)
        .then(() => (child.pid !== undefined && OWN_PROCESS_GROUP && groupRuns(child.pid) ? undefined : lease.ticket.leave()))
        .catch(() => undefined)
        .then(fn);
    };

    const collect = (stream: NodeJS.ReadableStream | null, append: (chunk: string) => void, callback?: (chunk: string) => void) => {
      if (!stream) return;
      // utf8 decoding in the stream keeps a character split across two chunks whole.
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        append(chunk);
        if (!callback || callbackError) return;
        try {
          callback(chunk);
        } catch (error) {
          // The caller can no longer follow the output: stop the process and report its error.
          callbackError = error;
          stop();
        }
      });
    };
    collect(child.stdout, (c) => (stdout += c), o.onStdout);
    collect(child.stderr, (c) => (stderr += c), o.onStderr);

    if (child.stdin) {
      // A process that exits without reading its input makes the write fail with EPIPE; that is its business.
      child.stdin.on('error', () => undefined);
      child.stdin.end(o.stdin);
    }

    child.on('error', (error) => {
      // Without a pid the process never started; any later error (a failed kill) changes nothing we report.
      if (child.pid !== undefined) return;
      exited = true;
      neverStarted = true;
      cleanup();
      settle(() => reject(new CommandStartError(command, error)));
    });
    child.on('exit', () => (exited = true));
    child.on('close', (exitCode, signal) => {
      // After a failed start Node still reports a close, with no process behind it.
      if (neverStarted) return;
      exited = true;
      cleanup();
      settle(() => {
        if (callbackError) return reject(callbackError);
        if (leaseEnded) return reject(lease.signal.reason);
        if (aborted) return reject(new AbortError(`command ${JSON.stringify(command)} was aborted`, { cause: o.signal?.reason }));
        resolvePromise({ exitCode, signal, stdout, stderr, timedOut });
      });
    });
  });
}

function signalProcess(child: ChildProcess, signal: NodeJS.Signals) {
  if (child.pid === undefined) return;
  try {
    if (OWN_PROCESS_GROUP) process.kill(-child.pid, signal);
    else child.kill(signal);
  } catch {
    // The group is already gone (ESRCH): nothing left to stop.
    child.kill(signal);
  }
}

/** A local process takes any name the environment block can hold: non-empty, without "=" or NUL. */
const LOCAL_RULES: CommandOptionRules = {
  envName: (key) => (key === '' || key.includes('=') || key.includes('\0') ? new ValidationError(`options.env.${key}`, 'is not a variable name: it must be non-empty, without "=" or a NUL character') : null),
};

async function checkDirectory(cwd: string, isLeaseDirectory: boolean, leaseSignal: AbortSignal): Promise<void> {
  // spawn reports a missing cwd as ENOENT of the executable, which misleads: say what is missing.
  const info = await stat(cwd).catch(() => null);
  if (info?.isDirectory()) return;
  if (!info && isLeaseDirectory) throw (await verdict(leaseSignal)) ?? missingLeaseDirectory(cwd);
  throw new ValidationError('options.cwd', `${cwd} ${info ? 'is not a directory' : 'does not exist'}`);
}
