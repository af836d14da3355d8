import { fileURLToPath } from 'node:url';
import { fakeBlueprint } from '../../lib/testing/index.js';
import { runChild } from '../support/child.js';
import type { BenchConfig } from '../support/config.js';
import { percentile, round, sleep } from '../support/measure.js';
import type { Tier } from '../support/tiers.js';
import { fullCycle, openBroker, prewarm } from './common.js';
import type { RatioJob, RatioRoundResult } from './ratio-child.js';

export interface ThroughputPoint {
  clients: number;
  seconds: number;
  cycles: number;
  cyclesPerSec: number;
  cycleP50Ms: number;
  cycleP99Ms: number;
  errors: number;
  firstError: string | null;
  resourcesBuilt: number;
}

/**
 * Full lease cycles per second (request, active, release, destroyed) with `clients`
 * concurrent acquirers, each looping acquire → release-and-wait-for-destroyed. The
 * blueprint is exclusive (one lease per resource, as a pool hands out objects) and has
 * no delays; `clients` idle resources are built before the clock starts, so the figure
 * is the broker's own cost. Broker options are the library defaults (4 workers).
 */
export async function throughputAt(tier: Tier, clients: number, config: BenchConfig): Promise<ThroughputPoint> {
  const blueprint = fakeBlueprint({ name: `tp${clients}`, exclusive: true });
  const { broker } = await openBroker(tier, `throughput_${clients}`, blueprint);
  try {
    await prewarm(broker, clients);
    const built = blueprint.calls.allocateResource;
    // The clock is read in the loops, not kept by timers: on the embedded tier timers
    // fire only between cycles (see yieldToEventLoop in common.ts).
    const windowStart = performance.now() + config.throughput.warmupSeconds * 1000;
    const windowEnd = windowStart + config.throughput.seconds * 1000;
    const durations: number[] = [];
    let errors = 0;
    let firstError: string | null = null;
    const loops = Array.from({ length: clients }, async () => {
      while (performance.now() < windowEnd) {
        const t0 = performance.now();
        try {
          await fullCycle(broker);
        } catch (error) {
          errors++;
          firstError ??= String((error as Error)?.message ?? error);
          await sleep(10);
          continue;
        }
        const t1 = performance.now();
        // Completions inside the window count; the cycle in flight at its end does not.
        if (t1 >= windowStart && t1 <= windowEnd) durations.push(t1 - t0);
      }
    });
    await Promise.all(loops);
    return {
      clients,
      seconds: config.throughput.seconds,
      cycles: durations.length,
      cyclesPerSec: round(durations.length / config.throughput.seconds, 1),
      cycleP50Ms: round(percentile(durations, 50)),
      cycleP99Ms: round(percentile(durations, 99)),
      errors,
      firstError,
      resourcesBuilt: built,
    };
  } finally {
    await broker.close();
  }
}

const RATIO_CHILD = fileURLToPath(new URL('./ratio-child.ts', import.meta.url));

/**
 * One round of the embedded ratio target (the bare PGlite loop, then slipway at `clients`
 * acquirers) in a fresh process of its own: see ratio-child.ts.
 */
export function embeddedRatioRound(clients: number, config: BenchConfig, label: string): Promise<RatioRoundResult> {
  return runChild<RatioRoundResult, RatioJob>(RATIO_CHILD, { label, clients, config });
}
