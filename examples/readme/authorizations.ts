import { setTimeout as sleep } from 'node:timers/promises';
import { createBroker, LeaseBrokenError } from 'slipway';
import { localHosts } from 'slipway/blueprints';

// A pool only the builds an operator authorized may use.
const ci = localHosts({ name: 'ci-hosts', config: { slots: 2 }, requireAuthorization: true });
await using broker = await createBroker({ blueprints: [ci] });

await broker.authorizations.authorize('ci-hosts', 'build/*', { author: 'ops' }); // every owner that starts with build/
await broker.authorizations.decline('ci-hosts', 'forks/*', { author: 'ops' });

{
  await using lease = await broker.acquire({ type: 'host', owner: 'build/42', ttl: { minutes: 10 } });
  console.log(`build/42 runs on ${lease.resource.blueprint}`);
}

try {
  await broker.acquire({ type: 'host', owner: 'forks/7', ttl: { minutes: 10 } });
} catch (error) {
  if (!(error instanceof LeaseBrokenError)) throw error;
  console.log(error.message); // ... owner forks/7 is declined on blueprint ci-hosts
}

// An owner nobody decided on waits; the allocator records a request an operator sees
// (`slipway authorizations --state requested`) and decides on.
const nightly = await broker.requestLease({ type: 'host', owner: 'nightly/1', ttl: { minutes: 10 } });
while ((await broker.authorizations.list({ owner: 'nightly/1', state: 'requested' })).length === 0) await sleep(20);
await broker.authorizations.authorize('ci-hosts', 'nightly/1', { author: 'ops' }); // wakes the lease at once
await using lease = await nightly.whenActive();
const [wait] = await broker.logs({ lease: lease.id, type: 'lease.waiting-for-authorization' });
console.log(`${wait.message} Then: nightly/1 runs on ${lease.resource.blueprint}`);
