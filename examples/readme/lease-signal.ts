import { createBroker, LeaseNotActiveError } from 'slipway';
import { localHosts } from 'slipway/blueprints';

await using broker = await createBroker({ blueprints: [localHosts({ name: 'local', config: { slots: 1 } })] });
const lease = await broker.acquire({ type: 'host', owner: 'nightly', ttl: { seconds: 10 } });
lease.signal.addEventListener('abort', () => console.log(`signal: ${lease.signal.reason.message}`));

try {
  // Runs past the ttl: when the lease expires, its process group is stopped.
  await lease.interface('command').run(['sleep', '30']);
} catch (error) {
  if (!(error instanceof LeaseNotActiveError)) throw error;
  console.log(`the command was stopped: the lease ${error.why}`);
}
