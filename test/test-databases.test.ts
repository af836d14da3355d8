import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
// @ts-expect-error a JavaScript sample of the README, without types
import globalSetup, { globalTeardown } from '../examples/readme/jest-global-setup.js';
import { testDatabases, type PostgresInterface } from '../examples/test-databases.js';
import type { Lease } from '../lib/index.js';
import { guardBrokers, realBroker } from './helpers/broker.js';
import { describeOnPostgres, tierUrl } from './helpers/tier.js';

guardBrokers();

/** The databases of the tier's server whose names start with `prefix`. */
async function databases(prefix: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: tierUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ datname: string }>('SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY datname', [prefix]);
    return rows.map((r) => r.datname);
  } finally {
    await client.end();
  }
}

/** Connects to the URL and says which database it is. */
async function connectTo(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<{ db: string }>('SELECT current_database() AS db')).rows[0]!.db;
  } finally {
    await client.end();
  }
}

const url = (lease: Lease) => lease.interface<PostgresInterface>('postgres').url;

describeOnPostgres('examples/test-databases.ts: a throwaway database per lease', () => {
  test('four leases at once get four distinct databases that accept connections; release drops each', async () => {
    const prefix = `t${process.pid}_`;
    const broker = await realBroker({ blueprints: [testDatabases({ name: 'test-db', config: { serverUrl: tierUrl!, prefix } })] });
    const leases = await Promise.all([1, 2, 3, 4].map((i) => broker.acquire({ type: 'test-database', owner: `worker-${i}`, timeout: { minutes: 1 } })));
    const names = leases.map((lease) => String(lease.attributes.database));
    expect(new Set(names).size).toBe(4);
    expect(await databases(prefix)).toEqual([...names].sort());
    expect(await Promise.all(leases.map((lease) => connectTo(url(lease))))).toEqual(names);
    // The server's password is in the interface, never in slipway's rows.
    expect(JSON.stringify(await broker.resources.list())).not.toContain(new URL(tierUrl!).password || '\0');

    // A connection a test left open does not keep its database from being dropped.
    const left = new pg.Client({ connectionString: url(leases[0]!) });
    await left.connect();
    left.on('error', () => undefined);
    await leases[0]!.release();
    expect(await databases(prefix)).toEqual(names.slice(1).sort());
    await Promise.all(leases.slice(1).map((lease) => lease.release()));
    expect(await databases(prefix)).toEqual([]);
    await left.end().catch(() => undefined);
    const dropped = await broker.logs({ lease: leases[1]!.id, type: 'test-databases.dropped' });
    expect(dropped.map((l) => l.message)).toEqual([`Database ${names[1]} dropped.`]);
    await broker.close();
  });

  test('the README jest global setup hands each worker its own database, and the teardown drops them', async () => {
    const before = await databases('test_');
    const saved = process.env.TEST_DATABASE_SERVER;
    process.env.TEST_DATABASE_SERVER = tierUrl;
    try {
      await globalSetup({ maxWorkers: 3 });
      const urls = [1, 2, 3].map((worker) => process.env[`TEST_DATABASE_URL_${worker}`]!);
      const names = await Promise.all(urls.map(connectTo));
      expect(new Set(names).size).toBe(3);
      expect((await databases('test_')).filter((d) => !before.includes(d)).sort()).toEqual([...names].sort());
      await globalTeardown();
      expect(await databases('test_')).toEqual(before);
    } finally {
      process.env.TEST_DATABASE_SERVER = saved;
      for (const worker of [1, 2, 3]) delete process.env[`TEST_DATABASE_URL_${worker}`];
    }
  });

  test('the example runs as a program: three databases, each used, then dropped', async () => {
    const before = await databases('test_');
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'examples/test-databases.ts'], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      env: { ...process.env, TEST_DATABASE_SERVER: tierUrl },
    });
    for (const worker of [1, 2, 3]) expect(stdout).toMatch(new RegExp(`worker-${worker} has database test_lease_\\w+`));
    expect(stdout).toContain('released: the three databases are dropped');
    expect(await databases('test_')).toEqual(before);
  }, 120_000);
});
