import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';

// Ephemeral runners: each serves one job, then is torn down.
const runners = localHosts({ name: 'runners', config: { slots: 4 }, limits: { destroyOnRelease: true } });
// Long-lived hosts, recycled after 50 leases or 12 hours of service, whichever comes first.
const hosts = localHosts({ name: 'hosts', config: { slots: 2 }, limits: { maxLeasesPerResourceLifetime: 50, maxResourceAge: { hours: 12 } } });
await using broker = await createBroker({ blueprints: [runners, hosts] });

const first = await broker.acquire({ type: 'host', blueprints: ['runners'], ttl: { minutes: 10 } });
await first.release();
const second = await broker.acquire({ type: 'host', blueprints: ['runners'], ttl: { minutes: 10 } });
console.log(`a fresh runner for each job: ${first.resource.id !== second.resource.id}`);
await second.release();

// Maintenance: hosts serves no new lease (on every broker of the database) until resumed.
await using build = await broker.acquire({ type: 'host', blueprints: ['hosts'], ttl: { minutes: 10 } });
const { idleResources } = await broker.drainBlueprint('hosts', { author: 'ops' });
console.log(`draining: ${(await broker.stats()).blueprints.hosts.draining}; ${idleResources.length} idle resources released, the leased one stays until its lease ends`);
await broker.resumeBlueprint('hosts', { author: 'ops' });
