/**
 * One opener per embedded dataDir. PGlite is one session with no locking of its own: two
 * processes (or two brokers of one process) on one directory both start and silently lose
 * each other's writes. So before PGlite opens a directory, the broker takes the lock file
 * `slipway.lock` in it, which records the holder (pid, host, process start time, boot id).
 *
 * Why this is safe under concurrency (every step is one synchronous syscall; no step
 * overwrites or removes a lock file that another live process may hold):
 *
 * - The lock is taken with link(2): the record is written and fsynced to a temporary file
 *   first, then linked to `slipway.lock`, which fails with EEXIST when the name exists.
 *   Exactly one of any number of racing processes creates it, and nobody ever reads a
 *   half-written record.
 * - A stale record (its process is gone) is replaced only by the process that creates, by
 *   the same exclusive link, the takeover file `slipway.lock.<fingerprint of that record>`.
 *   That process checks that `slipway.lock` still holds the stale record, then renames its
 *   takeover file over it. Nothing else can change `slipway.lock` in between: it exists,
 *   so no link succeeds; its holder is dead, so no release; and the takeover file for this
 *   record is its own. A process that comes late (the record was replaced already) finds
 *   another record and removes only its own takeover file.
 * - A process killed in the middle of a takeover leaves a takeover file whose holder is
 *   dead: it is itself a stale lock, taken over the same way (one level deeper).
 * - Release removes `slipway.lock` only if it still holds this broker's own record.
 */
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { DataDirLockedError } from '../errors/data-dir-locked-error.js';

/**
 * The lock file, inside the data directory: PGlite (like Postgres with its postmaster.pid)
 * ignores a file it does not know there, and the lock then covers every path that leads
 * to the directory (a symlink, a trailing slash, a relative path).
 */
export const LOCK_FILE = 'slipway.lock';

/** A lock taken over from a process that is gone, for the broker's warning. */
export interface StaleLock {
  /** null when the lock file was unreadable */
  pid: number | null;
  hostname: string | null;
  reason: string;
}

export interface DataDirLock {
  /** The dead holder whose lock this one replaced; null when the directory was free. */
  readonly tookOver: StaleLock | null;
  /** Removes the lock file if it is still this lock's. Idempotent. */
  release(): void;
}

interface Holder {
  pid: number;
  hostname: string;
  /** From /proc/<pid>/stat (clock ticks after boot): tells the holder from a newer process that got its pid. */
  startTime: string | null;
  bootId: string | null;
  nonce: string;
  since: string;
}

/**
 * Takes the lock of `dataDir` for this process, creating the directory if it does not
 * exist, or throws DataDirLockedError naming the live holder. null for a dataDir with a
 * scheme other than file:// (memory://, idb://): that storage is PGlite's business.
 */
export function lockDataDir(dataDir: string): DataDirLock | null {
  const dir = localDirectory(dataDir);
  if (dir === null) return null;
  mkdirSync(dir, { recursive: true });
  const path = join(dir, LOCK_FILE);
  const holder: Holder = {
    pid: process.pid,
    hostname: hostname(),
    startTime: processStartTime(process.pid),
    bootId: bootId(),
    nonce: randomBytes(8).toString('hex'),
    since: new Date().toISOString(),
  };
  const mine = `${JSON.stringify(holder)}\n`;
  const tookOver = claim(path, mine, dataDir);
  return {
    tookOver,
    release() {
      if (readLock(path) === mine) unlinkQuietly(path);
    },
  };
}

/** As PGlite reads dataDir: file:// is a local path, other schemes are not files at all. */
export function localDirectory(dataDir: string): string | null {
  if (dataDir.startsWith('file://')) return dataDir.slice('file://'.length);
  return /^[a-z]+:\/\//i.test(dataDir) ? null : dataDir;
}

/** Puts `mine` at `path`, taking over a stale record there; returns what it took over. */
function claim(path: string, mine: string, dataDir: string): StaleLock | null {
  for (;;) {
    if (linkExclusive(path, mine)) return null;
    const current = readLock(path);
    // Released between our link and our read: try again.
    if (current === null) continue;
    const holder = parseHolder(current);
    const stale = staleness(holder);
    if (!stale) throw new DataDirLockedError(dataDir, holder!.pid, holder!.hostname);
    const takeover = `${path}.${createHash('sha256').update(current).digest('hex').slice(0, 16)}`;
    try {
      claim(takeover, mine, dataDir);
    } catch (error) {
      // The takeover file is held: another process is taking this record over. If the
      // record was replaced meanwhile, that process may have lost too (it took the file
      // after the winner renamed it away): name whoever holds the lock now, not it.
      if (error instanceof DataDirLockedError && readLock(path) !== current) continue;
      throw error;
    }
    try {
      if (readLock(path) === current) {
        renameSync(takeover, path);
        return stale;
      }
    } catch (error) {
      unlinkQuietly(takeover);
      throw error;
    }
    // Another process replaced the stale record first: look again at what is there now.
    unlinkQuietly(takeover);
  }
}

/** Creates `path` with `content` unless it exists (link(2) is atomic and never overwrites). */
function linkExclusive(path: string, content: string): boolean {
  const temporary = `${path}.${process.pid}-${randomBytes(4).toString('hex')}.tmp`;
  const fd = openSync(temporary, 'wx');
  try {
    writeSync(fd, content);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  try {
    linkSync(temporary, path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  } finally {
    unlinkQuietly(temporary);
  }
}

function readLock(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

function parseHolder(content: string): Holder | null {
  try {
    const holder = JSON.parse(content) as Holder;
    return Number.isInteger(holder.pid) && holder.pid > 0 && typeof holder.hostname === 'string' ? holder : null;
  } catch {
    return null;
  }
}

/** Why the holder's lock is stale, or null while it may be alive. */
function staleness(holder: Holder | null): StaleLock | null {
  if (!holder) return { pid: null, hostname: null, reason: 'the lock file is unreadable' };
  const { pid } = holder;
  const dead = (reason: string): StaleLock => ({ pid, hostname: holder.hostname, reason });
  // A process of another host (a shared filesystem) cannot be checked from here: it holds the lock.
  if (holder.hostname !== hostname()) return null;
  const boot = bootId();
  if (holder.bootId && boot && holder.bootId !== boot) return dead(`process ${pid} ran before the host restarted`);
  if (!pidAlive(pid)) return dead(`process ${pid} is no longer running`);
  const startTime = processStartTime(pid);
  if (holder.startTime && startTime && holder.startTime !== startTime) return dead(`process ${pid} is no longer running (a newer process has its pid)`);
  return null;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: the process exists, it belongs to another user.
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
  // A zombie (killed, not yet reaped by its parent) holds nothing any more.
  return procStat(pid)?.[0] !== 'Z';
}

/** Fields of /proc/<pid>/stat after the command name (state first), on Linux; null elsewhere. */
function procStat(pid: number): string[] | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name, in parentheses, may itself contain spaces and parentheses.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

function processStartTime(pid: number): string | null {
  // Field 22 of /proc/<pid>/stat; the fields returned start at field 3.
  return procStat(pid)?.[19] ?? null;
}

function bootId(): string | null {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return null;
  }
}
