import type { EventEmitter } from 'node:events';
import type { DateTime, Duration } from 'luxon';
import type { Clock } from '../clock.js';
import { LeaseNotActiveError, type LeaseEnding } from '../errors/lease-not-active-error.js';
import type { LeaseStatusRow, StatusEvent } from '../store/store.js';
import type { StoreBackend } from '../store/backend.js';

/** What the signals of one broker's leases are made from. */
export interface LeaseSignalSources {
  clock: Clock;
  store: StoreBackend;
  /** Lease status changes committed by this process, emitted by lease id. */
  changes: EventEmitter;
  /** Hints from the other brokers of the schema (LISTEN/NOTIFY), by lease id, and `'*'` when anything may have moved. */
  hints: EventEmitter;
  /** How often the watched leases are read again, since a hint can be lost: the broker's `sweepInterval`. */
  recheck: Duration;
  /** Aborts when the broker closes; every watch then stops. */
  closed: AbortSignal;
}

/** What a lease object needs of its signal. */
export interface LeaseSignal {
  /** The signal, watched from the first call on. */
  get(): AbortSignal;
  /** The holder saw the lease destroyed (its `release()` resolved): the signal is aborted, read or not. */
  destroyed(): void;
}

interface Watch {
  controller: AbortController;
  /** The expiry as last known: an extend (by any broker) moves it. */
  expiresAt: DateTime | null;
  /** Cancels the expiry timer. */
  cancelExpiry: () => void;
  cleanups: Array<() => void>;
}

/** The lease-signal watches of each broker, by the broker's store: a broker has one store. */
const watchesOf = new WeakMap<StoreBackend, LeaseWatches>();

/**
 * The `signal` of a lease handed out by a broker. Nothing is watched until `get()` is
 * first called; from then until the lease leaves `active` (or the broker closes), the
 * signal aborts, with a `LeaseNotActiveError`, on the first of:
 *
 * - `expiresAt` passing on the broker's clock, whether or not a worker has processed it
 *   (the lease is read once then: an extend by any broker may have moved the expiry);
 * - a status change of this process (released, broken, destroyed), with no read;
 * - a hint from another broker on the schema, or the periodic re-read, finding it so.
 */
export function leaseSignal(sources: LeaseSignalSources, lease: { id: string; expiresAt: DateTime | null }): LeaseSignal {
  let signal: AbortSignal | undefined;
  // Why it ended, when that came before any read of the signal: the error is made only if one comes.
  let ended: LeaseEnding | undefined;
  const watches = () => {
    let w = watchesOf.get(sources.store);
    if (!w) watchesOf.set(sources.store, (w = new LeaseWatches(sources)));
    return w;
  };
  return {
    get: () => (signal ??= ended ? AbortSignal.abort(new LeaseNotActiveError(lease.id, ended)) : watches().signalOf(lease)),
    destroyed() {
      if (signal) return watches().endNow(lease.id);
      ended ??= whyEnded(null, lease.expiresAt, sources.clock.now());
    },
  };
}

/** How many leases of the broker with this store are watched, and whether their re-read runs: for tests. */
export function watching(store: StoreBackend): { leases: number; polling: boolean } {
  return watchesOf.get(store)?.counts() ?? { leases: 0, polling: false };
}

/** Why a lease with this status is not active any more, or null while it may still be. */
function endingOf(status: string, row: Pick<LeaseStatusRow, 'brokenReason' | 'statusChangedAt'> | null, expiresAt: DateTime | null, now: DateTime): LeaseEnding | null {
  if (status === 'pending' || status === 'acquired' || status === 'active') return null;
  if (status === 'broken') return 'broken';
  return whyEnded(row, expiresAt, now);
}

/** Why a lease that left active did: broken with a reason, or released, at or after its expiry (as the lease worker does on time) or before. */
function whyEnded(row: Pick<LeaseStatusRow, 'brokenReason' | 'statusChangedAt'> | null, expiresAt: DateTime | null, now: DateTime): LeaseEnding {
  if (row?.brokenReason) return 'broken';
  const endedAt = row?.statusChangedAt ?? now;
  return expiresAt && expiresAt <= endedAt ? 'expired' : 'released';
}

/**
 * One broker's watched leases. Each has an expiry timer and a listener for its id; the
 * re-read is shared: one query for every watched lease, and only while there is one.
 */
class LeaseWatches {
  private readonly watches = new Map<string, Watch>();
  private poll: NodeJS.Timeout | undefined;
  /** Leases to read again (or all of them), and whether a read is running. */
  private due: Set<string> | 'all' | null = null;
  private reading = false;
  private readonly onAnyHint = () => this.reread('all');

  constructor(private readonly sources: LeaseSignalSources) {
    sources.closed.addEventListener('abort', () => this.stopAll(), { once: true });
  }

