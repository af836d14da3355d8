import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { workingCopies } from '../blueprints/index.js';
import { LeaseBrokenError, ValidationError, type Broker, type BrokerOptions, type JsonObject } from '../lib/index.js';
import { guardBrokers, realBroker } from './helpers/broker.js';
import { TestRepo } from './helpers/git-repo.js';
import { recordingHosts } from './helpers/recording-hosts.js';

guardBrokers();

let scratch: string;
beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'slipway-wc-test-'));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

let n = 0;
async function setup(limits: { maxResources?: number } = {}, options: BrokerOptions = {}) {
  const dir = join(scratch, `case-${++n}`);
  const hosts = recordingHosts({ name: 'local', root: join(dir, 'hosts') });
  const wc = workingCopies({ name: 'wc', config: { hosts: ['local'] }, limits });
  const broker = await realBroker({ blueprints: [hosts.blueprint, wc], sweepInterval: { milliseconds: 100 }, ...options });
  const repo = new TestRepo(join(dir, 'origin'));
  const clones = () => hosts.commands.filter((c) => c[0] === 'git' && c[1] === 'clone').length;
  return { broker, repo, hosts, clones };
}

const acquire = (broker: Broker, attributes: JsonObject) => broker.acquire({ type: 'working-copy', attributes, timeout: { seconds: 30 } });
const read = (lease: { interface(name: 'filesystem'): { path: string } }, file: string) => readFileSync(join(lease.interface('filesystem').path, file), 'utf8');

