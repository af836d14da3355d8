import { Registry } from 'prom-client';
import { internals, type Broker, type BrokerStats } from '../lib/broker/index.js';
import { ValidationError } from '../lib/errors/validation-error.js';
import { METRIC_NAMES, slipwayMetrics } from '../lib/metrics.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, realBroker, testBroker } from './helpers/broker.js';

guardBrokers();

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition, as a scraper reads them. */
function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]));
    samples.push({ name: m[1]!, labels, value: m[3] === '+Inf' ? Infinity : Number(m[3]) });
  }
  return samples;
}

async function scrape(registry: Registry): Promise<Sample[]> {
  return parseExposition(await registry.metrics());
}

/** The value of the one sample of `name` with exactly these labels (le included for buckets); undefined when absent. */
function valueOf(samples: Sample[], name: string, labels: Record<string, string>): number | undefined {
  const found = samples.filter((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === JSON.stringify(Object.entries(labels).sort()));
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} ${JSON.stringify(labels)}`);
  return found[0]?.value;
}

/** The gauge series as `stats()` says they must be, without the ages (they grow between two reads). */
function gaugesOf(stats: BrokerStats): Record<string, number> {
  const expected: Record<string, number> = {};
  for (const [blueprint, s] of Object.entries(stats.blueprints)) {
    for (const [status, n] of Object.entries(s.resources)) expected[`slipway_resources{blueprint=${blueprint},status=${status}}`] = n;
  }
  for (const [type, s] of Object.entries(stats.types)) {
    for (const [status, n] of Object.entries(s.leases)) expected[`slipway_leases{status=${status},type=${type}}`] = n;
    expected[`slipway_waiting_leases{type=${type}}`] = s.waiting;
  }
  return expected;
}

function scrapedGauges(samples: Sample[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) {
    if (!['slipway_resources', 'slipway_leases', 'slipway_waiting_leases'].includes(s.name)) continue;
    const labels = Object.entries(s.labels).sort().map(([k, v]) => `${k}=${v}`).join(',');
    out[`${s.name}{${labels}}`] = s.value;
  }
  return out;
}

const withoutAges = (stats: BrokerStats) => JSON.stringify(gaugesOf(stats));

/**
 * Scrapes between two stats() reads that agree (the broker did not move meanwhile), and
 * checks every gauge against them; ages lie between the two reads' ages.
 */
async function expectGaugesMatchStats(broker: Broker, registry: Registry): Promise<BrokerStats> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const before = await broker.stats();
    const samples = await scrape(registry);
    const after = await broker.stats();
    if (withoutAges(before) !== withoutAges(after)) continue;
    expect(scrapedGauges(samples)).toEqual(gaugesOf(after));
    for (const [blueprint, s] of Object.entries(after.blueprints)) {
      const scraped = samples.filter((x) => x.name === 'slipway_oldest_transitional_seconds' && x.labels.blueprint === blueprint);
      expect(scraped.map((x) => x.labels.status).sort()).toEqual(Object.keys(s.oldestAgeMs).sort());
      for (const x of scraped) {
        const key = x.labels.status as keyof typeof s.oldestAgeMs;
        expect(x.value).toBeGreaterThanOrEqual(before.blueprints[blueprint]!.oldestAgeMs[key]! / 1000);
        expect(x.value).toBeLessThanOrEqual(s.oldestAgeMs[key]! / 1000);
      }
    }
    return after;
  }
  throw new Error('the broker never held still for one scrape');
}

function gate() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('slipway/metrics', () => {
  test('during a burst on a real-clock broker, every gauge equals stats(), and the histograms and counters count what happened', async () => {
    const activation = gate();
    const bp = fakeBlueprint({ name: 'burst', type: 'slot', exclusive: true, gates: { activateResource: () => activation.promise } });
    const broker = await realBroker({ blueprints: [bp] });
    const registry = new Registry();
    const metrics = slipwayMetrics(broker, { registry, statsCacheTtl: 0 });

    const leases = Array.from({ length: 8 }, (_, i) => broker.acquire({ type: 'slot', attributes: { i } }));
    // Frozen mid-burst: one resource allocating (the default limit with none active), its activation held, 8 leases waiting.
    const deadline = Date.now() + 20_000;
    let stats = await broker.stats();
    while ((bp.calls.activateResource < 1 || stats.types.slot!.leases.pending + stats.types.slot!.leases.acquired < 8) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      stats = await broker.stats();
    }
    stats = await expectGaugesMatchStats(broker, registry);
    expect(stats.blueprints.burst!.resources.pending).toBe(1);
    expect(stats.blueprints.burst!.oldestAgeMs.pending).toBeGreaterThanOrEqual(0);
    expect(stats.types.slot!.waiting).toBeGreaterThan(0);

    // Held 300 ms after the hook began: it and every lease's wait last longer than that.
    await new Promise((r) => setTimeout(r, 300));
    activation.open();
    const active = await Promise.all(leases);
    await expectGaugesMatchStats(broker, registry);
    await Promise.all(active.map((l) => l.release()));
    const deadline2 = Date.now() + 20_000;
    while ((await broker.stats()).types.slot!.leases.destroyed < 8 && Date.now() < deadline2) await new Promise((r) => setTimeout(r, 20));
    stats = await expectGaugesMatchStats(broker, registry);
    expect(stats.types.slot!.leases.destroyed).toBe(8);

    const samples = await scrape(registry);
    const resources = await broker.resources.list();
    expect(valueOf(samples, 'slipway_allocations_total', { blueprint: 'burst' })).toBe(resources.length);
    expect(resources.length).toBeGreaterThan(1);
    // Every lease waited for the held activation, more than 300 ms: none is in a bucket below it.
    expect(valueOf(samples, 'slipway_lease_wait_seconds_count', { type: 'slot' })).toBe(8);
    expect(valueOf(samples, 'slipway_lease_wait_seconds_bucket', { type: 'slot', le: '0.25' })).toBe(0);
    expect(valueOf(samples, 'slipway_lease_wait_seconds_sum', { type: 'slot' })).toBeGreaterThanOrEqual(8 * 0.25);
    // One observation per hook call, all of them ok; the held activation took its 300 ms.
    for (const [hook, calls] of Object.entries(bp.calls)) {
      expect([hook, valueOf(samples, 'slipway_hook_duration_seconds_count', { blueprint: 'burst', hook, outcome: 'ok' }) ?? 0]).toEqual([hook, calls]);
    }
    expect(valueOf(samples, 'slipway_hook_duration_seconds_bucket', { blueprint: 'burst', hook: 'activateResource', outcome: 'ok', le: '0.25' })).toBe(bp.calls.activateResource - 1);
    expect(samples.filter((s) => s.name === 'slipway_hook_failures_total')).toEqual([]);
    metrics.stop();
    await broker.close();
  }, 60_000);

  test('a failing hook counts in slipway_hook_failures_total with the code of what it threw ("none" without one), and as a failed call', async () => {
    const bp = fakeBlueprint({
      name: 'flaky',
      failures: { allocateResource: { throws: Object.assign(new Error('disk full'), { code: 'ENOSPC' }), times: 2 }, activateResource: { throws: new Error('no code'), times: 1 } },
    });
    const broker = await realBroker({ blueprints: [bp], backoff: { initial: { milliseconds: 10 }, max: { milliseconds: 50 } }, maxAllocationFailures: 10 });
    const registry = new Registry();
    slipwayMetrics(broker, { registry });
    const lease = await broker.acquire({ type: 'fake' });
    const samples = await scrape(registry);
    expect(valueOf(samples, 'slipway_hook_failures_total', { blueprint: 'flaky', hook: 'allocateResource', code: 'ENOSPC' })).toBe(2);
    expect(valueOf(samples, 'slipway_hook_failures_total', { blueprint: 'flaky', hook: 'activateResource', code: 'none' })).toBe(1);
    expect(valueOf(samples, 'slipway_hook_duration_seconds_count', { blueprint: 'flaky', hook: 'allocateResource', outcome: 'failed' })).toBe(2);
    expect(valueOf(samples, 'slipway_hook_duration_seconds_count', { blueprint: 'flaky', hook: 'allocateResource', outcome: 'ok' })).toBe(bp.calls.allocateResource - 2);
    // Three resources begun: two broke in allocateResource, one in activateResource, the fourth serves the lease.
    expect(valueOf(samples, 'slipway_allocations_total', { blueprint: 'flaky' })).toBe((await broker.resources.list()).length);
    expect(valueOf(samples, 'slipway_lease_wait_seconds_count', { type: 'fake' })).toBe(1);
    await lease.release();
    await broker.close();
  }, 60_000);

  test('scrapes share one stats() read per statsCacheTtl (1 s by default), concurrent ones included; the gauges of one scrape read once', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint()] });
    const stats = broker.stats.bind(broker);
    let reads = 0;
    broker.stats = () => {
      reads++;
      return stats();
    };
    const registry = new Registry();
    slipwayMetrics(broker, { registry });
    await Promise.all([scrape(registry), scrape(registry), scrape(registry)]);
    expect(reads).toBe(1);
    // With no cache, each scrape still reads once for its four gauges.
    const uncached = new Registry();
    const second = slipwayMetrics(broker, { registry: uncached, statsCacheTtl: 0 });
    await scrape(uncached);
    await scrape(uncached);
    expect(reads).toBe(3);
    second.stop();
    broker.clock.advance({ milliseconds: 999 });
    await scrape(registry);
    expect(reads).toBe(3);
    await broker.requestLease({ type: 'fake' });
    broker.clock.advance({ milliseconds: 1 });
    const samples = await scrape(registry);
    expect(reads).toBe(4);
    expect(valueOf(samples, 'slipway_leases', { type: 'fake', status: 'pending' })).toBe(1);
    await broker.close();
  });

  test('stop() unregisters and stops counting; a second registration on one registry is refused clearly; no listener, no hook timing', async () => {
    const bp = fakeBlueprint();
    const broker = await testBroker({ blueprints: [bp] });
    const runtime = internals.get(broker)!.runtime;
    expect(runtime.hookObserver!()).toBeNull();
    const registry = new Registry();
    const metrics = slipwayMetrics(broker, { registry });
    expect(runtime.hookObserver!()).toEqual(expect.any(Function));
    let refused: unknown;
    try {
      slipwayMetrics(broker, { registry });
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(ValidationError);
    expect((refused as Error).message).toMatch(/^options\.registry: already holds slipway_resources, .*slipwayMetrics was called on it before/);
    expect(() => slipwayMetrics(broker, { registry: new Registry(), bogus: 1 } as never)).toThrow(/options\.bogus: is not an option/);
    expect(() => slipwayMetrics({ ...broker }, { registry: new Registry() })).toThrow(/broker: is not a broker/);

    metrics.stop();
    metrics.stop();
    expect(runtime.hookObserver!()).toBeNull();
    expect(METRIC_NAMES.filter((n) => registry.getSingleMetric(n))).toEqual([]);
    expect(await registry.metrics()).toBe('\n');
    // Registered again after stop(): counting starts from zero.
    const again = slipwayMetrics(broker, { registry });
    const lease = await broker.acquire({ type: 'fake' });
    const samples = await scrape(registry);
    expect(valueOf(samples, 'slipway_lease_wait_seconds_count', { type: 'fake' })).toBe(1);
    await lease.release();
    await again[Symbol.asyncDispose]();
    expect(registry.getSingleMetric('slipway_leases')).toBeUndefined();
    await broker.close();
  });

  test('a closed broker has no gauge series, and the scrape still answers', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'gone' })] });
    const registry = new Registry();
    slipwayMetrics(broker, { registry, statsCacheTtl: 0 });
    expect(valueOf(await scrape(registry), 'slipway_resources', { blueprint: 'gone', status: 'active' })).toBe(0);
    await broker.close();
    const samples = await scrape(registry);
    expect(samples.filter((s) => ['slipway_resources', 'slipway_leases', 'slipway_waiting_leases'].includes(s.name))).toEqual([]);
    expect(valueOf(samples, 'slipway_allocations_total', { blueprint: 'gone' })).toBe(0);
  });
});
