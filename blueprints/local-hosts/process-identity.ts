import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** A process as the registry names it: its pid, and when it started, so that a reused pid is not taken for it. */
export interface ProcessIdentity {
  pid: number;
  /** As the system reports it; null when it could not be read (then only the pid is known). */
  startTime: string | null;
}

const LINUX = process.platform === 'linux';

/** Fields of `/proc/<pid>/stat` (Linux), or null when there is no such process. */
function procStat(pid: number | string): { state: string; group: string; startTime: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2, the command name, is in parentheses and may hold spaces and ")": count from the last one.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0]!, group: fields[2]!, startTime: fields[19]! };
  } catch {
    return null;
  }
}

/** Exited and not yet reaped by its parent: it runs nothing and holds no file, only its pid. */
const isZombie = (state: string) => state === 'Z' || state === 'X';

/**
 * When the process started, as the system tells it, or null when there is no such
 * process. Linux: field 22 of `/proc/<pid>/stat` (clock ticks since boot); elsewhere
 * `ps -o lstart=`. Synchronous on purpose: read right after a spawn, before the event loop
 * can reap a child that exited at once, it always finds the child.
 */
export function startTimeOf(pid: number): string | null {
  if (LINUX) return procStat(pid)?.startTime ?? null;
  try {
    return execFileSync('ps', ['-o', 'lstart=', '-p', String(pid)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() || null;
  } catch {
    return null;
  }
}

/** Whether the process named still runs: alive, not a zombie, and its pid not taken by another process since. */
export function isRunning(target: ProcessIdentity): boolean {
  if (LINUX) {
    const stat = procStat(target.pid);
    return stat !== null && !isZombie(stat.state) && (target.startTime === null || stat.startTime === target.startTime);
  }
  const now = startTimeOf(target.pid);
  return now !== null && (target.startTime === null || now === target.startTime);
}

/**
 * Whether a process of the group with this leader still runs. Zombies do not count: an
 * orphan's zombie waits for its new parent to reap it, which a container's init may never do.
 */
export function groupRuns(leaderPid: number): boolean {
  try {
    process.kill(-leaderPid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (!LINUX) return true;
  const group = String(leaderPid);
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const stat = procStat(name);
    if (stat?.group === group && !isZombie(stat.state)) return true;
  }
  return false;
}

/**
 * Whether the process group this leader started still runs. A group lives on after its
 * leader exits; while it does, the system does not hand its number to a new process. So
 * a leader pid that runs with another start time means the group is gone, and the number
 * now belongs to a stranger who must not be signalled.
 */
export function isOwnGroupRunning(leader: ProcessIdentity): boolean {
  if (!groupRuns(leader.pid)) return false;
  const now = startTimeOf(leader.pid);
  return now === null || leader.startTime === null || now === leader.startTime;
}

let self: ProcessIdentity | undefined;

/** This process. */
export function thisProcess(): ProcessIdentity {
  return (self ??= { pid: process.pid, startTime: startTimeOf(process.pid) });
}
