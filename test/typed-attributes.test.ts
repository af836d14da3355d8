/**
 * `spec.blueprints` given as blueprint objects: what types the lease (the types themselves
 * are proven by `tsc` on examples/readme/typed-attributes.ts, in `npm run typecheck` and
 * against the packed package in package.test.ts). Here, what the runtime does with them.
 */
import { ValidationError } from '../lib/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, testBroker } from './helpers/broker.js';

guardBrokers();

describe('spec.blueprints as blueprint objects', () => {
  test('an object stands for its name: the lease comes from it, and names and objects mix', async () => {
    const a = fakeBlueprint({ name: 'a', type: 'host', resourceAttributes: { zone: 'a' } });
    const b = fakeBlueprint({ name: 'b', type: 'host', resourceAttributes: { zone: 'b' } });
    await using broker = await testBroker({ blueprints: [a, b] });
    const onB = await broker.acquire({ type: 'host', blueprints: [b] });
    expect(onB.resource).toMatchObject({ blueprint: 'b', attributes: { zone: 'b' } });
    const handle = await broker.requestLease({ type: 'host', blueprints: [a] });
    await broker.runUntilIdle();
    expect((await handle.whenActive()).resource.blueprint).toBe('a');
    const either = await broker.acquire({ type: 'host', blueprints: ['a', b] });
    expect(['a', 'b']).toContain(either.resource.blueprint);
    await Promise.all([onB.release(), handle.release(), either.release()].map((p) => p.catch(() => undefined)));
  });

  test('an object that is not the one the broker has under its name is refused, naming spec.blueprints', async () => {
    const registered = fakeBlueprint({ name: 'hosts', type: 'host' });
    const lookalike = fakeBlueprint({ name: 'hosts', type: 'host' });
    await using broker = await testBroker({ blueprints: [registered] });
    const error = await broker.acquire({ type: 'host', blueprints: [lookalike] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).message).toMatch(/spec\.blueprints.*"hosts" given is not the one this broker was created with/);
    await expect(broker.acquire({ type: 'host', blueprints: [registered, lookalike] })).rejects.toThrow(/spec\.blueprints\[1\].*two different blueprints are named "hosts"/);
    expect(await broker.leases.list()).toEqual([]);
  });

  test('an object of another type, or unknown to the broker, is refused like its name', async () => {
    const hosts = fakeBlueprint({ name: 'hosts', type: 'host' });
    const copies = fakeBlueprint({ name: 'copies', type: 'working-copy' });
    await using broker = await testBroker({ blueprints: [hosts, copies] });
    await expect(broker.acquire({ type: 'host', blueprints: [copies] })).rejects.toThrow(/blueprint "copies" serves type "working-copy", not "host"/);
    await expect(broker.acquire({ type: 'host', blueprints: [fakeBlueprint({ name: 'elsewhere', type: 'host' })] })).rejects.toThrow(/unknown blueprint "elsewhere"/);
    await expect(broker.acquire({ type: 'host', blueprints: [{ name: 'x' } as never] })).rejects.toThrow(/spec\.blueprints\[0\].*must be a blueprint name .*or a blueprint/);
  });
});
