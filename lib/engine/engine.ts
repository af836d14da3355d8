import { after } from '../time.js';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import PQueue from 'p-queue';
import { Duration, type DateTime } from 'luxon';
import type { ObjectKind } from '../model/states.js';
import type { ClaimedWork } from '../store/store.js';
import { crashPoint } from './crash-points.js';
import { processLease, releaseInline, type InlineRelease } from './lease-worker.js';
import { processResource } from './resource-worker.js';
import { topUpWarmPools, warmPools } from './warm-pool.js';
import { exponentialMs, type LeaseMoved, type Outcome, type Runtime } from './runtime.js';

export interface EngineOptions {
  concurrency: number;
  /** How long a claim lives without a heartbeat. */
  claimTtl: Duration;
  /** The backstop: how often the database is re-read for runnable work even when no hint arrived. */
  sweepInterval: Duration;
}

/** A work item this engine runs: as the store's claim returned it, or created claimed here. */
interface ClaimedItem extends ClaimedWork {
  /** The lease as its creator just wrote it: the first pass need not read it. */
  moved?: LeaseMoved;
}

/**
 * The workers of one broker. Claims due work items (SKIP LOCKED), runs each on a
 * p-queue slot, and records what the pass decided. In-process pokes, clock timers for
 * scheduled work, and a periodic sweep are all only wake-ups: the work itself is rows.
 */
/** How many of its own errors an engine keeps in `errors`: a long-running broker must not grow without bound. */
const ERRORS_KEPT = 100;

export class Engine {
  private readonly queue: PQueue;
  private readonly inflight = new Map<string, ClaimedItem>();
  /**
   * Slots promised to work this broker is creating already claimed (`reserve`): each is a
   * job holding a p-queue slot until `adopt` hands it the item to run, or `unreserve`
   * gives it back. Reservations are alike, so they are handed out first come first served.
   */
  private readonly reservations: Array<(item: ClaimedItem | null) => void> = [];
  private polling = false;
  private pollAgain = false;
  /**
   * Whether work may be due that no poll has looked for yet: set by every wake-up (a
   * local write, a hint from another broker, the sweep, a timer) and when a poll filled
   * every free slot; cleared when a poll starts. A pass that ends polls again only if it
   * is set, so an idle broker does not re-read the queue after each pass.
   */
  private maybeDue = true;
  /** No new claims: `stop()` began. */
  private stopped = false;
  /** Past the grace period: outcomes of passes still running are no longer recorded. */
  private halted = false;
  private sweepTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private cancelScheduled: (() => void) | undefined;
  private scheduledAt: number | undefined;
  private idleWaiters: Array<() => void> = [];
  private readonly hasWarmPools: boolean;
  /** A warm-pool top-up runs; `warmAgain`: another was asked for meanwhile. */
  private warming = false;
  private warmAgain = false;
  /** The last errors of the library's own work (for tests and diagnosis), at most ERRORS_KEPT; the logger has every one. */
  readonly errors: unknown[] = [];

  constructor(
    private readonly rt: Runtime,
    private readonly options: EngineOptions,
  ) {
    // The queue is the concurrency: a pass, or a request running its hooks inline,
    // holds one of its slots from its claim (or reservation) to its recorded end.
    this.queue = new PQueue({ concurrency: options.concurrency });
    // A slot came free: waits for idleness (runUntilIdle, close) look again.
    this.queue.on('next', () => this.notifyIdle());
    this.hasWarmPools = warmPools(rt).length > 0;
  }

  /** Three heartbeats per claim's life: a claim lapses only if three in a row fail. */
  private get heartbeatEvery(): number {
    return Math.max(50, this.options.claimTtl.toMillis() / 3);
  }

  /** Slots taken: passes running or queued, and reservations. */
  private get load(): number {
    return this.queue.pending + this.queue.size;
  }

