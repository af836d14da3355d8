import { createBroker, LEASE_STATUSES, type Broker } from '../lib/index.js';
import { fakeBlueprint, type TestBroker } from '../lib/testing/index.js';
import { ValidationError } from '../lib/errors/index.js';
import { engineErrors, guardBrokers, realBroker, testBroker, track } from './helpers/broker.js';
import { describeOnPostgres, freshSchema, tierUrl } from './helpers/tier.js';

guardBrokers();

/** Two pools of one type, both serving only authorized owners; shared resources (no exclusivity) so that a free one is always there to take. */
function twoPools() {
  const red = fakeBlueprint({ name: 'red', type: 'host', requireAuthorization: true, limits: { maxResources: 1 } });
  const blue = fakeBlueprint({ name: 'blue', type: 'host', requireAuthorization: true, limits: { maxResources: 1 } });
  return { red, blue };
}

const states = async (broker: Broker, query: Parameters<Broker['authorizations']['list']>[0] = {}) =>
  (await broker.authorizations.list(query)).map((a) => `${a.blueprint} ${a.owner} ${a.state}`);

const waitRows = (broker: Broker, lease: string) => broker.logs({ lease, type: 'lease.waiting-for-authorization' });

// Issue 13, authorizations: the allocator considers, for a lease, only the blueprints that
// authorized its owner; the decision is per (blueprint, owner pattern), the most specific wins.
describe('authorizations across two blueprints', () => {
  test('a lease waits, with its requests recorded and one log row, until one blueprint authorizes its owner; it then runs there at once', async () => {
    const { red, blue } = twoPools();
    const broker = await testBroker({ blueprints: [red, blue], waitRecheck: { seconds: 30 } });
    const handle = await broker.requestLease({ type: 'host', owner: 'build/42' });
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('pending');
    expect(red.calls.allocateResource + blue.calls.allocateResource).toBe(0);
    // The allocator recorded a request on both, for the exact owner, as Drydock does.
    expect(await states(broker)).toEqual(['blue build/42 requested', 'red build/42 requested']);
    expect((await broker.logs({ type: 'authorization.requested' })).map((e) => e.message)).toEqual([
      `Authorization of owner build/42 on blueprint red requested for lease ${handle.id}.`,
      `Authorization of owner build/42 on blueprint blue requested for lease ${handle.id}.`,
    ]);

    // Looking again (the recheck) writes no new row: the one row counts.
    await broker.advance({ seconds: 31 });
    await broker.advance({ seconds: 31 });
    const [wait, ...more] = await waitRows(broker, handle.id);
    expect(more).toEqual([]);
    expect(wait.message).toBe('Waiting for authorization of owner build/42 on blueprints red, blue.');
    expect(wait.count).toBe(3);
    expect((await broker.stats()).types.host.waitingForAuthorization).toBe(1);
    expect((await broker.stats()).blueprints.red).toMatchObject({ requireAuthorization: true, requestedAuthorizations: 1 });

    // A prefix authorizes every build; the change wakes the lease, no clock needed.
    const row = await broker.authorizations.authorize('blue', 'build/*', { author: 'alice' });
    expect(row).toMatchObject({ blueprint: 'blue', owner: 'build/*', state: 'authorized', changedBy: 'alice' });
    await broker.runUntilIdle();
    expect(await handle.status()).toBe('active');
    const lease = await handle.whenActive();
    expect(lease.resource.blueprint).toBe('blue');
    expect(red.calls.allocateResource).toBe(0);
    expect((await broker.stats()).types.host.waitingForAuthorization).toBe(0);
    // list({ owner }) shows the rows that cover an owner, the deciding one first.
    expect(await states(broker, { owner: 'build/42' })).toEqual(['blue build/* authorized', 'blue build/42 requested', 'red build/42 requested']);
    expect((await broker.logs({ blueprint: 'blue', type: 'authorization.authorized' })).map((e) => e.message)).toEqual([
      'Owner build/* authorized on blueprint blue by alice.',
    ]);
    await lease.release();
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('an owner declined by every blueprint breaks with that reason; declined by one, it waits for the other', async () => {
    const { red, blue } = twoPools();
    const broker = await testBroker({ blueprints: [red, blue] });
    await broker.authorizations.decline('red', 'deploy/*');
    const waiting = await broker.requestLease({ type: 'host', owner: 'deploy/1' });
    await broker.runUntilIdle();
    expect(await statusOf(broker, waiting.id)).toEqual({ status: 'pending', brokenReason: null });
    const [wait] = await waitRows(broker, waiting.id);
    expect(wait.message).toBe('Waiting for authorization of owner deploy/1 on blueprint blue (declined on red).');
    // Only the undecided blueprint got a request: a declined prefix covers the owner on red.
    expect(await states(broker)).toEqual(['blue deploy/1 requested', 'red deploy/* declined']);

    await broker.authorizations.decline('blue', 'deploy/1');
    await broker.runUntilIdle();
    expect(await statusOf(broker, waiting.id)).toEqual({ status: 'destroyed', brokenReason: 'owner deploy/1 is declined on blueprints red, blue' });
    await expect(waiting.whenActive()).rejects.toThrow('owner deploy/1 is declined on blueprints red, blue');

    // A later lease of a declined owner breaks at once, with no request written.
    const acquiring = broker.acquire({ type: 'host', owner: 'deploy/2', blueprints: ['red'] });
    const refused = expect(acquiring).rejects.toThrow('owner deploy/2 is declined on blueprint red');
    await broker.runUntilIdle();
    await refused;
    expect(await states(broker, { state: 'requested' })).toEqual([]);
    expect(red.calls.allocateResource + blue.calls.allocateResource).toBe(0);
    await broker.close();
  });

  test('the exact owner wins over a prefix, and a lease without an owner is never authorized', async () => {
    const { red, blue } = twoPools();
    const open = fakeBlueprint({ name: 'open', type: 'host' });
    const broker = await testBroker({ blueprints: [red, blue, open] });
    await broker.authorizations.authorize('red', 'build/*');
    await broker.authorizations.decline('red', 'build/13');
    const lucky = await broker.requestLease({ type: 'host', owner: 'build/12', blueprints: ['red'] });
    const unlucky = await broker.requestLease({ type: 'host', owner: 'build/13', blueprints: ['red', 'blue'] });
    const nobody = await broker.requestLease({ type: 'host', blueprints: ['red', 'blue'] });
    // A blueprint that requires no authorization serves anyone, the ownerless too.
    const anyone = await broker.requestLease({ type: 'host', blueprints: ['red', 'open'] });
    await broker.runUntilIdle();
    expect(await statusOf(broker, lucky.id)).toEqual({ status: 'active', brokenReason: null });
    expect(await statusOf(broker, unlucky.id)).toEqual({ status: 'pending', brokenReason: null });
    expect((await waitRows(broker, unlucky.id))[0].message).toBe('Waiting for authorization of owner build/13 on blueprint blue (declined on red).');
    expect(await statusOf(broker, nobody.id)).toEqual({ status: 'destroyed', brokenReason: 'the lease has no owner to authorize, and blueprints red, blue require authorization' });
    expect((await anyone.whenActive()).resource.blueprint).toBe('open');
    // A requested row never decides: authorizing the prefix on blue lets build/13 in although its own row is requested.
    await broker.authorizations.authorize('blue', 'build/*');
    await broker.runUntilIdle();
    expect((await unlucky.whenActive()).resource.blueprint).toBe('blue');
    expect(await states(broker, { blueprint: 'blue', owner: 'build/13' })).toEqual(['blue build/* authorized', 'blue build/13 requested']);
    await broker.close();
  });

  test('revoking releases nothing: the active lease stays, and a new lease of the owner may not take the free room on its resource', async () => {
    const hosts = fakeBlueprint({ name: 'hosts', type: 'host', requireAuthorization: true, limits: { maxResources: 1 } });
    const broker = await testBroker({ blueprints: [hosts] });
    await broker.authorizations.authorize('hosts', 'ci/*');
    const first = await broker.requestLease({ type: 'host', owner: 'ci/1' });
    await broker.runUntilIdle();
    const held = await first.whenActive();
    await broker.authorizations.decline('hosts', 'ci/*', { author: 'bob' });
    const second = await broker.requestLease({ type: 'host', owner: 'ci/2' });
    await broker.runUntilIdle();
    expect(await first.status()).toBe('active');
    // The resource has room (no maxLeasesPerResource), but the owner is declined now: no lease on it.
    expect(await statusOf(broker, second.id)).toEqual({ status: 'destroyed', brokenReason: 'owner ci/2 is declined on blueprint hosts' });
    expect((await broker.leases.list({ resource: held.resource.id })).map((l) => l.id)).toEqual([held.id]);
    expect((await broker.logs({ blueprint: 'hosts', type: 'authorization.declined' }))[0].message).toBe('Owner ci/* declined on blueprint hosts by bob (was authorized).');
    // Authorizing again is a change; authorizing what is authorized changes nothing and logs nothing.
    await broker.authorizations.authorize('hosts', 'ci/*');
    await broker.authorizations.authorize('hosts', 'ci/*');
    expect(await broker.logs({ blueprint: 'hosts', type: 'authorization.authorized' })).toHaveLength(2);
    await held.release();
    await broker.close();
  });

  test('a decline that lands while the allocator runs its hooks is seen by the transaction that would acquire', async () => {
    let hold: Promise<void> | null = null;
    let release!: () => void;
    let entered!: () => void;
    const inHook = new Promise<void>((resolve) => (entered = resolve));
    const hosts = fakeBlueprint({
      name: 'hosts',
      type: 'host',
      requireAuthorization: true,
      gates: { canAcquireLease: () => (hold ? (entered(), hold) : Promise.resolve()) },
    });
    const broker = await testBroker({ blueprints: [hosts] });
    await broker.authorizations.authorize('hosts', 'ci/*');
    const first = await broker.requestLease({ type: 'host', owner: 'ci/1' });
    await broker.runUntilIdle();
    const held = await first.whenActive();

    hold = new Promise<void>((resolve) => (release = resolve));
    const second = await broker.requestLease({ type: 'host', owner: 'ci/2' });
    const running = broker.runUntilIdle();
    await inHook; // the pass read the authorization and is asking the resource
    await broker.authorizations.decline('hosts', 'ci/2');
    hold = null;
    release();
    await running;
    await broker.runUntilIdle();
    expect(await statusOf(broker, second.id)).toEqual({ status: 'destroyed', brokenReason: 'owner ci/2 is declined on blueprint hosts' });
    expect((await broker.resources.list({ status: 'active' })).length).toBe(1);
    expect((await broker.leases.list({ resource: held.resource.id, status: ['acquired', 'active'] })).map((l) => l.id)).toEqual([held.id]);
    await held.release();
    await broker.close();
  });

  test('bad calls are refused with a ValidationError naming the argument', async () => {
    const { red } = twoPools();
    const broker = await testBroker({ blueprints: [red] });
    const refused = async (call: Promise<unknown>, field: string, message: RegExp) => {
      const error = await call.then(() => null, (e: unknown) => e);
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).message).toMatch(message);
      expect((error as ValidationError).field).toBe(field);
    };
    await refused(broker.authorizations.authorize('green', 'ci/*'), 'blueprint', /unknown blueprint "green" \(known: red\)/);
    await refused(broker.authorizations.authorize('red', 'ci*'), 'owner', /\* may only end a prefix/);
    await refused(broker.authorizations.authorize('red', '*'), 'owner', /\* may only end a prefix/);
    await refused(broker.authorizations.decline('red', ''), 'owner', /non-empty string/);
    await refused(broker.authorizations.request('red', 'ci/1', { auhtor: 'x' } as never), 'auhtor', /not an option of authorizations.request/);
    await refused(broker.authorizations.list({ state: 'maybe' } as never), 'state', /requested, authorized, declined/);
    await refused(broker.authorizations.list({ owner: 3 } as never), 'owner', /non-empty string/);
    expect(await broker.authorizations.list()).toEqual([]);
    // request is idempotent and never overwrites a decision.
    expect((await broker.authorizations.request('red', 'ci/1')).state).toBe('requested');
    await broker.authorizations.authorize('red', 'ci/1');
    expect((await broker.authorizations.request('red', 'ci/1')).state).toBe('authorized');
    expect(await broker.logs({ type: 'authorization.requested' })).toHaveLength(1);
    await broker.close();
  });
});

