import { createBroker, LeaseEndedError } from 'slipway';
import { localHosts } from 'slipway/blueprints';

await using broker = await createBroker({ blueprints: [localHosts({ name: 'local', config: { slots: 1 } })] });

// Renewed every third of its ttl while this process lives. Should the process die, the
// lease expires one ttl after the last renewal, not at some far expiry.
const lease = await broker.acquire({ type: 'host', owner: 'deploy-7', ttl: { seconds: 3 }, keepAlive: true });
await lease.interface('command').run(['sleep', '4']); // runs past the 3 s ttl
console.log(`after 4 s: ${(await broker.leases.get(lease.id))!.status}`);

// By hand: the lease now expires an hour from now ({ until: date } sets a time instead).
const until = await lease.extend({ hours: 1 });
console.log(`expires at ${until.toISO()}`);

await lease.release();
try {
  await lease.extend({ hours: 1 });
} catch (error) {
  if (!(error instanceof LeaseEndedError)) throw error;
  console.log(error.message); // lease lease_... is already destroyed: it cannot be extended
}
