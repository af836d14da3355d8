import { fileURLToPath } from 'node:url';
import { runChild } from '../support/child.js';
import type { BenchConfig } from '../support/config.js';
import type { Tier } from '../support/tiers.js';
import type { ScaleJob, ScaleResult } from './scale-child.js';

const CHILD = fileURLToPath(new URL('./scale-child.ts', import.meta.url));

/** Runs one scale job in a fresh process (see runChild) and returns its answer. */
export function runScaleChild(job: ScaleJob): Promise<ScaleResult> {
  return runChild(CHILD, job);
}

/**
 * The cost per cycle (one acquirer, sequential full cycles) with 10, 1,000 and 10,000
 * idle active resources and the history of destroyed rows in place. One schema; the
 * pool grows between the sizes.
 */
export function scale(tier: Tier, config: BenchConfig): Promise<ScaleResult> {
  const c = config.scale;
  return runScaleChild({
    tier: tier.name,
    url: tier.url,
    label: 'scale',
    sizes: c.sizes,
    historyLeases: c.historyLeases,
    historyResources: c.historyResources,
    seconds: c.seconds,
    minCycles: c.minCycles,
    analyzeStatements: true,
    cpuProfileSeconds: c.cpuProfileSeconds,
  });
}

/** Worker RSS: a fresh process with only a broker and its pool, at the small and the large size, after a GC. */
export function rss(tier: Tier, config: BenchConfig): Promise<ScaleResult> {
  return runScaleChild({
    tier: tier.name,
    url: tier.url,
    label: 'rss',
    sizes: config.rss.sizes,
    historyLeases: 0,
    historyResources: 0,
    seconds: config.rss.seconds,
    minCycles: config.rss.minCycles,
    analyzeStatements: false,
    cpuProfileSeconds: 0,
  });
}
