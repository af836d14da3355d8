import { randomUUID } from 'node:crypto';
import { mkdir, readdir, readFile, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { leaseDirectory } from './lease-directory.js';
import { isOwnGroupRunning, isRunning, thisProcess, type ProcessIdentity } from './process-identity.js';

/**
 * The process registry of a lease: a file per command under
 * `<root>/.processes/<lease id>/`, outside the lease directory, naming the command's
 * process group. The destroy hook may run in another broker process than the one that
 * spawned the commands (several brokers share a database), so it cannot rely on that
 * process's memory, nor on its being alive; it reads the registry.
 *
 * The handshake that keeps a command from starting unseen while its lease is destroyed:
 * a command writes its entry, then looks for the `closing` marker (and the lease
 * directory); the destroy writes the marker, then lists the entries. Whichever comes
 * second sees the other. An entry is written before the spawn, without a group, and
 * the group is added once the process runs: a destroy that finds an entry without a
 * group waits for it, unless its runner is dead.
 */

/** What one entry says. */
export interface RegistryEntry {
  /** The machine: a pid means nothing on another one. */
  host: string;
  /** The process that runs the command and supervises it (a broker's host process). */
  runner: ProcessIdentity;
  /** The command's process group, by its leader; null while it is being started. */
  group: ProcessIdentity | null;
  /** `argv[0]`, for messages. */
  command: string;
}

const FOLDER = '.processes';
const CLOSING = 'closing';
const POLL_MS = 25;
/** How long a destroy waits for an entry without a group whose runner is alive, or for a group after SIGKILL. */
const SETTLE_MS = 10_000;

/** `<root>/.processes/<lease id>`; the lease id is checked as for the lease directory. */
export function registryDirectory(root: string, leaseId: string): string {
  return leaseDirectory(join(root, FOLDER), leaseId);
}

/** One command's entry, from before its spawn until its process group is gone. */
export class RegistryTicket {
  constructor(
    private readonly file: string,
    private readonly entry: RegistryEntry,
  ) {}

  /** The command runs: its group is recorded, so that a destroy in any process can stop it. */
  async started(group: ProcessIdentity): Promise<void> {
    await writeEntry(this.file, { ...this.entry, group });
  }

  /** The command is over (or never started). */
  async leave(): Promise<void> {
    await rm(this.file, { force: true });
    // A command that came after the destroy must not leave the registry behind; busy or gone is fine.
    await rmdir(join(this.file, '..')).catch(() => undefined);
  }
}

/**
 * Enters a command about to be spawned. Says `closing` when the lease's destroy has
 * begun, or `gone` when the lease directory does not exist (destroyed, or removed by
 * hand): the command must then not start.
 */
export async function enterRegistry(root: string, leaseId: string, leaseDir: string, command: string): Promise<RegistryTicket | 'closing' | 'gone'> {
  const dir = registryDirectory(root, leaseId);
  const file = join(dir, `${randomUUID()}.json`);
  const entry: RegistryEntry = { host: hostname(), runner: thisProcess(), group: null, command };
  const ticket = new RegistryTicket(file, entry);
  for (let attempt = 1; ; attempt++) {
    await mkdir(dir, { recursive: true });
    try {
      await writeEntry(file, entry);
      break;
    } catch (error) {
      // The folder went between the mkdir and the write: the last command of the lease
      // left (its leave() removes an empty folder), or a destroy finished. Once more: the
      // checks below tell the two apart.
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || attempt === 3) throw error;
    }
  }
  // Entry first, marker second (the destroy does the reverse): see the class comment.
  const verdict = (await exists(join(dir, CLOSING))) ? 'closing' : (await isDirectory(leaseDir)) ? null : 'gone';
  if (!verdict) return ticket;
  await ticket.leave();
  return verdict;
}

/**
 * Stops every process group the lease's commands started on this machine, whichever
 * process started them: writes the `closing` marker (no command starts after it), sends
 * SIGTERM to each group, SIGKILL after `graceMs`, and returns once all are gone, with how
 * many it signalled. Entries of dead processes, and of pids now used by other processes,
 * are dropped unsignalled. Idempotent: a second call finds nothing left to stop.
 *
 * Throws when a process cannot be stopped from here: a group that outlives SIGKILL by
 * `SETTLE_MS`, an entry that stays without a group while its runner lives, or one of
 * another host (its runner stops it when the lease signal aborts there). A destroy hook
 * that throws is retried with backoff, so the lease waits instead of freeing its slot
 * under a live process.
 */
export async function stopLeaseProcesses(root: string, leaseId: string, options: { graceMs?: number } = {}): Promise<number> {
  const dir = registryDirectory(root, leaseId);
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, CLOSING), '');
  const { signalled, elsewhere } = await stopEntries(dir, leaseId, () => true, options.graceMs ?? 2_000);
  if (elsewhere.length > 0) throw new Error(`lease ${leaseId}: ${elsewhere.join(', ')} runs on another host than ${hostname()} and can only be stopped there`);
  return signalled;
}

