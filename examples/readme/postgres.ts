import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';

const myHosts = localHosts({ name: 'ci-hosts', config: { slots: 4 } });

await using broker = await createBroker({
  database: { url: process.env.SLIPWAY_DATABASE_URL!, schema: 'slipway' },
  blueprints: [myHosts],             // every process registers the blueprints it may run
  workers: { concurrency: 4 },
});
console.log(await broker.stats());
