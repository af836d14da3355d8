import { Logger, run, type Runner } from 'graphile-worker';
import pg from 'pg';
import { percentile, progress, round } from '../support/measure.js';
import { StatementCounter } from '../support/statement-counter.js';
import { packageVersion } from '../support/tiers.js';

/**
 * The job queue a lease cycle is compared with: graphile-worker's `run()` with
 * `concurrency: 8` on the bench cluster, in a database of its own, its defaults otherwise
 * (LISTEN/NOTIFY, the default poll interval, each job completed by its own statement).
 * A job is added, run by a task that does nothing, and completed; 8 adders each add a
 * job and wait for its `job:complete` event before adding the next, as 8 acquirers each
 * wait for a whole cycle.
 */
export interface GraphileWorkerResult {
  version: string;
  concurrency: number;
  adders: number;
  poolSize: number;
  seconds: number;
  jobs: number;
  jobsPerSec: number;
  /** From `addJob()` called to the job's `job:complete` event. */
  jobP50Ms: number;
  jobP99Ms: number;
  /** Statements per job counted at the driver (as the broker's), over `countedJobs` jobs run after the window. */
  statementsPerJob: number;
  /**
   * Write transactions per job: transaction ids the cluster assigned while the counted
   * jobs ran (`pg_snapshot_xmax` before and after; an autovacuum ANALYZE in between would
   * add one). A statement outside a transaction that writes nothing (a `get_job` that
   * finds no job) is not one.
   */
  commitsPerJob: number;
  countedJobs: number;
  top: Array<{ statement: string; callsPerJob: number }>;
}

export interface GraphileWorkerOptions {
  seconds: number;
  warmupSeconds: number;
  /** Jobs each adder runs while the statements are counted. */
  countedJobsPerAdder: number;
}

const DATABASE = 'graphile_reference';
/** The figure: graphile-worker at concurrency 8 against 8 acquirers. */
export const GRAPHILE_CONCURRENCY = 8;
const ADDERS = GRAPHILE_CONCURRENCY;
/** node-postgres' default, as graphile-worker's own pool would be, and the broker's default pool size. */
const POOL_SIZE = 10;

/** graphile-worker prints its info lines to stdout by default; the bench keeps stdout for the targets. */
const logger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') progress(`graphile-worker ${level}: ${message}`);
});

export async function graphileWorkerRate(url: string, options: GraphileWorkerOptions): Promise<GraphileWorkerResult> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${DATABASE}`);
    await admin.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await admin.end();
  }
  const u = new URL(url);
  u.pathname = `/${DATABASE}`;
  const pool = new pg.Pool({ connectionString: u.toString(), max: POOL_SIZE });
  let runner: Runner | undefined;
  try {
    runner = await run({
      pgPool: pool,
      concurrency: GRAPHILE_CONCURRENCY,
      noHandleSignals: true,
      logger,
      taskList: { noop: async () => undefined },
    });
    const waiting = new Map<string, () => void>();
    // A job may complete before its adder's `addJob()` has returned.
    const early = new Set<string>();
    let failed: string | null = null;
    runner.events.on('job:complete', ({ job, error }) => {
      if (error) failed ??= String((error as Error)?.message ?? error);
      const done = waiting.get(job.id);
      if (done) {
        waiting.delete(job.id);
        done();
      } else early.add(job.id);
    });
    const addAndWait = async () => {
      const job = await runner!.addJob('noop', {});
      if (early.delete(job.id)) return;
      await new Promise<void>((resolve) => waiting.set(job.id, resolve));
    };

    const windowStart = performance.now() + options.warmupSeconds * 1000;
    const windowEnd = windowStart + options.seconds * 1000;
    const durations: number[] = [];
    await Promise.all(
      Array.from({ length: ADDERS }, async () => {
        while (performance.now() < windowEnd) {
          const t0 = performance.now();
          await addAndWait();
          const t1 = performance.now();
          if (t1 >= windowStart && t1 <= windowEnd) durations.push(t1 - t0);
        }
      }),
    );
    if (failed) throw new Error(`graphile-worker: a job failed: ${failed}`);

    // Counted apart from the window, so that the counter's own cost is not in jobs/s.
    const nextXid = async () => Number((await pool.query('SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xid')).rows[0].xid);
    const counter = new StatementCounter();
    const countedJobs = ADDERS * options.countedJobsPerAdder;
    const xidBefore = await nextXid();
    counter.start();
    try {
      await Promise.all(
        Array.from({ length: ADDERS }, async () => {
          for (let i = 0; i < options.countedJobsPerAdder; i++) await addAndWait();
        }),
      );
    } finally {
      counter.stop();
    }
    const xidAfter = await nextXid();
    const counted = counter.snapshot(countedJobs, 8);
    const result: GraphileWorkerResult = {
      version: packageVersion('graphile-worker'),
      concurrency: GRAPHILE_CONCURRENCY,
      adders: ADDERS,
      poolSize: POOL_SIZE,
      seconds: options.seconds,
      jobs: durations.length,
      jobsPerSec: round(durations.length / options.seconds, 1),
      jobP50Ms: round(percentile(durations, 50)),
      jobP99Ms: round(percentile(durations, 99)),
      statementsPerJob: counted.perCycle.statements,
      commitsPerJob: round((xidAfter - xidBefore) / countedJobs, 2),
      countedJobs,
      top: counted.top.map((s) => ({ statement: s.statement, callsPerJob: s.callsPerCycle })),
    };
    progress(`graphile-worker: ${result.jobsPerSec} jobs/s, ${result.statementsPerJob} statements and ${result.commitsPerJob} commits per job`);
    return result;
  } finally {
    await runner?.stop().catch((error) => progress(`graphile-worker: stopping the runner failed: ${error}`));
    await pool.end().catch((error) => progress(`graphile-worker: ending the pool failed: ${error}`));
  }
}
