import type { Lease } from '../../lib/index.js';
import { fakeBlueprint } from '../../lib/testing/index.js';
import type { BenchConfig } from '../support/config.js';
import { sleep, summarize, until, type LatencySummary } from '../support/measure.js';
import type { Tier } from '../support/tiers.js';
import { bounded, openBroker } from './common.js';

export interface HandoffResult extends LatencySummary {
  resourcesBuilt: number;
  gapMs: number;
}

/**
 * Release to the next waiting lease being active: one exclusive resource
 * (`maxResources: 1`), held by lease A; lease B is requested and has settled into
 * waiting (its `lease.waiting-for-resources` log committed). The sample runs from
 * `A.release()` to B's `whenActive()` resolving. B then holds the resource for the next
 * sample.
 */
export async function handoff(tier: Tier, config: BenchConfig): Promise<HandoffResult> {
  const blueprint = fakeBlueprint({ name: 'handoff', exclusive: true, limits: { maxResources: 1 } });
  const { broker } = await openBroker(tier, 'handoff', blueprint);
  const waiting = new Set<string>();
  const off = broker.on('log', (e) => e.type === 'lease.waiting-for-resources' && e.lease && waiting.add(e.lease));
  try {
    let holder: Lease = await broker.acquire({ type: 'fake' });
    const samples: number[] = [];
    const total = config.handoff.warmup + config.handoff.samples;
    for (let i = 0; i < total; i++) {
      const next = await broker.requestLease({ type: 'fake' });
      await until(() => waiting.has(next.id), `lease ${next.id} to wait`);
      const active = next.whenActive();
      await sleep(config.handoff.gapMs);
      const t0 = performance.now();
      await holder.release({ wait: false });
      holder = await bounded(broker, next.id, 'active', active);
      if (i >= config.handoff.warmup) samples.push(performance.now() - t0);
      waiting.delete(next.id);
    }
    await holder.release();
    return { ...summarize(samples), resourcesBuilt: blueprint.calls.allocateResource, gapMs: config.handoff.gapMs };
  } finally {
    off();
    await broker.close();
  }
}
