/**
 * Command line and the two sizes of a run. `npm run bench` is the full run that writes
 * bench/results/latest.*; `--quick` is a smoke check with smaller samples (its figures
 * are not comparable to the targets); `--only` runs a subset.
 */

export const TIERS = ['postgres', 'embedded'] as const;
export type TierName = (typeof TIERS)[number];

/** In run order. `pgbench`, `graphile` (graphile-worker), `pglite` (a bare PGlite loop) and `pool` are the references. */
export const WORKLOADS = ['coldstart', 'pool', 'pgbench', 'graphile', 'pglite', 'warm', 'handoff', 'throughput', 'burst', 'scale', 'rss', 'profile', 'tracing'] as const;
export type WorkloadName = (typeof WORKLOADS)[number];

export interface BenchConfig {
  mode: 'full' | 'quick';
  tiers: TierName[];
  /** `null`: every workload. */
  only: WorkloadName[] | null;
  /** Base name of the files written to bench/results/. */
  out: string;
  clients: number[];
  /**
   * Rounds of the 8-acquirer ratio targets: each round runs the references at 8 (pgbench,
   * graphile-worker, the bare PGlite loop) and then slipway at 8, and a target takes the
   * median of its rounds' ratios, so that the machine's drift within a run moves both
   * sides of each ratio alike.
   */
  ratioRounds: number;
  warm: { samples: number; warmup: number; gapMs: number };
  handoff: { samples: number; warmup: number; gapMs: number };
  throughput: { seconds: number; warmupSeconds: number };
  pgbench: { scale: number; seconds: number };
  graphile: { seconds: number; warmupSeconds: number; countedJobsPerAdder: number };
  pool: { seconds: number };
  burst: { leases: number; maxResources: number; activationMs: number; holdMs: number; deadlineSeconds: number };
  scale: { sizes: number[]; historyLeases: number; historyResources: number; seconds: number; minCycles: number; cpuProfileSeconds: number };
  rss: { sizes: number[]; seconds: number; minCycles: number };
  profile: { cycles: number; cpuSeconds: number; cpuClients: number; moreWorkersSeconds: number; timerCycles: number };
  tracing: { rounds: number; cyclesPerRound: number; warmup: number };
}

const full = (): Omit<BenchConfig, 'tiers' | 'only' | 'out'> => ({
  mode: 'full',
  clients: [1, 8, 32],
  ratioRounds: 3,
  warm: { samples: 200, warmup: 10, gapMs: 20 },
  handoff: { samples: 120, warmup: 5, gapMs: 20 },
  throughput: { seconds: 6, warmupSeconds: 1.5 },
  pgbench: { scale: 1, seconds: 6 },
  graphile: { seconds: 6, warmupSeconds: 1.5, countedJobsPerAdder: 25 },
  pool: { seconds: 1 },
  burst: { leases: 500, maxResources: 8, activationMs: 200, holdMs: 200, deadlineSeconds: 90 },
  scale: { sizes: [10, 1_000, 10_000], historyLeases: 100_000, historyResources: 10_000, seconds: 4, minCycles: 10, cpuProfileSeconds: 3 },
  rss: { sizes: [10, 10_000], seconds: 1, minCycles: 3 },
  profile: { cycles: 20, cpuSeconds: 3, cpuClients: 8, moreWorkersSeconds: 3, timerCycles: 20 },
  tracing: { rounds: 6, cyclesPerRound: 100, warmup: 20 },
});

const quick = (): Omit<BenchConfig, 'tiers' | 'only' | 'out'> => ({
  mode: 'quick',
  clients: [1, 8],
  ratioRounds: 1,
  warm: { samples: 20, warmup: 3, gapMs: 20 },
  handoff: { samples: 10, warmup: 2, gapMs: 20 },
  throughput: { seconds: 1, warmupSeconds: 0.3 },
  pgbench: { scale: 1, seconds: 1 },
  graphile: { seconds: 1, warmupSeconds: 0.3, countedJobsPerAdder: 5 },
  pool: { seconds: 0.3 },
  burst: { leases: 30, maxResources: 8, activationMs: 200, holdMs: 200, deadlineSeconds: 15 },
  scale: { sizes: [10, 1_000], historyLeases: 2_000, historyResources: 200, seconds: 1, minCycles: 5, cpuProfileSeconds: 0 },
  rss: { sizes: [10, 500], seconds: 0.5, minCycles: 3 },
  profile: { cycles: 5, cpuSeconds: 1, cpuClients: 8, moreWorkersSeconds: 1, timerCycles: 8 },
  tracing: { rounds: 3, cyclesPerRound: 20, warmup: 5 },
});

export const USAGE = `usage: npm run bench -- [options]

  --quick                 smoke check: small samples, figures not comparable to the targets
  --only a,b              run only these workloads: ${WORKLOADS.join(', ')}
  --tier t                postgres, embedded or all (default all)
  --out name              write bench/results/<name>.{json,md} (default: latest for a full
                          run of everything, partial otherwise)
  --burst-hold-ms n       how long each burst lease is held (default 200)
  --help`;

export function parseArgs(argv: string[]): BenchConfig {
  let quickMode = false;
  let only: WorkloadName[] | null = null;
  let tiers: TierName[] = [...TIERS];
  let out: string | undefined;
  let holdMs: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const v = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : argv[++i];
      if (v === undefined) throw new Error(`${arg} needs a value\n${USAGE}`);
      return v;
    };
    const name = arg.split('=')[0];
    if (name === '--quick') quickMode = true;
    else if (name === '--only') {
      only = value().split(',').map((s) => s.trim()).filter(Boolean) as WorkloadName[];
      for (const w of only) if (!WORKLOADS.includes(w)) throw new Error(`--only: unknown workload "${w}" (one of ${WORKLOADS.join(', ')})`);
    } else if (name === '--tier') {
      const v = value();
      tiers = v === 'all' ? [...TIERS] : (v.split(',') as TierName[]);
      for (const t of tiers) if (!TIERS.includes(t)) throw new Error(`--tier: unknown tier "${t}" (postgres, embedded or all)`);
    } else if (name === '--out') {
      out = value();
      if (!/^[\w.-]+$/.test(out)) throw new Error('--out: a plain file name, no directories');
    } else if (name === '--burst-hold-ms') {
      holdMs = Number(value());
      if (!(holdMs >= 0)) throw new Error('--burst-hold-ms: a number of milliseconds');
    } else if (name === '--help' || name === '-h') {
      console.log(USAGE);
      process.exit(0);
    } else throw new Error(`unknown option ${arg}\n${USAGE}`);
  }
  const base = quickMode ? quick() : full();
  if (holdMs !== undefined) base.burst.holdMs = holdMs;
  const complete = !quickMode && only === null && tiers.length === TIERS.length && holdMs === undefined;
  return { ...base, tiers, only, out: out ?? (complete ? 'latest' : quickMode ? 'quick' : 'partial') };
}

export function selected(config: BenchConfig, workload: WorkloadName): boolean {
  return config.only === null || config.only.includes(workload);
}
