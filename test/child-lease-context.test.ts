import { defineBlueprint, ValidationError } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker } from './helpers/broker.js';

guardBrokers();

// ctx.childLease(key): a resource's lease hooks and interface factories reach the child lease its allocateResource took.
describe('ctx.childLease(key)', () => {
  test('finds the active child by key in activateLease and in an interface factory; an unknown key is a ValidationError', async () => {
    const host = fakeBlueprint({ name: 'hosts', type: 'host' });
    const seen: { missing?: unknown } = {};
    const wc = defineBlueprint({
      type: 'working-copy',
      async allocateResource(ctx) {
        const child = await ctx.acquireLease({ type: 'host' }, { key: 'host' });
        return { attributes: { child: child.id } };
      },
      async activateLease(ctx) {
        const child = await ctx.childLease('host');
        seen.missing = await ctx.childLease('nope').catch((e: unknown) => e);
        return { attributes: { child: child.id } };
      },
      interfaces: { child: async (ctx) => (await ctx.childLease('host')).id },
    })({ name: 'wcs' });
    const broker = await testBroker({ blueprints: [host, wc] });
    const acquiring = broker.acquire({ type: 'working-copy' });
    await broker.runUntilIdle();
    const lease = await acquiring;
    const [child] = await broker.leases.list({ type: 'host' });
    expect(lease.attributes.child).toBe(child!.id);
    expect(lease.resource.attributes.child).toBe(child!.id);
    expect(await (lease.interface('child') as Promise<string>)).toBe(child!.id);
    expect(seen.missing).toBeInstanceOf(ValidationError);
    expect((seen.missing as ValidationError).field).toBe('key');
    await broker.close();
  });
});
