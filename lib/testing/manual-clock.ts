import { DateTime, Duration, type DurationLike } from 'luxon';
import type { Clock } from '../clock.js';

/** A clock that moves only when told to; scheduled callbacks fire, in time order, as it passes them. */
export class ManualClock implements Clock {
  private current: DateTime;
  private timers: Array<{ at: number; fn: () => void; seq: number }> = [];
  private seq = 0;

  constructor(start: DateTime = DateTime.fromISO('2030-01-01T00:00:00Z').toUTC()) {
    this.current = start.toUTC();
  }

  now(): DateTime {
    return this.current;
  }

  schedule(at: DateTime, fn: () => void): () => void {
    const timer = { at: at.toMillis(), fn, seq: this.seq++ };
    if (timer.at <= this.current.toMillis()) {
      queueMicrotask(fn);
      return () => undefined;
    }
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((t) => t !== timer);
    };
  }

  /** Moves time forward and fires every callback scheduled up to the new time. */
  advance(by: Duration | DurationLike): void {
    this.set(this.current.plus(Duration.fromDurationLike(by)));
  }

  set(to: DateTime): void {
    if (to < this.current) throw new Error('ManualClock cannot go backwards');
    this.current = to.toUTC();
    const due = this.timers.filter((t) => t.at <= this.current.toMillis()).sort((a, b) => a.at - b.at || a.seq - b.seq);
    this.timers = this.timers.filter((t) => t.at > this.current.toMillis());
    for (const t of due) t.fn();
  }

  /** How many callbacks are waiting for a later time. */
  get pending(): number {
    return this.timers.length;
  }
}
