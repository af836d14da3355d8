/**
 * `slipway/metrics`: a broker's figures for Prometheus, through `prom-client`. prom-client is
 * an optional peer dependency and this is the only module that loads it: an application
 * that never imports `slipway/metrics` need not install it.
 *
 * Gauges are `broker.stats()` as of the scrape (one read, shared by the scrapes of
 * `statsCacheTtl`): the same figures from every process on one database. Histograms and
 * counters count what this process's broker saw: sum them over processes.
 */
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';
import type { Registry } from 'prom-client';
import { internals, type Broker, type BrokerStats } from './broker/index.js';
import { BrokerClosedError } from './errors/broker-closed-error.js';
import { MissingPeerDependencyError } from './errors/missing-peer-dependency-error.js';
import { ValidationError } from './errors/validation-error.js';
import { RESOURCE_STATUSES } from './model/states.js';
import { parseDuration, type DurationInput } from './time.js';

export interface SlipwayMetricsOptions {
  /**
   * The registry the metrics are registered on. One broker per registry: a second
   * `slipwayMetrics` on a registry that holds them throws.
   * @defaultValue prom-client's default registry (`register`)
   */
  registry?: Registry;
  /**
   * How long one `broker.stats()` read serves scrapes after it began, on the broker's
   * clock. Scrapes meanwhile, and scrapes during the read, get its figures: the database
   * sees at most one stats query per period, however many scrapers there are. With 0,
   * each scrape reads once (its gauges share the read).
   * @defaultValue 1 second
   */
  statsCacheTtl?: DurationInput;
}

/** What `slipwayMetrics` returns: stop it to unregister the metrics and stop listening. */
export interface SlipwayMetrics extends AsyncDisposable {
  readonly registry: Registry;
  /** Removes the metrics from the registry and stops counting. Calling it again does nothing. */
  stop(): void;
}

/** Seconds: from a few milliseconds (a lease served from an idle resource) to an hour (a VM built on demand). */
const WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600];
/** Seconds: a quick `canAllocate` to a long `git clone` or VM boot (hook timeouts go up to an hour). */
const HOOK_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600];

/** The names of the metrics `slipwayMetrics` registers. */
export const METRIC_NAMES = [
  'slipway_resources',
  'slipway_leases',
  'slipway_waiting_leases',
  'slipway_oldest_transitional_seconds',
  'slipway_lease_wait_seconds',
  'slipway_hook_duration_seconds',
  'slipway_hook_failures_total',
  'slipway_allocations_total',
] as const;

/**
 * Registers slipway's metrics of `broker` on a prom-client registry (the default one unless
 * `options.registry` is given); serve `registry.metrics()` at `/metrics`. See the README,
 * "Metrics and traces", for what each metric counts and how they add up over processes.
 */
