import pg from 'pg';
import { internals } from '../../lib/broker/index.js';
import { createBroker, type Broker, type DatabaseOptions } from '../../lib/index.js';
import { fakeBlueprint } from '../../lib/testing/index.js';
import type { BenchConfig } from '../support/config.js';
import { profileCpu, type CpuSummary } from '../support/cpu-profile.js';
import { percentile, round, sleep } from '../support/measure.js';
import { StatementCounter, type CounterSnapshot } from '../support/statement-counter.js';
import type { Tier } from '../support/tiers.js';
import { SHAPES, shapeCounts, type ShapeCounts, type ShapeName } from './blueprint-shapes.js';
import { fullCycle, openBroker, prewarm } from './common.js';

export interface ProfileResult {
  /** Statements from `acquire()` called to the lease active, per cycle. */
  acquire: CounterSnapshot;
  /** Statements from `release()` called until the lease is destroyed and the resource has settled (tail of 30 ms included). */
  release: CounterSnapshot;
  /** CPU profile of this process during cycles with `cpuClients` acquirers. */
  cpu: CpuSummary;
  cpuCyclesPerSec: number;
  /** Diagnostic, not a target: cycles/s with 8 acquirers when the broker has 16 workers and 20 connections instead of 4 and 10. */
  moreWorkers: { clients: number; concurrency: number; poolSize: number | null; cyclesPerSec: number };
  /**
   * The floor of one statement: `SELECT * FROM leases WHERE id = $1` 300 times in a row,
   * p50 ms, through the broker's own database handle (TypeORM, a pooled runner per
   * statement; on embedded the PGlite driver) and, on Postgres, through one bare pg.Client.
   */
  statementFloor: { viaBrokerMs: number; viaBarePgClientMs: number | null };
  /**
   * Whether timers fire while a host loops leases: a 10 ms setInterval counts its ticks
   * during back-to-back `acquire()` + `release()` cycles with no yield in between.
   */
  timerTicks: { cycles: number; wallMs: number; ticks: number; expected: number };
  /** Statements and commits per cycle of the two blueprints of the targets (see blueprint-shapes.ts), per half and in all. */
  shapes: Record<ShapeName, ShapeCounts>;
}

/** Where a cycle's time goes: statements and transactions per cycle, and CPU by library. */
export async function profile(tier: Tier, config: BenchConfig): Promise<ProfileResult> {
  const blueprint = fakeBlueprint({ name: 'profile', exclusive: true });
  const { broker, database } = await openBroker(tier, 'profile', blueprint);
  let result: Omit<ProfileResult, 'moreWorkers' | 'shapes'>;
  try {
    await prewarm(broker, config.profile.cpuClients);
    for (let i = 0; i < 5; i++) await fullCycle(broker);
    const acquire = new StatementCounter();
    const release = new StatementCounter();
    const n = config.profile.cycles;
    for (let i = 0; i < n; i++) {
      await sleep(20);
      acquire.start();
      const lease = await broker.acquire({ type: 'fake' });
      acquire.stop();
      release.start();
      await lease.release();
      await sleep(30);
      release.stop();
    }
    let cycles = 0;
    const cpu = await profileCpu(config.profile.cpuSeconds, async (stopAt) => {
      await Promise.all(
        Array.from({ length: config.profile.cpuClients }, async () => {
          while (performance.now() < stopAt) {
            await fullCycle(broker);
            cycles++;
          }
        }),
      );
    });
    result = {
      acquire: acquire.snapshot(n, 15),
      release: release.snapshot(n, 15),
      cpu,
      cpuCyclesPerSec: round(cycles / cpu.seconds, 1),
      statementFloor: await statementFloor(broker, database),
      timerTicks: await timerTicks(broker, config.profile.timerCycles),
    };
  } finally {
    await broker.close();
  }
  const shapes = {} as ProfileResult['shapes'];
  for (const shape of SHAPES) shapes[shape] = await shapeCounts(tier, shape, config.profile.cycles);
  return { ...result, moreWorkers: await moreWorkers(tier, config), shapes };
}

async function timerTicks(broker: Broker, cycles: number): Promise<ProfileResult['timerTicks']> {
  let ticks = 0;
  const interval = setInterval(() => ticks++, 10);
  const t0 = performance.now();
  try {
    for (let i = 0; i < cycles; i++) {
      const lease = await broker.acquire({ type: 'fake' });
      await lease.release();
    }
  } finally {
    clearInterval(interval);
  }
  const wallMs = performance.now() - t0;
  return { cycles, wallMs: round(wallMs, 0), ticks, expected: Math.floor(wallMs / 10) };
}

async function statementFloor(broker: Broker, database: DatabaseOptions): Promise<ProfileResult['statementFloor']> {
  const { db } = internals.get(broker)!;
  const schema = `"${database.schema ?? 'slipway'}"`;
  const [row] = await db.query<{ id: string }>(`SELECT id FROM ${schema}.leases LIMIT 1`);
  const text = `SELECT * FROM ${schema}.leases WHERE id = $1`;
  const time = async (run: () => Promise<unknown>) => {
    const samples: number[] = [];
    for (let i = 0; i < 300; i++) {
      const t0 = performance.now();
      await run();
      samples.push(performance.now() - t0);
    }
    return round(percentile(samples, 50), 3);
  };
  const viaBrokerMs = await time(() => db.query(text, [row.id]));
  let viaBarePgClientMs: number | null = null;
  if ('url' in database) {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      viaBarePgClientMs = await time(() => client.query(text, [row.id]));
    } finally {
      await client.end();
    }
  }
  return { viaBrokerMs, viaBarePgClientMs };
}

async function moreWorkers(tier: Tier, config: BenchConfig): Promise<ProfileResult['moreWorkers']> {
  const clients = 8;
  const concurrency = 16;
  const base = tier.database('profile_workers');
  const database = 'url' in base ? { ...base, poolSize: 20 } : base;
  const broker = await createBroker({ database, workers: { concurrency }, blueprints: [fakeBlueprint({ name: 'workers16', exclusive: true })] });
  try {
    await prewarm(broker, clients);
    const seconds = config.profile.moreWorkersSeconds;
    const stopAt = performance.now() + seconds * 1000;
    let cycles = 0;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (performance.now() < stopAt) {
          await fullCycle(broker);
          cycles++;
        }
      }),
    );
    return { clients, concurrency, poolSize: 'url' in base ? 20 : null, cyclesPerSec: round(cycles / seconds, 1) };
  } finally {
    await broker.close();
  }
}