describe('workingCopies on localHosts, with real git', () => {
  test('clones once and reuses the working copy; each lease checks out its own commit', async () => {
    const { broker, repo, clones } = await setup();
    const commits = [1, 2, 3].map((i) => repo.commit({ 'version.txt': `v${i}\n` }));
    for (const [i, commit] of commits.entries()) {
      const lease = await acquire(broker, { repositories: { app: { url: repo.url, commit } } });
      expect(read(lease, 'app/version.txt')).toBe(`v${i + 1}\n`);
      expect((lease.attributes.repositories as any).app.head).toBe(commit);
      // A leftover of the previous build must not survive the next lease (clean -ffdx).
      const out = await lease.interface('command').run(['sh', '-c', 'echo junk > untracked.txt; git rev-parse HEAD'], { cwd: 'app' });
      expect(out.stdout.trim()).toBe(commit);
      await lease.release();
    }
    expect(clones()).toBe(1);
    expect(await broker.resources.list({ type: 'working-copy' })).toHaveLength(1);
    await broker.close();
  });

  test('a branch is reset to origin/<branch>; a staging ref and two squash merges land on top', async () => {
    const { broker, repo } = await setup();
    const base = repo.commit({ 'a.txt': 'a\n', 'b.txt': 'b\n' });
    repo.git('branch', 'release');
    const onRelease = repo.git('rev-parse', 'release');
    let lease = await acquire(broker, { repositories: { app: { url: repo.url, branch: 'release' } } });
    expect((lease.attributes.repositories as any).app.head).toBe(onRelease);
    await lease.release();

    repo.refAt('refs/changes/1', base, { 'staged.txt': 'staged\n' });
    repo.refAt('refs/changes/2', base, { 'm1.txt': 'm1\n' });
    repo.refAt('refs/changes/3', base, { 'm2.txt': 'm2\n' });
    lease = await acquire(broker, { repositories: { app: { url: repo.url, commit: base, stagingRef: 'refs/changes/1', merges: ['refs/changes/2', 'refs/changes/3'] } } });
    expect(read(lease, 'app/staged.txt')).toBe('staged\n');
    expect(read(lease, 'app/m1.txt')).toBe('m1\n');
    expect(read(lease, 'app/m2.txt')).toBe('m2\n');
    const checkout = join(lease.interface('filesystem').path, 'app');
    const log = execFileSync('git', ['log', '--format=%cn <%ce> %s', '-3'], { cwd: checkout, encoding: 'utf8' }).trim().split('\n');
    expect(log.slice(0, 2)).toEqual(['slipway <slipway@localhost> Squash merge of refs/changes/3', 'slipway <slipway@localhost> Squash merge of refs/changes/2']);
    expect((lease.attributes.repositories as any).app.head).toBe(execFileSync('git', ['rev-parse', 'HEAD'], { cwd: checkout, encoding: 'utf8' }).trim());
    await lease.release();
    await broker.close();
  });

  test('a conflicting merge breaks the lease with "merge of <ref> conflicts", and leaves no half-merged tree', async () => {
    const { broker, repo } = await setup();
    const base = repo.commit({ 'a.txt': 'base\n' });
    const ours = repo.commit({ 'a.txt': 'ours\n' });
    repo.refAt('refs/changes/theirs', base, { 'a.txt': 'theirs\n' });
    const error = await acquire(broker, { repositories: { app: { url: repo.url, commit: ours, merges: ['refs/changes/theirs'] } } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect(String((error as Error).message)).toMatch(/merge of refs\/changes\/theirs conflicts in app \(exit code 1\)/);
    const [resource] = await broker.resources.list({ type: 'working-copy' });
    const checkout = join(String(resource!.attributes.root), 'app');
    expect(execFileSync('git', ['status', '--porcelain'], { cwd: checkout, encoding: 'utf8' })).toBe('');
    expect(readFileSync(join(checkout, 'a.txt'), 'utf8')).toBe('ours\n');
    const [lease] = await broker.leases.list({ type: 'working-copy' });
    const logs = await broker.logs({ lease: lease!.id });
    expect(logs.map((l: any) => l.message ?? JSON.stringify(l)).join('\n')).toMatch(/merge of refs\/changes\/theirs conflicts/);
    await broker.close();
  });

  test('strict reuses only a working copy holding exactly the repositories asked for', async () => {
    const { broker, repo, clones } = await setup();
    const lib = new TestRepo(join(scratch, `lib-${n}`));
    const a = repo.commit({ 'x.txt': 'x\n' });
    const b = lib.commit({ 'y.txt': 'y\n' });
    const both = await acquire(broker, { repositories: { app: { url: repo.url, commit: a }, lib: { url: lib.url, commit: b } } });
    await both.release();
    const loose = await acquire(broker, { repositories: { app: { url: repo.url, commit: a } } });
    expect(loose.resource.id).toBe(both.resource.id);
    await loose.release();
    const strict = await acquire(broker, { repositories: { app: { url: repo.url, commit: a } }, strict: true });
    expect(strict.resource.id).not.toBe(both.resource.id);
    await strict.release();
    expect(clones()).toBe(3);
    await broker.close();
  });
});

/** The rendered log of a lease or a resource, one line an entry. */
const logText = async (broker: Broker, filter: { lease?: string; resource?: string }) => (await broker.logs(filter)).map((l) => l.message).join('\n');

describe('workingCopies: a failing git step', () => {
  test('a clone that fails breaks the resource; the lease\'s error names phase clone, the exit code and the end of stderr', async () => {
    // One failed build is enough for the lease to give up, so that the test need not wait out the backoff.
    const { broker } = await setup({}, { maxAllocationFailures: 1 });
    const missing = `file://${join(scratch, `no-such-repo-${n}`)}`;
    const error = await acquire(broker, { repositories: { app: { url: missing } } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    const message = (error as Error).message;
    expect(message).toMatch(/git clone of app failed \(exit code 128\): .*/s);
    expect(message).toMatch(/does not appear to be a git repository|not found|does not exist/);

    // Broken, and maybe destroyed already by the time it is read (the worker tears a broken lease down at once).
    const [lease] = await broker.leases.list({ type: 'working-copy' });
    expect(['broken', 'destroyed']).toContain(lease!.status);
    expect((await broker.logs({ lease: lease!.id })).map((l) => l.type)).toContain('lease.broken');
    expect(await logText(broker, { lease: lease!.id })).toContain('git clone of app failed (exit code 128)');
    const [resource] = await broker.resources.list({ type: 'working-copy' });
    expect(['broken', 'destroyed']).toContain(resource!.status);
    expect(await logText(broker, { resource: resource!.id })).toContain('git clone of app failed (exit code 128)');
    await broker.close();
  });

  test('a ref that does not exist upstream breaks the lease in phase fetch; the working copy stays and serves the next lease', async () => {
    const { broker, repo, clones } = await setup();
    const commit = repo.commit({ 'a.txt': 'a\n' });
    const error = await acquire(broker, { repositories: { app: { url: repo.url, ref: 'refs/changes/missing' } } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect((error as Error).message).toMatch(/git fetch of app failed \(exit code 128\): .*refs\/changes\/missing/s);
    const [broken] = await broker.leases.list({ type: 'working-copy', status: ['broken', 'destroyed'] });
    expect(await logText(broker, { lease: broken!.id })).toMatch(/git failed in app: git fetch of app failed \(exit code 128\)/);
    // Until its broken lease is destroyed the working copy is still taken, and a lease that
    // came now would rightly get a second one: wait for the teardown, as a build queue would.
    for (const deadline = Date.now() + 20_000; (await broker.leases.get(broken!.id))?.status !== 'destroyed'; ) {
      if (Date.now() > deadline) throw new Error('the broken lease was never destroyed');
      await new Promise((r) => setTimeout(r, 20));
    }

    const lease = await acquire(broker, { repositories: { app: { url: repo.url, commit } } });
    expect(read(lease, 'app/a.txt')).toBe('a\n');
    await lease.release();
    expect(clones()).toBe(1);
    await broker.close();
  });

  test('a commit that does not exist upstream breaks the lease in phase checkout, naming the commit', async () => {
    const { broker, repo } = await setup();
    repo.commit({ 'a.txt': 'a\n' });
    const absent = 'deadbeef'.repeat(5);
    const error = await acquire(broker, { repositories: { app: { url: repo.url, commit: absent } } }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseBrokenError);
    expect((error as Error).message).toMatch(new RegExp(`git checkout of app failed \\(exit code 128\\): .*${absent}`, 's'));
    const [broken] = await broker.leases.list({ type: 'working-copy' });
    expect(await logText(broker, { lease: broken!.id })).toContain('git checkout of app failed (exit code 128)');
    await broker.close();
  });
});

type Hostile = { kind: 'url' | 'dir' | 'commit' | 'branch' | 'ref' | 'stagingRef' | 'merges'; value: string; why: string };
const corpus = JSON.parse(readFileSync(new URL('./fixtures/working-copies/hostile.json', import.meta.url), 'utf8')) as Hostile[];

/** The attributes carrying one hostile value, and the field its ValidationError must name. */
function hostileLease(h: Hostile, url: string): { attributes: JsonObject; field: string } {
  const at = 'attributes.repositories."app"';
  switch (h.kind) {
    case 'dir':
      return { attributes: { repositories: { [h.value]: { url } } }, field: 'attributes.repositories' };
    case 'url':
      return { attributes: { repositories: { app: { url: h.value } } }, field: `${at}.url` };
    case 'merges':
      return { attributes: { repositories: { app: { url, merges: [h.value] } } }, field: `${at}.merges[0]` };
    default:
      return { attributes: { repositories: { app: { url, [h.kind]: h.value } } }, field: `${at}.${h.kind}` };
  }
}

/**
 * Refused with a ValidationError naming `field`: either by the broker itself, at `acquire()`
 * (a NUL, which Postgres cannot store, as `spec.attributes...`), or by the blueprint's
 * canEverAllocate, whose ValidationError breaks the lease at once with its message as the reason.
 */
function refusedNaming(error: unknown, field: string): boolean {
  const plain = (f: string) => f.replace(/^spec\./, '').replaceAll('"', '');
  if (error instanceof ValidationError) return plain(error.field) === plain(field);
  return error instanceof LeaseBrokenError && error.message.includes(`wc.canEverAllocate failed: ${field}: `);
}

describe('workingCopies: the hostile corpus', () => {
  test('has at least 30 values', () => {
    expect(corpus.length).toBeGreaterThanOrEqual(30);
  });

  test('every hostile value is refused with a ValidationError naming its field, before any process starts', async () => {
    const { broker, repo, hosts } = await setup();
    repo.commit({ 'a.txt': 'a\n' });
    const refused: string[] = [];
    for (const h of corpus) {
      const { attributes, field } = hostileLease(h, repo.url);
      const error = await acquire(broker, attributes).catch((e: unknown) => e);
      if (!refusedNaming(error, field)) refused.push(`${h.kind} ${JSON.stringify(h.value)} (${h.why}): ${String(error)}`);
    }
    expect(refused).toEqual([]);
    expect(hosts.commands).toEqual([]);
    expect(await broker.resources.list({ type: 'working-copy' })).toHaveLength(0);
    await broker.close();
  });
});

describe('workingCopies: credentials', () => {
  test('a URL\'s credentials are redacted from the error that refuses it', async () => {
    const { broker } = await setup();
    const error = await acquire(broker, { repositories: { app: { url: 'ftp://deploy:s3cret@example.com/repo.git' } } }).catch((e: unknown) => e);
    expect(String((error as Error).message)).toContain('ftp://***@example.com/repo.git');
    expect(String((error as Error).message)).not.toContain('s3cret');
    await broker.close();
  });
});

describe('workingCopies: the seed burst', () => {
  test('5 commits land, 5 leases at once on maxResources: 1: one clone, and each lease gets its own commit', async () => {
    const { broker, repo, clones } = await setup({ maxResources: 1 });
    const commits = [1, 2, 3, 4, 5].map((i) => repo.commit({ 'BUILD': `${i}\n` }));
    const seen = await Promise.all(
      commits.map(async (commit) => {
        const lease = await acquire(broker, { repositories: { app: { url: repo.url, commit } } });
        const content = read(lease, 'app/BUILD');
        const head = (lease.attributes.repositories as any).app.head;
        await lease.release();
        return { commit, head, content };
      }),
    );
    seen.forEach(({ commit, head, content }, i) => {
      expect(head).toBe(commit);
      expect(content).toBe(`${i + 1}\n`);
    });
    expect(clones()).toBe(1);
    expect(await broker.resources.list({ type: 'working-copy' })).toHaveLength(1);
    await broker.close();
  });
});
