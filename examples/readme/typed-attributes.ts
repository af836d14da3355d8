import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';

const local = localHosts({ name: 'local', config: { slots: 2 } });

await using broker = await createBroker({ blueprints: [local] });
// `blueprints: [local]` (the object, not its name): the lease can only come from it, so it carries its types.
await using lease = await broker.acquire({ type: 'host', blueprints: [local], attributes: { job: 'build-45' }, ttl: { minutes: 5 } });

const slot: number = lease.attributes.slot;               // LocalHostsLeaseAttributes: slot, path
const job: string = lease.attributes.job;                 // what was asked for
const host: string = lease.resource.attributes.hostname;  // LocalHostsResourceAttributes: hostname, root
// @ts-expect-error slot is a number: a wrong type is a compile error, not a runtime surprise
const wrong: string = lease.attributes.slot;
// @ts-expect-error and so is a misspelt name
console.log(lease.attributes.solt);

console.log(slot, job, host, typeof wrong);
