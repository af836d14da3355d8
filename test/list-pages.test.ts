/**
 * `leases.list` and `resources.list` by page (`limit`, `offset`) and the child leases of a
 * resource (`parentResource`): the pages of a list are the whole list cut in order, with
 * the filters applied before the cut.
 */
import { ValidationError } from '../lib/errors/validation-error.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker } from './helpers/broker.js';

guardBrokers();

test('pages of leases and resources are the full list cut in order, filters first', async () => {
  const broker = await testBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host', exclusive: true })] });
  const leases = [];
  for (let i = 0; i < 7; i++) leases.push(await broker.requestLease({ type: 'host', owner: i % 2 ? 'odd' : 'even' }));
  await broker.runUntilIdle();
  const all = (await broker.leases.list()).map((l) => l.id);
  expect(all).toEqual(leases.map((l) => l.id));
  const pages = [];
  for (let offset = 0; offset < 9; offset += 3) pages.push((await broker.leases.list({ limit: 3, offset })).map((l) => l.id));
  expect(pages).toEqual([all.slice(0, 3), all.slice(3, 6), all.slice(6)]);
  expect(await broker.leases.list({ limit: 3, offset: 7 })).toEqual([]);
  const even = (await broker.leases.list({ owner: 'even' })).map((l) => l.id);
  expect(even).toHaveLength(4);
  expect((await broker.leases.list({ owner: 'even', limit: 2, offset: 2 })).map((l) => l.id)).toEqual(even.slice(2));

  const resources = (await broker.resources.list()).map((r) => r.id);
  expect(resources).toHaveLength(7);
  expect((await broker.resources.list({ blueprint: 'pool', limit: 5 })).map((r) => r.id)).toEqual(resources.slice(0, 5));
  expect((await broker.resources.list({ offset: 5 })).map((r) => r.id)).toEqual(resources.slice(5));
  await broker.close();
});

test('parentResource lists the child leases a resource took', async () => {
  const broker = await testBroker({
    blueprints: [fakeBlueprint({ name: 'wc', type: 'working-copy', child: { type: 'host' } }), fakeBlueprint({ name: 'hosts', type: 'host' })],
  });
  const lease = await broker.acquire({ type: 'working-copy' });
  const children = await broker.leases.list({ parentResource: lease.resource.id });
  expect(children.map((c) => [c.type, c.parentResourceId])).toEqual([['host', lease.resource.id]]);
  expect(await broker.leases.list({ parentResource: children[0]!.resourceId! })).toEqual([]);
  await broker.close();
});

test('a bad page is refused before anything is read, naming the field', async () => {
  const broker = await testBroker();
  await expect(broker.leases.list({ limit: 0 })).rejects.toThrow(ValidationError);
  await expect(broker.leases.list({ limit: 0 })).rejects.toMatchObject({ field: 'limit' });
  await expect(broker.resources.list({ offset: -1 })).rejects.toMatchObject({ field: 'offset' });
  await expect(broker.resources.list({ limit: 1.5 } as never)).rejects.toMatchObject({ field: 'limit' });
  await broker.close();
});