export function slipwayMetrics(broker: Broker, options: SlipwayMetricsOptions = {}): SlipwayMetrics {
  const client = loadPromClient();
  const inner = internals.get(broker);
  if (!inner) throw new ValidationError('broker', 'is not a broker returned by createBroker()');
  if (options === null || typeof options !== 'object') throw new ValidationError('options', 'must be an object like { registry }');
  const unknown = Object.keys(options).filter((k) => k !== 'registry' && k !== 'statsCacheTtl');
  if (unknown.length > 0) throw new ValidationError(`options.${unknown[0]}`, 'is not an option of slipwayMetrics (registry, statsCacheTtl)');
  const registry = options.registry ?? client.register;
  if (typeof registry?.getSingleMetric !== 'function') throw new ValidationError('options.registry', 'must be a prom-client Registry');
  const cacheMs = parseDuration(options.statsCacheTtl ?? { seconds: 1 }, 'options.statsCacheTtl').toMillis();
  const taken = METRIC_NAMES.filter((name) => registry.getSingleMetric(name));
  if (taken.length > 0) {
    throw new ValidationError(
      'options.registry',
      `already holds ${taken.join(', ')}: slipwayMetrics was called on it before (stop() that one first, or give each broker a registry of its own)`,
    );
  }

  const read = statsReader(broker, cacheMs);
  const registers = [registry];
  /** A gauge set afresh from the scrape's shared `stats()` read: series that vanished go with the reset. */
  const statsGauge = <L extends string>(name: string, help: string, labelNames: readonly L[], fill: (stats: BrokerStats, set: (labels: Record<L, string>, value: number) => void) => void) =>
    new client.Gauge<L>({
      name,
      help,
      labelNames,
      registers,
      async collect() {
        this.reset();
        const stats = await read();
        if (stats) fill(stats, (labels, value) => this.set(labels, value));
      },
    });
  statsGauge('slipway_resources', 'Resources per blueprint and status (broker.stats()).', ['blueprint', 'status'], (stats, set) => {
    for (const [blueprint, s] of Object.entries(stats.blueprints)) {
      for (const status of RESOURCE_STATUSES) set({ blueprint, status }, s.resources[status]);
    }
  });
  statsGauge('slipway_leases', 'Leases per requested type and status (broker.stats()).', ['type', 'status'], (stats, set) => {
    for (const [type, s] of Object.entries(stats.types)) {
      for (const [status, n] of Object.entries(s.leases)) set({ type, status }, n);
    }
  });
  statsGauge('slipway_waiting_leases', 'Pending leases per type: the waiting queue (broker.stats()).', ['type'], (stats, set) => {
    for (const [type, s] of Object.entries(stats.types)) set({ type }, s.waiting);
  });
  statsGauge(
    'slipway_oldest_transitional_seconds',
    'Age of the oldest resource of each blueprint in a transitional state (pending, released, broken, destroying); absent when none is (broker.stats()).',
    ['blueprint', 'status'],
    (stats, set) => {
      for (const [blueprint, s] of Object.entries(stats.blueprints)) {
        for (const [status, ms] of Object.entries(s.oldestAgeMs)) set({ blueprint, status }, ms / 1000);
      }
    },
  );

  const leaseWait = new client.Histogram({
    name: 'slipway_lease_wait_seconds',
    help: 'Time from a lease request to the lease being active, per requested type (leases activated by this process).',
    labelNames: ['type'],
    buckets: WAIT_BUCKETS,
    registers,
  });
  const hookDuration = new client.Histogram({
    name: 'slipway_hook_duration_seconds',
    help: 'Blueprint hook calls by this process: their duration, per blueprint, hook and outcome (ok, retry, child, failed).',
    labelNames: ['blueprint', 'hook', 'outcome'],
    buckets: HOOK_BUCKETS,
    registers,
  });
  const hookFailures = new client.Counter({
    name: 'slipway_hook_failures_total',
    help: 'Blueprint hook calls by this process that threw or timed out, per blueprint, hook and the code of what was thrown ("none" when it had no code).',
    labelNames: ['blueprint', 'hook', 'code'],
    registers,
  });
  const allocations = new client.Counter({
    name: 'slipway_allocations_total',
    help: 'Resources this process began to allocate, per blueprint.',
    labelNames: ['blueprint'],
    registers,
  });
  // Zero from the start, so that rate() sees the first allocation of a blueprint.
  for (const blueprint of inner.runtime.blueprints.keys()) allocations.inc({ blueprint }, 0);

  const unsubscribe = [
    inner.events.on('lease.waited', (e) => leaseWait.observe({ type: e.type }, e.waitedMs / 1000)),
    inner.events.on('hook.called', (call) => {
      hookDuration.observe({ blueprint: call.blueprint, hook: call.hook, outcome: call.outcome }, call.durationMs / 1000);
      if (call.outcome === 'failed') hookFailures.inc({ blueprint: call.blueprint, hook: call.hook, code: call.code ?? 'none' });
    }),
    inner.events.on('log', (entry) => {
      if (entry.type === 'resource.allocating' && entry.blueprint) allocations.inc({ blueprint: entry.blueprint });
    }),
  ];

  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    for (const off of unsubscribe) off();
    for (const name of METRIC_NAMES) registry.removeSingleMetric(name);
  };
  return { registry, stop, [Symbol.asyncDispose]: async () => stop() };
}

/**
 * `broker.stats()` for the gauges: one read shared by every gauge of a scrape and every
 * scrape while it runs, and after it for `cacheMs` from its start (even with 0, the gauges
 * of one scrape read it once, together, and agree). A failed read is not kept; a closed
 * broker has no figures (null): its series disappear.
 */
function statsReader(broker: Broker, cacheMs: number): () => Promise<BrokerStats | null> {
  let cached: { at: number; stats: Promise<BrokerStats | null>; settled: boolean } | null = null;
  return () => {
    const now = broker.clock.now().toMillis();
    if (cached && (!cached.settled || now - cached.at < cacheMs)) return cached.stats;
    const read: { at: number; stats: Promise<BrokerStats | null>; settled: boolean } = { at: now, stats: Promise.resolve(null), settled: false };
    read.stats = broker.stats().then(
      (stats) => {
        read.settled = true;
        return stats;
      },
      (error: unknown) => {
        read.settled = true;
        if (error instanceof BrokerClosedError) return null;
        if (cached === read) cached = null;
        throw error;
      },
    );
    cached = read;
    return read.stats;
  };
}

/** prom-client, loaded only when metrics are asked for: it is an optional peer dependency. */
function loadPromClient(): typeof PromClient {
  try {
    return createRequire(import.meta.url)('prom-client') as typeof PromClient;
  } catch (error) {
    if ((error as { code?: unknown })?.code === 'MODULE_NOT_FOUND') throw new MissingPeerDependencyError('prom-client', 'slipway/metrics', '^15', error);
    throw error;
  }
}
