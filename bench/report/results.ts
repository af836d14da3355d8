import type { PgbenchPoint } from '../references/pgbench.js';
import type { PoolPoint } from '../references/generic-pool.js';
import type { ColdStart } from '../workloads/cold-start.js';
import type { BenchConfig, TierName } from '../support/config.js';
import type { BurstResult } from '../workloads/burst.js';
import type { HandoffResult } from '../workloads/handoff.js';
import type { ProfileResult } from '../workloads/profile.js';
import type { ScaleResult } from '../workloads/scale-child.js';
import type { ThroughputPoint } from '../workloads/throughput.js';
import type { WarmAcquireResult } from '../workloads/warm-acquire.js';

/** A throughput point with the same run's reference limits beside it. */
export interface ThroughputWithRatios extends ThroughputPoint {
  /** pgbench -N TPS at the same client count (same cluster, same run). */
  pgbenchTps: number | null;
  ratioToPgbench: number | null;
  genericPoolOpsPerSec: number | null;
  ratioToGenericPool: number | null;
}

export interface TierResults {
  info: Record<string, unknown>;
  warm?: WarmAcquireResult & { p50InPgbenchCommits: number | null };
  handoff?: HandoffResult & { p50InPgbenchCommits: number | null };
  throughput?: ThroughputWithRatios[];
  burst?: BurstResult;
  scale?: ScaleResult & { ratioLargestToSmallest: number };
  rss?: ScaleResult & { ratioLargestToSmallest: number };
  profile?: ProfileResult;
  errors: Array<{ workload: string; error: string }>;
}

export interface Target {
  name: string;
  value: number;
  unit: string;
  target: string;
  pass: boolean;
}

export interface Results {
  version: 1;
  mode: BenchConfig['mode'];
  out: string;
  startedAt: string;
  finishedAt: string;
  durationSeconds: number;
  machine: Record<string, unknown>;
  config: BenchConfig;
  references: {
    pgbench?: { scale: number; initSeconds: number; points: PgbenchPoint[] };
    genericPool?: PoolPoint[];
    /** createBroker() on the embedded database, first and second in a fresh process. */
    coldStart?: ColdStart;
  };
  tiers: Partial<Record<TierName, TierResults>>;
  targets: Target[];
}
