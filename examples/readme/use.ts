import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';

await using broker = await createBroker({
  blueprints: [localHosts({ name: 'local', config: { slots: 2 } })],
});

{
  await using lease = await broker.acquire({ type: 'host', owner: 'build-42', ttl: { minutes: 30 } });
  const result = await lease.interface('command').run(['git', '--version']);
  console.log(result.exitCode, result.stdout);
} // leaving the block releases the lease and waits until it is destroyed

// leaving the module closes the broker: `await using` disposes in reverse order, lease first
