import { fakeBlueprint } from '../../lib/testing/index.js';
import type { BenchConfig } from '../support/config.js';
import { sleep, summarize, type LatencySummary } from '../support/measure.js';
import type { Tier } from '../support/tiers.js';
import { bounded, boundedAcquire, fullCycle, openBroker } from './common.js';

export interface WarmAcquireResult extends LatencySummary {
  /** Release until destroyed, of the same samples (not part of the target). */
  release: LatencySummary;
  resourcesBuilt: number;
  gapMs: number;
}

/**
 * Warm acquire: one acquirer, one idle active resource (built during the warm-up),
 * a fake blueprint with no delays. Each sample is `broker.acquire()` from the call to
 * the resolved, active lease. Between samples the broker is left `gapMs` to finish the
 * previous lease's tail (the resource's own pass), so each acquire starts from idle.
 */
export async function warmAcquire(tier: Tier, config: BenchConfig): Promise<WarmAcquireResult> {
  const blueprint = fakeBlueprint({ name: 'warm', exclusive: true });
  const { broker } = await openBroker(tier, 'warm', blueprint);
  try {
    for (let i = 0; i < config.warm.warmup; i++) await fullCycle(broker);
    const acquire: number[] = [];
    const release: number[] = [];
    for (let i = 0; i < config.warm.samples; i++) {
      await sleep(config.warm.gapMs);
      const t0 = performance.now();
      const lease = await boundedAcquire(broker);
      const t1 = performance.now();
      await bounded(broker, lease.id, 'destroyed', lease.release());
      acquire.push(t1 - t0);
      release.push(performance.now() - t1);
    }
    return { ...summarize(acquire), release: summarize(release), resourcesBuilt: blueprint.calls.allocateResource, gapMs: config.warm.gapMs };
  } finally {
    await broker.close();
  }
}
