import { createHash } from 'node:crypto';
import pg from 'pg';

/** What one committed unit of work tells the other brokers on the same schema. */
export interface Hint {
  /** The workerId of the broker that wrote it. */
  from: string;
  /** Work became due: look for work now. */
  work: boolean;
  /** Leases whose status changed; `null` when there were too many to list (look at every watched lease). */
  leases: string[] | null;
  /** Only for these brokers (a catch-up for those just heard); the others take it as presence. */
  to?: string[];
}

/** Postgres caps a NOTIFY payload at 8000 bytes; stay well under it. */
const MAX_PAYLOAD = 7_000;

/** The NOTIFY channel of a schema: every broker on that schema listens on it. */
export function channelFor(schema: string): string {
  const name = `slipway_${schema}`;
  return name.length <= 63 ? name : `slipway_${createHash('sha1').update(schema).digest('hex').slice(0, 40)}`;
}

export function encodeHint(hint: Hint): string {
  const full = JSON.stringify({ f: hint.from, w: hint.work ? 1 : 0, l: hint.leases, t: hint.to });
  // Too long: "look at everything", for everyone.
  return Buffer.byteLength(full) <= MAX_PAYLOAD ? full : JSON.stringify({ f: hint.from, w: hint.work ? 1 : 0, l: null });
}

/** A hint that says only "this broker listens here": no work, no lease. */
const isPresence = (hint: Hint) => !hint.work && hint.leases !== null && hint.leases.length === 0 && !hint.to;

function mergeHints(a: Hint, b: Hint): Hint {
  // Any hint says its sender listens.
  if (isPresence(a)) return b;
  if (isPresence(b)) return a;
  const leases = a.leases === null || b.leases === null ? null : [...new Set([...a.leases, ...b.leases])];
  // Two catch-ups go to both brokers' lists; a catch-up merged with a hint for everyone goes to everyone.
  const to = a.to && b.to ? [...new Set([...a.to, ...b.to])] : undefined;
  return { from: a.from, work: a.work || b.work, leases, ...(to && { to }) };
}

export function decodeHint(payload: string | undefined): Hint | null {
  try {
    const p = JSON.parse(payload ?? '');
    return { from: String(p.f), work: p.w === 1, leases: Array.isArray(p.l) ? p.l.map(String) : null, ...(Array.isArray(p.t) && { to: p.t.map(String) }) };
  } catch {
    return null;
  }
}

export interface ListenerOptions {
  /** A connection string, or pg's client options (those of a host app's DataSource). */
  url: string | pg.ClientConfig;
  channel: string;
  applicationName: string;
  /** This broker's workerId: its hints come back to it, and are not another broker's. */
  self: string;
  /**
   * How often a broker says it listens, when it has sent nothing else for that long; a broker
   * that heard no other one for 3 periods sends no hint until it hears one. @defaultValue 5000
   */
  presenceMs?: number;
  /** A hint from another broker for this one (never a presence-only one). */
  onHint(hint: Hint): void;
  /** After every (re)connect: notifications sent while disconnected are gone, so look at everything. */
  onConnected(again: boolean): void;
  onLost(error: unknown, retryInMs: number): void;
}

/**
 * LISTEN on one dedicated connection (a pooled connection cannot hold a LISTEN).
 * When it drops it reconnects with capped exponential backoff; the periodic sweep
 * covers the gap. Hints only make brokers look sooner: the work itself is rows.
 *
 * A hint nobody hears is not sent. Every broker says it listens (a presence hint) when it
 * connects and whenever it has sent nothing for `presenceMs`, so a broker that heard no
 * other one for three of those periods is alone on the schema, and keeps its hints. A
 * broker heard anew (it started, or was silent that long) is sent a catch-up hint, "look
 * at everything", addressed to it alone, which covers whatever was kept from it. The
 * others answer a broker that starts that way at once, and it hears each of them anew in
 * turn, so what it kept before their answers came is covered too.
 */
export class Listener {
  private client: pg.Client | null = null;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private presenceTimer: NodeJS.Timeout | undefined;
  private delay = 100;
  private connectedOnce = false;
  private ready: Promise<void> | undefined;
  private readonly presenceMs: number;
  /** When each other broker was last heard, by workerId (real time: presence is about processes, not the broker's clock). */
  private readonly heard = new Map<string, number>();
  private lastSentAt = 0;

  constructor(private readonly options: ListenerOptions) {
    this.presenceMs = options.presenceMs ?? 5_000;
  }

