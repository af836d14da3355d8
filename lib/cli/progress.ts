import type { Io } from './io.js';

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/**
 * The progress of a lease being acquired, on stderr. On a terminal: one spinner line
 * (status and time waited) redrawn in place, with each log line printed above it. Off a
 * terminal: the log lines only, one per line, nothing redrawn.
 */
export class Progress {
  private status = 'requested';
  private readonly started = Date.now();
  private frame = 0;
  private timer: NodeJS.Timeout | undefined;
  private shown = false;

  constructor(private readonly io: Io, private readonly label: () => string) {}

  start(): void {
    if (!this.io.interactive) return;
    this.timer = setInterval(() => this.draw(), 100);
    this.timer.unref();
    this.draw();
  }

  setStatus(status: string): void {
    this.status = status;
    if (this.io.interactive) this.draw();
  }

  /** A line that stays: above the spinner on a terminal, a plain line off it. */
  line(text: string): void {
    if (!this.io.interactive) return this.io.err(text);
    this.clear();
    this.io.err(text);
    this.draw();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.clear();
  }

  private clear(): void {
    if (this.shown) process.stderr.write('\r\x1b[2K');
    this.shown = false;
  }

  private draw(): void {
    if (!this.timer) return;
    const waited = Math.floor((Date.now() - this.started) / 1000);
    const frame = FRAMES[this.frame++ % FRAMES.length];
    process.stderr.write(`\r\x1b[2K${this.io.errPaint.yellow(frame!)} ${this.label()} ${this.status} · waited ${waited}s`);
    this.shown = true;
  }
}
