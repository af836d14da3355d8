import { execFile } from 'node:child_process';
import { cpus } from 'node:os';
import { promisify } from 'node:util';
import pg from 'pg';
import { progress } from '../support/measure.js';
import { pgBin } from '../support/tiers.js';

const run = promisify(execFile);

/**
 * The cost floor of one durable commit: `pgbench -N` (simple-update: UPDATE one
 * account, SELECT it, INSERT a history row, COMMIT) on the same cluster as the broker,
 * in a database of its own.
 */
export interface PgbenchPoint {
  clients: number;
  threads: number;
  seconds: number;
  tps: number;
  latencyMs: number | null;
  command: string;
}

export interface Pgbench {
  scale: number;
  initSeconds: number;
  run(clients: number, seconds: number): Promise<PgbenchPoint>;
}

export async function preparePgbench(url: string, scale: number): Promise<Pgbench> {
  const u = new URL(url);
  const database = 'pgbench_reference';
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP DATABASE IF EXISTS ${database}`);
  await client.query(`CREATE DATABASE ${database}`);
  await client.end();
  const conn = ['-h', u.hostname, '-p', u.port, '-U', decodeURIComponent(u.username) || 'postgres'];
  const started = performance.now();
  await run(pgBin('pgbench'), ['-i', '-q', '-s', String(scale), ...conn, database]);
  const initSeconds = (performance.now() - started) / 1000;
  progress(`pgbench -i -s ${scale}: ${initSeconds.toFixed(1)} s`);
  return {
    scale,
    initSeconds: Math.round(initSeconds * 10) / 10,
    async run(clients, seconds) {
      const threads = Math.min(clients, cpus().length);
      const args = ['-N', '-c', String(clients), '-j', String(threads), '-T', String(Math.max(1, Math.round(seconds))), ...conn, database];
      const { stdout } = await run(pgBin('pgbench'), args, { maxBuffer: 16 * 1024 * 1024 });
      const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout) ?? /tps = ([\d.]+)/.exec(stdout);
      if (!tps) throw new Error(`pgbench printed no tps:\n${stdout}`);
      const latency = /latency average = ([\d.]+) ms/.exec(stdout);
      return {
        clients,
        threads,
        seconds: Math.max(1, Math.round(seconds)),
        tps: Math.round(Number(tps[1]) * 10) / 10,
        latencyMs: latency ? Number(latency[1]) : null,
        command: `pgbench ${args.slice(0, 8).join(' ')} ${database}`,
      };
    },
  };
}
