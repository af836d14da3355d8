import type { BarePgliteResult } from '../references/bare-pglite.js';
import type { GraphileWorkerResult } from '../references/graphile-worker.js';
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
import type { TracingCostResult } from '../workloads/tracing-cost.js';

/** A throughput point with the same run's reference limits beside it. */
export interface ThroughputWithRatios extends ThroughputPoint {
  /** pgbench -N TPS at the same client count (same cluster, same run). */
  pgbenchTps: number | null;
  ratioToPgbench: number | null;
  genericPoolOpsPerSec: number | null;
  ratioToGenericPool: number | null;
  /** graphile-worker jobs/s at a concurrency equal to the acquirers (only at 8, the one it runs at). */
  graphileJobsPerSec: number | null;
  ratioToGraphile: number | null;
}

export interface TierResults {
  info: Record<string, unknown>;
  warm?: WarmAcquireResult & { p50InPgbenchCommits: number | null };
  handoff?: HandoffResult & { p50InPgbenchCommits: number | null };
  /** The same hand-off with the waiting lease in a second process (Postgres only). */
  handoffAcross?: HandoffResult;
  throughput?: ThroughputWithRatios[];
  /**
   * The interleaved rounds at 8 acquirers (`ratioRounds`, more than one): each the
   * references measured right before slipway, in the same round. The first round is the
   * one `throughput` and `references` report.
   */
  ratioRounds?: RatioRound[];
  burst?: BurstResult;
  /** The same burst on a warm pool (`minIdle`), beside the cold one. */
  burstWarm?: BurstResult;
  scale?: ScaleResult & { ratioLargestToSmallest: number };
  rss?: ScaleResult & { ratioLargestToSmallest: number };
  profile?: ProfileResult;
  tracing?: TracingCostResult;
  errors: Array<{ workload: string; error: string }>;
}

export interface RatioRound {
  cyclesPerSec: number;
  pgbenchTps: number | null;
  graphileJobsPerSec: number | null;
  barePgliteCyclesPerSec: number | null;
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
    /** graphile-worker add + run + complete at concurrency 8, on the same cluster. */
    graphileWorker?: GraphileWorkerResult;
    /** The statements of one cycle replayed straight to PGlite, with no broker (embedded floor). */
    barePglite?: BarePgliteResult;
    /** createBroker() on the embedded database, first and second in a fresh process. */
    coldStart?: ColdStart;
  };
  tiers: Partial<Record<TierName, TierResults>>;
  targets: Target[];
}