  /** Connects the first time; resolves once listening (or after the first failure, with retries scheduled). */
  start(): Promise<void> {
    this.ready ??= this.connect();
    return this.ready;
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const connection = typeof this.options.url === 'string' ? { connectionString: this.options.url } : this.options.url;
    const client = new pg.Client({ ...connection, application_name: this.options.applicationName, connectionTimeoutMillis: 10_000, keepAlive: true });
    let failed = false;
    const lost = (error: unknown) => {
      if (failed) return;
      failed = true;
      if (this.client === client) this.client = null;
      client.removeAllListeners('notification');
      void client.end().catch(() => undefined);
      if (this.stopped) return;
      const wait = this.delay;
      this.delay = Math.min(this.delay * 2, 5_000);
      this.options.onLost(error, wait);
      this.timer = setTimeout(() => void this.connect(), wait);
      this.timer.unref();
    };
    client.on('error', lost);
    client.on('end', () => lost(new Error('the LISTEN connection ended')));
    client.on('notification', (message) => {
      if (message.channel !== this.options.channel) return;
      const hint = decodeHint(message.payload);
      if (hint && hint.from !== this.options.self) this.hear(hint);
    });
    try {
      await client.connect();
      await client.query(`LISTEN "${this.options.channel}"`);
    } catch (error) {
      lost(error);
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.delay = 100;
    const again = this.connectedOnce;
    this.connectedOnce = true;
    this.sayPresent();
    this.presenceTimer ??= setInterval(() => {
      if (Date.now() - this.lastSentAt >= this.presenceMs) this.sayPresent();
    }, this.presenceMs);
    this.presenceTimer.unref();
    this.options.onConnected(again);
  }

  private hear(hint: Hint): void {
    const now = Date.now();
    const last = this.heard.get(hint.from);
    this.heard.set(hint.from, now);
    // New, or silent long enough that hints were kept from it: it catches up on everything.
    if (last === undefined || now - last > 3 * this.presenceMs) this.queue({ from: this.options.self, work: true, leases: null, to: [hint.from] });
    // A catch-up for other brokers says only that its sender listens.
    if (!isPresence(hint) && (!hint.to || hint.to.includes(this.options.self))) this.options.onHint(hint);
  }

  /** Whether another broker may listen: one was heard within three presence periods. */
  private othersListen(): boolean {
    const now = Date.now();
    for (const [from, at] of this.heard) {
      if (now - at <= 3 * this.presenceMs) return true;
      this.heard.delete(from);
    }
    return false;
  }

  private sayPresent(): void {
    this.queue({ from: this.options.self, work: false, leases: [] });
  }

  private pending: Hint | null = null;
  private sending = false;

  /**
   * Tells the other brokers of the schema, after a commit, that work became due or
   * leases moved. Sent on this connection, so it costs the unit of work nothing; hints
   * given while one is on its way are merged into the next, so a busy broker sends
   * one NOTIFY per round trip, not one per commit. While the connection is down hints
   * wait, merged into one, and go out once it is back (they only make brokers look
   * sooner, and the sweep covers the gap; a catch-up must still reach its broker).
   * With no other broker listening, nothing is sent (see the class).
   */
  send(hint: Hint): void {
    if (this.othersListen()) this.queue(hint);
  }

  private queue(hint: Hint): void {
    this.pending = this.pending ? mergeHints(this.pending, hint) : hint;
    if (!this.sending) void this.flush();
  }

  private async flush(): Promise<void> {
    this.sending = true;
    try {
      while (this.pending && !this.stopped) {
        const client = this.client;
        // Not connected (yet, or any more): the hint waits, merged with later ones, and goes
        // out with the presence sent on connecting. One heard while LISTEN's answer arrives
        // comes before the connection is set, and its catch-up must not be lost.
        if (!client) return;
        const hint = this.pending;
        this.pending = null;
        this.lastSentAt = Date.now();
        // A failure here is the connection's: its error handler reconnects.
        await client.query('SELECT pg_notify($1, $2)', [this.options.channel, encodeHint(hint)]).catch(() => undefined);
      }
    } finally {
      this.sending = false;
    }
  }

  get listening(): boolean {
    return this.client !== null;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.presenceTimer);
    const client = this.client;
    this.client = null;
    if (client) {
      client.removeAllListeners();
      client.on('error', () => undefined);
      await client.end().catch(() => undefined);
    }
  }
}
