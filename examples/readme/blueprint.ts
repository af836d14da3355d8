import { createBroker, defineBlueprint, RetryLater } from 'slipway';
import { cloud } from './cloud.js'; // your provider's SDK (here a stand-in, so that this file runs)

export const vms = defineBlueprint<{ image: string }, { address: string }, { slot: number }>({
  type: 'host',
  validateConfig(config) { /* throw to reject */ return config as { image: string }; },
  async allocateResource(ctx) {            // idempotent per ctx.resource.id (ctx.resume after a crash)
    const vm = await cloud.createOrFind(ctx.resource.id, ctx.blueprint.config.image);
    return { attributes: { address: vm.address } };
  },
  async activateResource(ctx) {            // not up yet: called again in a second
    if (!(await cloud.sshAnswers(ctx.resource.attributes.address))) throw new RetryLater('ssh does not answer yet', { seconds: 1 });
  },
  canAcquireLease: (ctx) => ctx.resource.leaseCount < 4,
  async acquireLease(ctx) {                // one of the VM's 4 slots: whichever is free
    const slots = [0, 1, 2, 3].map((i) => `vm:${ctx.resource.id}:slot:${i}`);
    return { attributes: { slot: slots.indexOf(await ctx.lockOneOf(slots)) } };
  },
  async destroyResource(ctx) { await cloud.deleteIfExists(ctx.resource.id); }, // already gone is success
});

const pool = vms({
  name: 'ci-vms',
  config: { image: 'debian-12' },
  limits: { maxResources: 8 },
  timeouts: { activateResource: { minutes: 10 }, default: 'PT5M' },
});

await using broker = await createBroker({ blueprints: [pool] });
await using lease = await broker.acquire({ type: 'host', owner: 'build-43', timeout: { minutes: 1 } });
console.log(`leased ${lease.resource.id} at ${lease.resource.attributes.address}`);
