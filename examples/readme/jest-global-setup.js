// jest.config.js: globalSetup: './jest-global-setup.js', globalTeardown: './jest-global-teardown.js',
// where jest-global-teardown.js is: export { globalTeardown as default } from './jest-global-setup.js';
import { createBroker } from 'slipway';
import { testDatabases } from '../test-databases.js'; // examples/test-databases.ts, in your project

// One database per jest worker; a worker reads process.env[`TEST_DATABASE_URL_${process.env.JEST_WORKER_ID}`].
export default async function globalSetup(config) {
  const serverUrl = process.env.TEST_DATABASE_SERVER; // a login that may CREATE DATABASE
  const broker = await createBroker({ blueprints: [testDatabases({ name: 'test-db', config: { serverUrl } })] });
  const workers = Array.from({ length: config.maxWorkers }, (_, i) => i + 1);
  const leases = await Promise.all(workers.map((id) => broker.acquire({ type: 'test-database', owner: `jest-worker-${id}`, timeout: { minutes: 1 } })));
  for (const [i, lease] of leases.entries()) process.env[`TEST_DATABASE_URL_${i + 1}`] = lease.interface('postgres').url;
  globalThis.testDatabases = { broker, leases }; // what globalTeardown sees
}

// Drops the databases: each lease's destroy runs DROP DATABASE ... WITH (FORCE).
export async function globalTeardown() {
  const { broker, leases } = globalThis.testDatabases;
  await Promise.all(leases.map((lease) => lease.release()));
  await broker.close();
}
