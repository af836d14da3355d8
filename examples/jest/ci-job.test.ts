import { createTestBroker, fakeBlueprint } from 'slipway/testing';
import { runJob } from './ci-job.js';

test('a job runs its commands on a leased host, which is torn down after', async () => {
  const hosts = fakeBlueprint({
    name: 'hosts',
    type: 'host',
    // Nothing runs: each command is recorded, and answered from its argv.
    command: { respond: ({ argv }) => (argv[0] === 'npm' ? { exitCode: 1, stderr: '1 failing test' } : { exitCode: 0 }) },
  });
  await using broker = await createTestBroker({ blueprints: [hosts] }); // in memory, manual clock, ids lease_0001, ...

  expect(await runJob(broker, { id: 'job-7', repository: 'https://git.example/app.git', commit: 'c0ffee' })).toBe('failed');

  expect(hosts.commands.map(({ lease, cwd, argv }) => `${lease} ${cwd ?? '.'}: ${argv.join(' ')}`)).toEqual([
    'lease_0001 .: git clone --quiet https://git.example/app.git src',
    'lease_0001 src: git checkout --quiet c0ffee',
    'lease_0001 src: npm test',
  ]);
  const logs = await broker.logs({ lease: 'lease_0001' });
  expect(logs.filter((entry) => entry.type !== 'status.changed').map((entry) => `${entry.type} ${entry.resource ?? ''}`.trim())).toMatchInlineSnapshot(`
    [
      "lease.queued",
      "resource.allocating res_0001",
      "lease.waiting-for-resources",
      "lease.acquired res_0001",
      "lease.activated res_0001",
      "lease.released",
      "lease.destroyed res_0001",
    ]
  `);
});

test('a lease past its ttl is torn down when the clock passes it: no sleeping', async () => {
  const hosts = fakeBlueprint({ name: 'hosts', type: 'host' });
  await using broker = await createTestBroker({ blueprints: [hosts] });
  const handle = await broker.requestLease({ type: 'host', ttl: { minutes: 5 } });
  await broker.runUntilIdle();
  expect(await handle.status()).toBe('active');

  await broker.advance({ minutes: 6 });
  expect(await handle.status()).toBe('destroyed');
  expect(hosts.calls.destroyLease).toBe(1);
});
