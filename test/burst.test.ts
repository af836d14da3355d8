import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker } from './helpers/broker.js';

guardBrokers();

// Invariant 5 (bounded mess) and LESSONS "Drydock burst": a resource gives no lease until it is active.
describe('the Drydock burst', () => {
  test('5 leases at once, maxResources 1, slow activation: all become active one after the other, 1 resource ever', async () => {
    const bp = fakeBlueprint({ name: 'wc', exclusive: true, limits: { maxResources: 1 }, delays: { activateResource: 50 } });
    const broker = await testBroker({ blueprints: [bp] });
    const activeAt: string[] = [];
    let resourceActive = false;
    let concurrentlyActive = 0;
    let maxConcurrent = 0;
    broker.on('resource', (e) => e.to === 'active' && (resourceActive = true));
    broker.on('lease', (e) => {
      if (e.to === 'active') {
        expect(resourceActive).toBe(true);
        activeAt.push(e.id);
        maxConcurrent = Math.max(maxConcurrent, ++concurrentlyActive);
      }
      if (e.from === 'active') concurrentlyActive--;
    });
    const flows = Array.from({ length: 5 }, (_, i) =>
      broker.acquire({ type: 'fake', attributes: { i } }).then((lease) => lease.release()),
    );
    const pump = setInterval(() => void broker.runUntilIdle().catch(() => undefined), 20);
    await Promise.all(flows);
    clearInterval(pump);
    expect(activeAt).toHaveLength(5);
    expect(maxConcurrent).toBe(1);
    expect(bp.calls.allocateResource).toBe(1);
    expect(await broker.resources.list()).toHaveLength(1);
    await broker.close();
  });
});
