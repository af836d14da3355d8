import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createBroker } from '../lib/index.js';
import type { MpPolicies, PolicyWorkerMessage } from './fixtures/mp-policies-worker.js';
import { guardBrokers, track } from './helpers/broker.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

/*
 * Pool policies across OS processes on one real Postgres (issue 15): PROCESSES brokers, each
 * with the same blueprint (exclusive, maxResources 8, minIdle 3, idle expiry 1 s) and the same quota (at most 3
 * leases of owners tenant-a/* hold a resource), acquire PER_PROCESS leases each, FLOWS at a
 * time, half of them for tenant-a. A sampler on its own connection reads, in one statement per
 * sample (one snapshot), the tenant-a leases that hold a resource and the resources not
 * destroyed: the quota and maxResources must hold in every sample. At the end every lease is
 * destroyed, no acquire failed, no worker pass threw, and once the idle resources beyond the
 * warm pool have expired it stands at minIdle: exactly 3 idle resources (not 3 per process).
 */

const PROCESSES = 4;
const PER_PROCESS = 30;
const FLOWS = 4;
const MP_POLICIES: MpPolicies = { maxResources: 8, minIdle: 3, quota: { owner: 'tenant-a/*', maxLeases: 3 } };
const fixture = fileURLToPath(new URL('./fixtures/mp-policies-worker.ts', import.meta.url));

describeOnPostgres('pool policies across 4 processes', () => {
  test('a quota and a warm pool hold across processes: never more than 3 tenant-a leases, never more than 8 resources, 3 idle at the end', async () => {
    const url = tierUrl!;
    const schema = freshSchema();
    // Migrates the schema once, before the processes race to.
    const supervisor = track(await createBroker({ database: { url, schema, poolSize: 2 }, workers: false }));
    const client = new pg.Client({ connectionString: url, application_name: 'mpp-sampler' });
    await client.connect();
    const procs: ChildProcess[] = [];
    const messages: PolicyWorkerMessage[][] = [];
    const stderr: string[] = [];
    let samples = 0;
    let worstQuota = 0;
    let worstResources = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await client.query(`
          SELECT (SELECT count(*)::int FROM "${schema}".leases WHERE owner LIKE 'tenant-a/%' AND status IN ('acquired', 'active', 'released', 'broken')) AS quota,
                 (SELECT count(*)::int FROM "${schema}".resources WHERE status <> 'destroyed') AS resources`);
        samples++;
        worstQuota = Math.max(worstQuota, rows[0].quota);
        worstResources = Math.max(worstResources, rows[0].resources);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    try {
      const done = Array.from({ length: PROCESSES }, (_, k) => {
        const proc = fork(fixture, [url, schema, String(k), String(PER_PROCESS), String(FLOWS), JSON.stringify(MP_POLICIES)], { execPath: process.execPath, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
        procs.push(proc);
        messages[k] = [];
        stderr[k] = '';
        proc.stderr!.on('data', (c) => (stderr[k] = (stderr[k] + c).slice(-10_000)));
        return new Promise<Extract<PolicyWorkerMessage, { t: 'done' }>>((resolve, reject) => {
          proc.on('message', (m: PolicyWorkerMessage) => {
            messages[k]!.push(m);
            if (m.t === 'done') resolve(m);
          });
          proc.once('exit', (code) => reject(new Error(`process ${k} exited with ${code} before it was done:\n${stderr[k]}`)));
        });
      });
      const reports = await Promise.all(done);
      expect(reports.flatMap((r) => r.engineErrors)).toEqual([]);
      expect(messages.flat().filter((m) => m.t === 'error')).toEqual([]);
      const active = messages.flat().filter((m) => m.t === 'active');
      expect(active).toHaveLength(PROCESSES * PER_PROCESS);

      // Quiescence: every lease destroyed, and the warm pool topped up to minIdle by the four brokers together.
      const deadline = Date.now() + 60_000;
      const settled = async () => {
        const stats = await supervisor.stats();
        const leases = Object.values(stats.types).reduce((n, t) => n + t.live + t.deletionLane, 0);
        return leases === 0 && stats.blueprints.pool?.idle === MP_POLICIES.minIdle && stats.blueprints.pool.allocating === 0;
      };
      while (!(await settled()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      const pool = (await supervisor.stats()).blueprints.pool!;
      expect({ idle: pool.idle, live: pool.live, allocating: pool.allocating }).toEqual({ idle: MP_POLICIES.minIdle, live: MP_POLICIES.minIdle, allocating: 0 });
    } finally {
      sampling = false;
      await sampler;
      await client.end();
      for (const proc of procs) if (proc.exitCode === null) proc.send({ t: 'close' });
      await Promise.all(procs.map((p) => (p.exitCode === null ? new Promise((r) => p.once('exit', r)) : null)));
      await supervisor.close();
    }
    expect(samples).toBeGreaterThan(20);
    expect(worstQuota).toBeGreaterThan(0);
    expect(worstQuota).toBeLessThanOrEqual(MP_POLICIES.quota.maxLeases);
    expect(worstResources).toBeLessThanOrEqual(MP_POLICIES.maxResources);
  }, 240_000);
});
