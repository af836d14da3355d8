import type { Duration } from 'luxon';
import { BrokerClosedError } from '../errors/broker-closed-error.js';
import { NotFoundError } from '../errors/not-found-error.js';
import { checkOptions, optionalBoolean } from '../model/call-arguments.js';
import { unlessOutcomeUnknown } from '../store/db.js';
import type { LeaseRow, StatusEvent } from '../store/store.js';
import { writeCommand } from './commands.js';
import type { BrokerContext } from './context.js';

/** Lease statuses that end a wait for activation, and the one that ends a release. */
export const SETTLED: ReadonlySet<string> = new Set(['active', 'broken', 'released', 'destroyed']);
const DESTROYED: ReadonlySet<string> = new Set(['destroyed']);

export interface WatchOptions<R> {
  timeout?: Duration;
  signal?: AbortSignal;
  onTimeout?: () => Promise<Error>;
  onAbort?: () => Error;
  /** How to read the lease (default: the row alone). */
  read?: (id: string) => Promise<R | null>;
  /** The statuses an event of this broker must carry to be worth a read; the others cannot decide. */
  decisive?: ReadonlySet<string>;
  /** The caller knows the lease cannot have reached an end yet: wait for an event or a re-read. */
  skipFirstRead?: boolean;
  /** What an event of this process tells without a read, if enough (the row its writer had). */
  fromEvent?: (e: StatusEvent) => R | null;
}

/**
 * Waits, on events and a slow re-read (other processes), until `decide` says the lease
 * reached an end. What is read is the lease row by default, or what `read` gives (the
 * outcome of a command to the lease).
 */
export function watchLease<T, R = LeaseRow>(ctx: BrokerContext, id: string, decide: (row: R) => { value: T } | { error: Error } | null, opts: WatchOptions<R> = {}): Promise<T> {
  const { store, leaseWatchers, leaseHints, closedEvents } = ctx;
  const { clock, sweepInterval } = ctx.settings;
  const read = opts.read ?? ((leaseId: string) => store.lease(leaseId) as Promise<unknown> as Promise<R | null>);
  return new Promise<T>((resolve, reject) => {
    let finished = false;
    let checking = false;
    let again = false;
    const cleanups: Array<() => void> = [];
    const finish = (fn: () => void) => {
      if (finished) return;
      finished = true;
      for (const c of cleanups) c();
      fn();
    };
    const check = async () => {
      if (finished) return;
      if (checking) return void (again = true);
      checking = true;
      try {
        const row = await read(id);
        const verdict = row ? decide(row) : { error: new NotFoundError('lease', id) };
        if (verdict && 'value' in verdict) finish(() => resolve(verdict.value));
        else if (verdict) finish(() => reject(verdict.error));
      } catch (error) {
        if (ctx.closed) finish(() => reject(new BrokerClosedError()));
      } finally {
        checking = false;
        if (again) {
          again = false;
          void check();
        }
      }
    };
    const onChange = (e: StatusEvent) => {
      if (opts.decisive && !opts.decisive.has(e.to)) return;
      const known = opts.fromEvent?.(e);
      if (!known) return void check();
      const verdict = decide(known);
      if (verdict && 'value' in verdict) finish(() => resolve(verdict.value));
      else if (verdict) finish(() => reject(verdict.error));
    };
    leaseWatchers.on(id, onChange);
    cleanups.push(() => leaseWatchers.off(id, onChange));
    const onClosed = () => finish(() => reject(new BrokerClosedError()));
    closedEvents.once('closed', onClosed);
    cleanups.push(() => closedEvents.off('closed', onClosed));
    const onHint = () => void check();
    leaseHints.on(id, onHint).on('*', onHint);
    cleanups.push(() => leaseHints.off(id, onHint).off('*', onHint));
    const poll = setInterval(() => void check(), Math.max(50, sweepInterval.toMillis()));
    poll.unref();
    cleanups.push(() => clearInterval(poll));
    if (opts.timeout) {
      const cancel = clock.schedule(clock.now().plus(opts.timeout), () => finish(() => void opts.onTimeout!().then(reject, reject)));
      cleanups.push(cancel);
    }
    if (opts.signal) {
      const onAbort = () => finish(() => reject(opts.onAbort!()));
      if (opts.signal.aborted) return onAbort();
      opts.signal.addEventListener('abort', onAbort, { once: true });
      cleanups.push(() => opts.signal!.removeEventListener('abort', onAbort));
    }
    if (!opts.skipFirstRead) void check();
  });
}

/**
 * The holder's release. `blueprint` is the lease's, when the holder knows it (it has the
 * resource): then this broker may run the release inline (`Engine.releaseInline`) instead
 * of writing a command for the lease's worker and waiting for it.
 */
export async function releaseAndWait(ctx: BrokerContext, id: string, opts?: { wait?: boolean }, blueprint?: string): Promise<void> {
  const wait = optionalBoolean(checkOptions(opts, ['wait'], { call: 'release' }).wait, 'wait');
  // The holder lets go: its keepalive stops renewing.
  ctx.keepAlives.get(id)?.();
  if (ctx.closed) throw new BrokerClosedError();
  // Rendered "Lease released by holder.": the author says who, and there is no more to say why.
  // Written and consumed in one transaction, or (a worker has the lease, no slot is free)
  // not at all and the command below is written; an unknown commit outcome writes it too,
  // and it is then consumed as "no effect" if the first one landed.
  // With `wait: false` too: released inline, the release is recorded when this returns,
  // as a written command would be, and its destroy phase runs in this broker's workers.
  const inline = blueprint && ctx.engine ? await ctx.engine.releaseInline(id, blueprint, { data: { reason: 'released' }, author: 'holder' }).catch(unlessOutcomeUnknown) : null;
  if (inline === 'destroyed') return;
  if (wait === false) {
    if (inline === 'released') return;
    await writeCommand(ctx, 'lease', id, 'release', { reason: 'released' }, 'holder');
    return;
  }
  // The watch starts before the write, and the write returns the status it found: a destroy
  // before the write is that status, one after it an event, a hint or the slow re-read.
  // No read of the lease is needed. Released inline, the destroy phase's pass has not begun:
  // it runs in a later turn of the event loop, after this watch has started.
  const unwatch = new AbortController();
  const destroyed = watchLease(ctx, id, (l) => (l.status === 'destroyed' ? { value: true } : null), {
    decisive: DESTROYED,
    fromEvent: (e) => (e.row as LeaseRow | undefined) ?? null,
    skipFirstRead: true,
    signal: unwatch.signal,
    onAbort: () => new Error('no longer watched'),
  }).catch((error: unknown) => (unwatch.signal.aborted ? false : Promise.reject(error)));
  if (inline === 'released') {
    await destroyed;
    return;
  }
  let status: string;
  try {
    status = await writeCommand(ctx, 'lease', id, 'release', { reason: 'released' }, 'holder');
  } catch (error) {
    unwatch.abort();
    throw error;
  }
  if (status === 'destroyed') unwatch.abort();
  await destroyed;
}
