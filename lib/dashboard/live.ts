import type { ServerResponse } from 'node:http';
import { ANY_HINT, internals, type Broker, type BrokerStats } from '../broker/index.js';

/** At most one "changed" message per this many ms: a burst of transitions is one re-fetch. */
const COALESCE_MS = 250;
/** A comment line now and then keeps proxies from closing an idle stream. */
const KEEPALIVE_MS = 25_000;

/**
 * The Server-Sent Events of one dashboard: every open page gets a `changed` message when
 * the broker's objects may have changed, and re-fetches its fragment. The sources are this
 * process's broker events, the LISTEN hints of the other processes on Postgres, and a
 * sweep that compares a fingerprint of `stats()` every `sweepMs`: hints are only hints,
 * the sweep covers the lost ones. Nothing runs while no page listens but the listeners.
 */
export class LiveUpdates {
  private readonly streams = new Set<ServerResponse>();
  private readonly unsubscribe: Array<() => void> = [];
  private pending: NodeJS.Timeout | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private keepAlive: NodeJS.Timeout | null = null;
  private fingerprint: string | null = null;
  private sweeping = false;
  private closed = false;

  constructor(private readonly broker: Broker, private readonly sweepMs: number) {
    const changed = () => this.changed();
    for (const event of ['lease', 'resource', 'log'] as const) this.unsubscribe.push(broker.on(event, changed));
    const hints = internals.get(broker)?.leaseHints;
    if (hints) {
      hints.on(ANY_HINT, changed);
      this.unsubscribe.push(() => hints.off(ANY_HINT, changed));
    }
  }

  /** How many pages listen now. */
  get listeners(): number {
    return this.streams.size;
  }

  /** Turns a response into an event stream until the page goes or the dashboard closes. */
  open(res: ServerResponse): void {
    if (this.closed) return void res.writeHead(503).end();
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    // A lost stream is re-opened by the browser after 5 s, no sooner: no page asks more often.
    res.write('retry: 5000\n\n');
    this.streams.add(res);
    res.on('close', () => {
      this.streams.delete(res);
      if (this.streams.size === 0) this.idle();
    });
    this.sweepTimer ??= setInterval(() => void this.sweep(), this.sweepMs);
    this.keepAlive ??= setInterval(() => this.broadcast(': keepalive\n\n'), KEEPALIVE_MS);
  }

  /** Something changed: tell every page once the burst is over. */
  changed(): void {
    if (this.closed || this.streams.size === 0 || this.pending) return;
    this.pending = setTimeout(() => {
      this.pending = null;
      this.broadcast('event: changed\ndata: {}\n\n');
    }, COALESCE_MS);
  }

  /** Ends every stream and stops listening; the pages' EventSources will find the dashboard gone. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const off of this.unsubscribe) off();
    if (this.pending) clearTimeout(this.pending);
    for (const res of [...this.streams]) res.end();
    this.streams.clear();
    this.idle();
  }

  private idle(): void {
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    if (this.keepAlive) clearInterval(this.keepAlive);
    this.sweepTimer = this.keepAlive = null;
    this.fingerprint = null;
  }

  private broadcast(text: string): void {
    for (const res of this.streams) res.write(text);
  }

  /** The backstop: one `stats()` read; a change of any count means a change the pages missed. */
  private async sweep(): Promise<void> {
    if (this.sweeping || this.closed) return;
    this.sweeping = true;
    try {
      const next = fingerprintOf(await this.broker.stats());
      if (this.fingerprint !== null && next !== this.fingerprint) this.changed();
      this.fingerprint = next;
    } catch {
      // A closed broker or a database away: the next sweep tries again, the pages keep what they show.
    } finally {
      this.sweeping = false;
    }
  }
}

/** The counts of a stats() read, without its ages (they grow every second). */
function fingerprintOf(stats: BrokerStats): string {
  const blueprints = Object.entries(stats.blueprints).map(([name, b]) => [name, b.resources, b.destroying, b.failures?.streak ?? 0, b.requestedAuthorizations]);
  const types = Object.entries(stats.types).map(([type, t]) => [type, t.leases, t.waitingForAuthorization]);
  return JSON.stringify([blueprints, types]);
}