  start() {
    this.sweepTimer = setInterval(() => {
      this.poke();
      this.topUpWarmPools();
    }, this.options.sweepInterval.toMillis());
    this.sweepTimer.unref();
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), this.heartbeatEvery);
    this.heartbeatTimer.unref();
    this.poke();
    this.topUpWarmPools();
  }

  /**
   * Looks at the warm pools (`minIdle`) soon: after a change that may have used or freed a
   * spare resource, and on every sweep. A hint, like `poke`: the sweep repeats it, and a
   * top-up that runs while another is asked for runs once more after it.
   */
  topUpWarmPools() {
    if (this.stopped || !this.hasWarmPools) return;
    this.warmAgain = true;
    if (this.warming) return;
    this.warming = true;
    void (async () => {
      while (this.warmAgain && !this.stopped) {
        this.warmAgain = false;
        // Invariant 8: on a fresh turn of the event loop, as every pass.
        await yieldToEventLoop();
        try {
          await topUpWarmPools(this.rt);
        } catch (error) {
          if (this.stopped) break;
          this.noteError(error);
          this.rt.logger.warn({ err: error }, 'slipway: topping up a warm pool failed; the sweep will retry');
        }
      }
    })().finally(() => {
      this.warming = false;
      this.notifyIdle();
    });
  }

  /** Look for work now. Cheap and idempotent: many pokes while a poll runs cause one more poll. */
  poke() {
    if (this.stopped) return this.notifyIdle();
    this.maybeDue = true;
    if (this.polling) {
      this.pollAgain = true;
      return;
    }
    this.polling = true;
    void this.poll().finally(() => {
      this.polling = false;
      if (this.pollAgain && !this.stopped) {
        this.pollAgain = false;
        this.poke();
      } else {
        this.notifyIdle();
      }
    });
  }

  private async poll() {
    // Invariant 8: every pass and poll starts on a fresh turn of the event loop, so a
    // blueprint that fails at once, forever, cannot keep the host's timers and I/O from running.
    await yieldToEventLoop();
    try {
      const free = this.options.concurrency - this.load;
      if (free <= 0) return; // still maybe due: the next pass to end polls
      this.maybeDue = false;
      const { store, clock, workerId } = this.rt;
      const now = clock.now();
      const observe = this.rt.workObserver?.();
      const claiming = store.claimWork(now, free, workerId, [...this.inflight.keys()], after(now, this.options.claimTtl));
      if (observe) {
        claiming.then(
          (rows) => observe({ unit: 'claim', durationMs: Math.max(0, clock.now().toMillis() - now.toMillis()), claimed: rows.length, error: null }),
          (error: unknown) => observe({ unit: 'claim', durationMs: Math.max(0, clock.now().toMillis() - now.toMillis()), claimed: 0, error }),
        );
      }
      const rows = await claiming;
      for (const item of rows) {
        this.inflight.set(`${item.kind}:${item.id}`, item);
        void this.queue.add(() => this.run(item), { priority: item.priority });
      }
      if (rows.length >= free) this.maybeDue = true; // there may be more than the slots took
      if (rows.length === 0) await this.scheduleNext();
    } catch (error) {
      this.maybeDue = true;
      if (!this.stopped) {
        this.noteError(error);
        this.rt.logger.error({ err: error }, 'slipway: claiming work failed; the sweep will retry');
      }
    }
  }

  /** Arms one clock timer for the earliest scheduled work item, so expiry and backoff run at their time. */
  /**
   * Promises a slot to a work item this broker is about to create already claimed by
   * itself (a lease it was just asked for), so that it runs at once, without a claim
   * round trip and without waiting for a poll. False when every slot is taken: the item
   * is then created unclaimed and waits its turn like any other.
   */
  reserve(): { worker: string; until: DateTime } | null {
    if (this.stopped || this.load >= this.options.concurrency) return null;
    let handOver!: (item: ClaimedItem | null) => void;
    const handed = new Promise<ClaimedItem | null>((resolve) => (handOver = resolve));
    this.reservations.push(handOver);
    void this.queue.add(async () => {
      const item = await handed;
      if (item) await this.run(item);
    });
    return { worker: this.rt.workerId, until: after(this.rt.clock.now(), this.options.claimTtl) };
  }

  /**
   * The holder's release of a lease, run by this broker inline when it can (see
   * `releaseInline`): `destroyed` when it is over, `released` when its destroy phase now
   * runs in a slot of this broker's workers, null when the release goes to the lease's worker.
   */
  async releaseInline(leaseId: string, blueprint: string, written: { data: { reason: string }; author: string | null }): Promise<'destroyed' | 'released' | null> {
    let reserved = false;
    // At most one slot, however often it is asked for.
    const reserve = () => reserved || (reserved = this.reserve() !== null);
    let result: InlineRelease;
    try {
      result = await releaseInline(this.rt, leaseId, blueprint, written, after(this.rt.clock.now(), this.options.claimTtl), reserve, this.options.claimTtl);
    } catch (error) {
      if (reserved) this.unreserve();
      throw error;
    }
    if (result?.done === 'released') {
      this.adopt('lease', leaseId, result.moved, result.wakeCount);
      return 'released';
    }
    if (result?.handedTo) {
      crashPoint('releaseInline.handedOff');
      // Already running here (its claim had lapsed): that pass goes on, and the slot is given back.
      if (!this.inflight.has(`lease:${result.handedTo.id}`)) {
        this.adoptClaimed(result.handedTo);
        return 'destroyed';
      }
    }
    if (reserved) this.unreserve();
    return result?.done ?? null;
  }

  /**
   * Gives back a slot `reserve` promised, when the item was not created or was created
   * unclaimed; `dueAt` is when that item falls due (this worker's timer looks then).
   */
  unreserve(dueAt?: DateTime | null): void {
    this.reservations.shift()?.(null);
    if (dueAt) this.scheduleAt(dueAt);
  }

  /**
   * Runs a work item created claimed by this worker (or claimed by the holder's release
   * run inline, with its `wakeCount`) in a slot `reserve` promised. While the broker
   * closes, within its grace period, it still runs: it is the rest of an `acquire()` whose
   * hooks ran inline, or of a `release()`, which `close()` waits for.
   */
  adopt(kind: ObjectKind, id: string, moved?: LeaseMoved, wakeCount = 0): void {
    this.adoptClaimed({ kind, id, wakeCount, chained: false, attempts: 0, priority: 0, moved });
  }

  /** `adopt`, for an item as a claim returned it (a waiting lease a hand-off claimed). */
  private adoptClaimed(item: ClaimedItem): void {
    const handOver = this.reservations.shift();
    if (this.halted) return handOver?.(null);
    this.inflight.set(`${item.kind}:${item.id}`, item);
    handOver?.(item);
  }

  private async scheduleNext() {
    const { store, clock } = this.rt;
    const next = await store.nextDueAt(clock.now());
    if (next) this.scheduleAt(next);
  }

  /**
   * Runs the pass of a waiting lease whose work item this worker's hand-off claimed (see
   * `LeaseClaim.handOffTo`): queued for the slot of the pass that ends, and in flight from
   * now, so that its claim is kept alive meanwhile. A crash before it runs leaves the
   * claim to lapse, and the lease, due, to the next worker that claims it.
   */
  private runHandedOff(item: ClaimedItem) {
    crashPoint('handOff.claimed');
    const key = `${item.kind}:${item.id}`;
    // Already running here (claimed again by its own pass's worker): that pass goes on.
    if (this.inflight.has(key)) return;
    this.inflight.set(key, item);
    void this.queue.add(() => this.run(item), { priority: item.priority });
  }

  /** Arms the clock timer for `next` unless one fires earlier already. */
  private scheduleAt(next: DateTime) {
    const { clock } = this.rt;
    if (this.stopped) return;
    if (this.scheduledAt !== undefined && this.scheduledAt <= next.toMillis()) return;
    this.cancelScheduled?.();
    this.scheduledAt = next.toMillis();
    this.cancelScheduled = clock.schedule(next, () => {
      this.scheduledAt = undefined;
      this.cancelScheduled = undefined;
      this.poke();
    });
  }

  private async run(item: ClaimedItem) {
    const key = `${item.kind}:${item.id}`;
    const { store, clock, workerId } = this.rt;
    await yieldToEventLoop();
    try {
      let outcome: Outcome;
      const observe = this.rt.workObserver?.();
      const started = observe ? clock.now() : null;
      // Whoever deleted or finished the work item, the pass ended in its deletion, its schedule or its parking.
      const observed = (result: Outcome | 'error', error: unknown = null) =>
        observe?.({ unit: 'pass', kind: item.kind, id: item.id, durationMs: Math.max(0, clock.now().toMillis() - started!.toMillis()), outcome: passOutcome(result), error });
      try {
        outcome =
          item.kind === 'lease'
            ? await processLease(this.rt, { id: item.id, chained: item.chained, attempts: item.attempts, wakeCount: item.wakeCount, handOffTo: this.stopped ? undefined : { worker: workerId, ttl: this.options.claimTtl } }, item.moved)
            : await processResource(this.rt, { id: item.id, attempts: item.attempts });
        observed(outcome);
      } catch (error) {
        observed('error', error);
        if (this.halted) return;
        // A failure of the library's own writes (a refused CAS, a lost connection): retry with backoff.
        this.noteError(error);
        this.rt.logger.warn({ err: error, object: key }, 'slipway: a worker pass failed; it will be retried');
        const attempts = item.attempts + 1;
        // Not the broker's `backoff`, which paces hooks: the library's own writes retry sooner.
        outcome = { next: 'at', at: clock.now().plus({ milliseconds: exponentialMs(200, 30_000, attempts) }), attempts };
      }
      if (this.halted) return;
      if ((outcome.next === 'delete' || outcome.next === 'deleted') && outcome.then) this.runHandedOff(outcome.then);
      crashPoint('pass.decided');
      // The destroy's own statement deleted the item (no wake came during the pass).
      if (outcome.next === 'deleted') return;
      // The activation's own statement finished it (see `finished`): only this broker's poll or timer is left to set.
      if (outcome.next === 'finished') {
        if (outcome.due) this.maybeDue = true;
        else if (outcome.at) this.scheduleAt(outcome.at);
        return;
      }
      if (outcome.next === 'delete') {
        if (await store.deleteWork({ ...item, workerId })) return;
      }
      // A wake during the pass kept the item due (see `finish`); otherwise park or schedule.
      const runAt = outcome.next === 'at' ? outcome.at : null;
      const finished = await store.finishWork({ ...item, workerId }, clock.now(), runAt, outcome.next === 'at' ? (outcome.attempts ?? 0) : 0);
      // Due again at once (a wake during the pass, or a pass that stopped early): poll after
      // this pass. Due later: this broker's timer, with no read of the queue.
      if (finished?.due) this.maybeDue = true;
      else if (finished && runAt) this.scheduleAt(runAt);
    } catch (error) {
      this.maybeDue = true;
      if (!this.halted) {
        this.noteError(error);
        this.rt.logger.error({ err: error, object: key }, 'slipway: recording a work item failed; its claim will expire and be retried');
      }
    } finally {
      this.inflight.delete(key);
      // A slot is free: poll only if work may be waiting for one.
      if (this.maybeDue) this.poke();
      else this.notifyIdle();
    }
  }

  /**
   * Extends the claims of the passes in flight. A claim whose row another transaction was
   * writing is skipped, not waited for, and tried again after 50 ms, then 100, 200... until
   * the next beat: most such writes end the pass (its finish, its destroy), and a wake or
   * a hand-off holds the row for one short transaction.
   */
  private async heartbeat(keys = [...this.inflight.keys()], retry = 0) {
    if (keys.length === 0 || this.halted) return;
    const { store, clock, workerId } = this.rt;
    try {
      const extended = await store.heartbeat(keys, workerId, after(clock.now(), this.options.claimTtl));
      const skipped = keys.filter((key) => !extended.has(key) && this.inflight.has(key));
      const delay = 50 * 2 ** retry;
      if (skipped.length > 0 && delay < this.heartbeatEvery) setTimeout(() => void this.heartbeat(skipped, retry + 1), delay).unref();
    } catch (error) {
      this.rt.logger.warn({ err: error }, 'slipway: heartbeat failed');
    }
  }

  get busy(): boolean {
    // A reserved slot is a request running its hooks at once (acquire's fast path): work too.
    return this.polling || this.warming || this.inflight.size > 0 || this.load > 0;
  }

  private notifyIdle() {
    if (this.busy) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  /** Resolves when no work is due now and none is running (work scheduled later does not count). */
  async runUntilIdle(): Promise<void> {
    for (let round = 0; round < 10_000; round++) {
      if (this.stopped) throw new Error('runUntilIdle: the broker is closed');
      // A request whose insert is still on its way (a parallel connection on Postgres) counts as work.
      await this.rt.store.settled();
      this.poke();
      await new Promise<void>((resolve) => {
        this.idleWaiters.push(resolve);
        this.notifyIdle();
      });
      const { store, clock } = this.rt;
      if (!(await store.anyWorkDue(clock.now())) && !this.busy) return;
    }
    throw new Error('runUntilIdle: work kept becoming due (10000 rounds)');
  }

  /**
   * Stops claiming; waits up to `grace` for passes in flight and for requests running
   * their hooks inline (`reserve`d slots, acquire's fast path); leaves every row as it is.
   * Heartbeats go on meanwhile, so no other broker takes over a pass that is finishing.
   */
  async stop(grace: Duration): Promise<void> {
    this.stopped = true;
    clearInterval(this.sweepTimer);
    this.cancelScheduled?.();
    const drained = new Promise<'idle'>((resolve) => {
      const check = async () => {
        // A queued or running pass is in `inflight` from its claim to the end of its `run`.
        while (this.load > 0 || this.inflight.size > 0 || this.warming) {
          await new Promise<void>((wake) => this.idleWaiters.push(wake));
        }
        resolve('idle');
      };
      void check();
      this.notifyIdle();
    });
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), grace.toMillis())));
    const result = await Promise.race([drained, timedOut]);
    clearTimeout(timer);
    this.halted = true;
    clearInterval(this.heartbeatTimer);
    this.queue.clear();
    if (result === 'timeout') this.rt.logger.warn({ inflight: [...this.inflight.keys()], inline: this.reservations.length }, 'slipway: closing with hooks still in flight; they will be resumed');
  }

  inflightKeys(): string[] {
    return [...this.inflight.keys()];
  }

  private noteError(error: unknown) {
    this.errors.push(error);
    if (this.errors.length > ERRORS_KEPT) this.errors.splice(0, this.errors.length - ERRORS_KEPT);
  }
}

/** A pass's outcome as its observers name it (`slipway/tracing`): where its work item went. */
function passOutcome(outcome: Outcome | 'error'): Exclude<Outcome['next'], 'deleted' | 'finished'> | 'error' {
  if (outcome === 'error') return 'error';
  if (outcome.next === 'deleted') return 'delete';
  if (outcome.next === 'finished') return outcome.due || outcome.at ? 'at' : 'park';
  return outcome.next;
}