/**
 * Stops the process groups that commands of a dead runner left running on this lease: a
 * broker process SIGKILLed in the middle of a command leaves it running on its own (it
 * leads its own process group), unsupervised, and a resumed hook that starts the work over
 * (a `git clone` into the same directory) must not share the lease with it. Entries of live
 * runners, and of other hosts, are left alone. Returns how many groups it signalled.
 */
export async function stopOrphanedProcesses(root: string, leaseId: string, options: { graceMs?: number } = {}): Promise<number> {
  const dir = registryDirectory(root, leaseId);
  const orphaned = (entry: RegistryEntry) => entry.host === hostname() && !isRunning(entry.runner);
  return (await stopEntries(dir, leaseId, orphaned, options.graceMs ?? 2_000)).signalled;
}

/**
 * SIGTERM to the group of each selected entry of this host (with SIGCONT, for a stopped
 * one), SIGKILL after `graceMs`, until all are gone; entries of dead processes are dropped.
 * Returns how many groups it signalled and the selected entries of other hosts.
 */
async function stopEntries(dir: string, leaseId: string, select: (entry: RegistryEntry) => boolean, graceMs: number): Promise<{ signalled: number; elsewhere: string[] }> {
  const started = Date.now();
  const signalled = new Map<string, { at: number; killed: boolean }>();
  for (;;) {
    const stillThere: string[] = [];
    const elsewhere: string[] = [];
    for (const { file, entry } of await readEntries(dir)) {
      if (entry && !select(entry)) continue;
      const what = entry ? `${entry.command} (${entry.group ? `process group ${entry.group.pid}` : `being started by pid ${entry.runner.pid}`})` : file;
      if (entry && entry.host !== hostname()) {
        elsewhere.push(`${what} on ${entry.host}`);
        continue;
      }
      const alive = entry !== null && (entry.group ? isOwnGroupRunning(entry.group) : isRunning(entry.runner));
      if (!alive) {
        // Unreadable (entries are written whole, so never half-written), dead, or the pid reused: nothing to stop.
        await rm(join(dir, file), { force: true });
        continue;
      }
      stillThere.push(what);
      if (!entry.group) continue;
      const sent = signalled.get(file);
      if (!sent) {
        signalGroup(entry.group.pid, 'SIGTERM');
        signalGroup(entry.group.pid, 'SIGCONT');
        signalled.set(file, { at: Date.now(), killed: false });
      } else if (!sent.killed && Date.now() - sent.at >= graceMs) {
        signalGroup(entry.group.pid, 'SIGKILL');
        sent.killed = true;
      }
    }
    if (stillThere.length === 0) return { signalled: signalled.size, elsewhere };
    const deadline = Math.max(started + SETTLE_MS, ...[...signalled.values()].map((s) => s.at + graceMs + SETTLE_MS));
    if (Date.now() > deadline) throw new Error(`lease ${leaseId}: still running after SIGTERM and SIGKILL: ${stillThere.join(', ')}`);
    await sleep(POLL_MS);
  }
}

/** Removes the registry of a destroyed lease (after its directory: see the class comment). Already gone is success. */
export async function removeRegistry(root: string, leaseId: string): Promise<void> {
  await rm(registryDirectory(root, leaseId), { recursive: true, force: true, maxRetries: 3 });
}

function signalGroup(leaderPid: number, signal: NodeJS.Signals) {
  // -1 would signal every process of the user, and this process's own group is never a command's.
  if (leaderPid <= 1 || leaderPid === process.pid) return;
  try {
    process.kill(process.platform === 'win32' ? leaderPid : -leaderPid, signal);
  } catch {
    // Gone since it was checked: nothing left to stop.
  }
}

async function readEntries(dir: string): Promise<Array<{ file: string; entry: RegistryEntry | null }>> {
  const files = (await readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.json'));
  return Promise.all(
    files.map(async (file) => {
      const text = await readFile(join(dir, file), 'utf8').catch(() => null);
      try {
        return { file, entry: text === null ? null : checkEntry(JSON.parse(text)) };
      } catch {
        return { file, entry: null };
      }
    }),
  );
}

function checkEntry(value: any): RegistryEntry | null {
  const isIdentity = (p: any) => p !== null && typeof p === 'object' && Number.isInteger(p.pid) && p.pid > 1 && (p.startTime === null || typeof p.startTime === 'string');
  if (value === null || typeof value !== 'object' || typeof value.host !== 'string' || !isIdentity(value.runner)) return null;
  if (value.group !== null && !isIdentity(value.group)) return null;
  return value as RegistryEntry;
}

/** Written to a temporary name and renamed: a reader sees the whole entry or none. */
async function writeEntry(file: string, entry: RegistryEntry): Promise<void> {
  const temporary = `${file}.${process.pid}.tmp`;
  await writeFile(temporary, JSON.stringify(entry));
  await rename(temporary, file);
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function isDirectory(path: string): Promise<boolean> {
  return stat(path).then(
    (info) => info.isDirectory(),
    () => false,
  );
}