// Issue 13: child leases inherit their parent resource's authorization (the working copy's host lease).
describe('authorizations of child leases', () => {
  function workingCopies() {
    const hosts = fakeBlueprint({ name: 'hosts', type: 'host', requireAuthorization: true });
    const copies = fakeBlueprint({ name: 'copies', type: 'working-copy', child: { type: 'host' } });
    return { hosts, copies };
  }

  test("a working copy's host lease is authorized as the owner the working copy is built for, not as its own owner", async () => {
    const { hosts, copies } = workingCopies();
    const broker = await testBroker({ blueprints: [hosts, copies] });
    const handle = await broker.requestLease({ type: 'working-copy', owner: 'build/7' });
    await broker.runUntilIdle();
    const [child] = await broker.leases.list({ type: 'host' });
    expect(child.owner).toMatch(/^resource:/);
    expect(child.status).toBe('pending');
    const [wait] = await waitRows(broker, child.id);
    expect(wait.message).toBe(`Waiting for authorization of owner build/7 (inherited from resource ${child.parentResourceId}) on blueprint hosts.`);
    // The request names the owner an operator knows, not the resource's.
    expect(await states(broker)).toEqual(['hosts build/7 requested']);
    // Authorizing the resource's own owner changes nothing for it.
    await broker.authorizations.authorize('hosts', child.owner!);
    await broker.runUntilIdle();
    expect((await broker.leases.get(child.id))!.status).toBe('pending');

    await broker.authorizations.authorize('hosts', 'build/7');
    await broker.runUntilIdle();
    const lease = await handle.whenActive();
    expect(lease.resource.type).toBe('working-copy');
    expect((await broker.leases.get(child.id))!.status).toBe('active');
    await lease.release();
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('a working copy built for a declined owner gets no host: its child lease breaks with the inherited reason', async () => {
    const { hosts, copies } = workingCopies();
    const broker = await testBroker({ blueprints: [hosts, copies], maxAllocationFailures: 1 });
    await broker.authorizations.decline('hosts', 'intruder');
    const handle = await broker.requestLease({ type: 'working-copy', owner: 'intruder' });
    await broker.runUntilIdle();
    const [child] = await broker.leases.list({ type: 'host', status: [...LEASE_STATUSES] });
    expect(child.brokenReason).toBe(`owner intruder (inherited from resource ${child.parentResourceId}) is declined on blueprint hosts`);
    expect(hosts.calls.allocateResource).toBe(0);
    await expect(handle.whenActive()).rejects.toThrow(/declined on blueprint hosts/);
    await broker.close();
  });
});

// The project rule: as users run it, on the real clock with createBroker and its own workers.
describe('authorizations on the real clock', () => {
  test('acquire() waits for the authorization and proceeds as soon as it is given, long before any recheck', async () => {
    const hosts = fakeBlueprint({ name: 'hosts', type: 'host', requireAuthorization: true });
    const broker = await realBroker({ blueprints: [hosts], waitRecheck: { minutes: 10 } });
    let settled = false;
    const acquiring = broker.acquire({ type: 'host', owner: 'nightly/3', timeout: { minutes: 1 } }).finally(() => (settled = true));
    await eventually(async () => (await broker.authorizations.list({ state: 'requested' })).length === 1);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(settled).toBe(false);
    const started = Date.now();
    await broker.authorizations.authorize('hosts', 'nightly/*');
    const lease = await acquiring;
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(lease.resource.blueprint).toBe('hosts');
    await lease.release();
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });
});

// DESIGN "Storage": authorizations are rows every broker of the schema shares, and a change wakes the waiting lease wherever its worker runs.
describeOnPostgres('authorizations across two brokers on one Postgres', () => {
  test('one broker authorizes (or declines), and the lease waiting in the other proceeds (or breaks) at once', async () => {
    const schema = freshSchema();
    const hosts = fakeBlueprint({ name: 'hosts', type: 'host', requireAuthorization: true });
    const worker = track(await createBroker({ database: { url: tierUrl!, schema }, blueprints: [hosts], waitRecheck: { minutes: 10 }, sweepInterval: { minutes: 10 } }));
    // The operator's broker: no workers and no blueprints, as the command line runs it.
    const operator = track(await createBroker({ database: { url: tierUrl!, schema }, workers: false }));
    const acquiring = worker.acquire({ type: 'host', owner: 'team-a/1', timeout: { minutes: 1 } });
    const declined = worker.acquire({ type: 'host', owner: 'team-b/1', timeout: { minutes: 1 } }).then(
      () => 'acquired',
      (e: Error) => e.message,
    );
    await eventually(async () => (await operator.authorizations.list({ state: 'requested' })).length === 2);
    expect(await states(operator)).toEqual(['hosts team-a/1 requested', 'hosts team-b/1 requested']);

    const started = Date.now();
    await operator.authorizations.authorize('hosts', 'team-a/*', { author: 'ops' });
    const lease = await acquiring;
    // Woken by the row the change wrote and its NOTIFY: the recheck and the sweep are 10 minutes away.
    expect(Date.now() - started).toBeLessThan(5_000);
    await operator.authorizations.decline('hosts', 'team-b/*', { author: 'ops' });
    expect(await declined).toMatch(/owner team-b\/1 is declined on blueprint hosts/);
    expect((await worker.stats()).types.host).toMatchObject({ waiting: 0, waitingForAuthorization: 0 });
    await lease.release();
    expect(engineErrors(worker)).toEqual([]);
    await operator.close();
    await worker.close();
  }, 60_000);
});

async function statusOf(broker: TestBroker, id: string) {
  const lease = await broker.leases.get(id);
  return { status: lease?.status, brokenReason: lease?.brokenReason ?? null };
}

async function eventually(done: () => Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await done()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('timed out');
}