  signalOf(lease: { id: string; expiresAt: DateTime | null }): AbortSignal {
    const known = this.watches.get(lease.id);
    if (known) return known.controller.signal;
    const { clock, changes, hints, closed } = this.sources;
    const controller = new AbortController();
    // A closed broker learns nothing more: a signal first read then is never aborted.
    if (closed.aborted) return controller.signal;

    const watch: Watch = { controller, expiresAt: null, cancelExpiry: () => undefined, cleanups: [] };
    this.watches.set(lease.id, watch);
    // An expiry that has passed already is read first (a renewal may have moved it), then ends the watch.
    this.expireAt(lease.id, watch, lease.expiresAt);
    const onChange = (e: StatusEvent) => {
      const row = (e.row as LeaseStatusRow | undefined) ?? null;
      const why = endingOf(e.to, row, watch.expiresAt, clock.now());
      if (why) this.end(lease.id, why);
      else if (row) this.expireAt(lease.id, watch, row.expiresAt);
    };
    changes.on(lease.id, onChange);
    const onHint = () => this.reread(lease.id);
    hints.on(lease.id, onHint);
    watch.cleanups.push(() => changes.off(lease.id, onChange), () => hints.off(lease.id, onHint));
    if (this.watches.size === 1) this.startPolling();
    // It may have left active between its hand-over and this first read.
    this.reread(lease.id);
    return controller.signal;
  }

  /** The holder saw the lease destroyed; a hint of another broker's change may still be on its way. */
  endNow(id: string): void {
    const watch = this.watches.get(id);
    if (watch) this.end(id, whyEnded(null, watch.expiresAt, this.sources.clock.now()));
  }

  counts() {
    return { leases: this.watches.size, polling: this.poll !== undefined };
  }

  /** (Re)schedules the expiry of a watch, when it moved. */
  private expireAt(id: string, watch: Watch, expiresAt: DateTime | null) {
    if (watch.expiresAt === expiresAt || (watch.expiresAt && expiresAt && watch.expiresAt.equals(expiresAt))) return;
    watch.cancelExpiry();
    watch.expiresAt = expiresAt;
    watch.cancelExpiry = expiresAt ? this.sources.clock.schedule(expiresAt, () => void this.expiryDue(id)) : () => undefined;
  }

  /**
   * The known expiry passed: the lease is read once, since an extend in another broker may
   * have moved it. Moved into the future, the timer is set again; otherwise, or when the
   * read fails, the lease has expired (the holder must stop at its expiry, not later). The
   * read waits for a renewal being written, whose worker judges the expiry holding the row:
   * read first, the lease expired, and the worker refuses the renewal as late.
   */
  private async expiryDue(id: string) {
    const watch = this.watches.get(id);
    if (!watch) return;
    const row = await this.sources.store.leaseStatuses([id], true).then((rows) => rows[0] ?? null, () => null);
    if (this.watches.get(id) !== watch) return;
    const now = this.sources.clock.now();
    if (row && !endingOf(row.status, row, row.expiresAt, now) && row.expiresAt && row.expiresAt > now) return this.expireAt(id, watch, row.expiresAt);
    this.end(id, row ? (endingOf(row.status, row, watch.expiresAt, now) ?? 'expired') : 'expired');
  }

  private end(id: string, why: LeaseEnding) {
    const watch = this.unwatch(id);
    // Listeners of the signal run after the watch is gone: one that reads it again sees the end.
    watch?.controller.abort(new LeaseNotActiveError(id, why));
  }

  private unwatch(id: string): Watch | undefined {
    const watch = this.watches.get(id);
    if (!watch) return undefined;
    this.watches.delete(id);
    watch.cancelExpiry();
    for (const cleanup of watch.cleanups) cleanup();
    if (this.watches.size === 0) this.stopPolling();
    return watch;
  }

  private stopAll() {
    for (const id of [...this.watches.keys()]) this.unwatch(id);
    this.due = null;
  }

  private startPolling() {
    this.sources.hints.on('*', this.onAnyHint);
    this.poll = setInterval(() => this.reread('all'), Math.max(50, this.sources.recheck.toMillis()));
    this.poll.unref();
  }

  private stopPolling() {
    this.sources.hints.off('*', this.onAnyHint);
    clearInterval(this.poll);
    this.poll = undefined;
  }

  private reread(what: string | 'all') {
    if (what === 'all') this.due = 'all';
    else if (this.due === null) this.due = new Set([what]);
    else if (this.due !== 'all') this.due.add(what);
    if (!this.reading) void this.read();
  }

  /** Reads what is due, in one query a round, until nothing more is. */
  private async read() {
    this.reading = true;
    try {
      while (this.due) {
        const ids = this.due === 'all' ? [...this.watches.keys()] : [...this.due].filter((id) => this.watches.has(id));
        this.due = null;
        if (ids.length === 0) continue;
        const rows = new Map((await this.sources.store.leaseStatuses(ids)).map((r) => [r.id, r]));
        const now = this.sources.clock.now();
        for (const id of ids) {
          const watch = this.watches.get(id);
          if (!watch) continue;
          const row = rows.get(id);
          // No row: collected as history long after it was destroyed.
          const why = row ? endingOf(row.status, row, watch.expiresAt, now) : whyEnded(null, watch.expiresAt, now);
          if (why) this.end(id, why);
          else if (row) this.expireAt(id, watch, row.expiresAt);
        }
      }
    } catch {
      // The database is unreachable or the broker is closing: the next hint or re-read tries again.
      this.due = null;
    } finally {
      this.reading = false;
    }
  }
}
