/**
 * One round of the embedded ratio target in a fresh process: the bare PGlite loop, then
 * slipway at the same number of acquirers. In the bench's own process the two ran after
 * every workload before them, and the loop slowed more than the broker did (278–393
 * cycles/s there against 403–418 alone, in one run), which made the ratio read better than
 * it is. Started by `embeddedRatioRound` with `node --import tsx --expose-gc`; it receives
 * its job over IPC and answers the same way.
 */
import { barePgliteRate, type BarePgliteResult } from '../references/bare-pglite.js';
import { serveJob } from '../support/child.js';
import type { BenchConfig } from '../support/config.js';
import { attachTier } from '../support/tiers.js';
import { throughputAt, type ThroughputPoint } from './throughput.js';

export interface RatioJob {
  label: string;
  clients: number;
  config: BenchConfig;
}

export interface RatioRoundResult {
  bare: BarePgliteResult;
  slipway: ThroughputPoint;
}

async function run(job: RatioJob): Promise<RatioRoundResult> {
  const tier = await attachTier('embedded');
  try {
    const bare = await barePgliteRate(tier, job.config);
    const slipway = await throughputAt(tier, job.clients, job.config);
    return { bare, slipway };
  } finally {
    await tier.stop();
  }
}

serveJob(run);
