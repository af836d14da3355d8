import { fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fakeBlueprint, type FakeBlueprint, type FakeHook, type TestBroker } from '../lib/testing/index.js';
import { engineErrors, guardBrokers, testBroker } from './helpers/broker.js';
import { describeOnEmbedded } from './helpers/tier.js';

guardBrokers();

const dirs: string[] = [];
function tempDataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'slipway-crash-'));
  dirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

const never = () => new Promise<void>(() => undefined);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(done: () => boolean | Promise<boolean>, what: string, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const open = (dataDir: string, bp: FakeBlueprint) => testBroker({ database: { embedded: true, dataDir }, blueprints: [bp] });

/** The second life: a broker on the same dataDir with a normal fake of the same name runs until idle. */
async function resume(dataDir: string): Promise<{ broker: TestBroker; bp: FakeBlueprint }> {
  const bp = fakeBlueprint({ name: 'f' });
  const broker = await open(dataDir, bp);
  await broker.runUntilIdle();
  return { broker, bp };
}

const resumed = (bp: FakeBlueprint, hook: FakeHook, id: string) => bp.history.filter((h) => h.hook === hook && h.id === id);

// Invariant 4 (a dead worker's work is resumed) and invariant 3 (nothing required lives only in memory):
// the intent of each hook is recorded before the call, so a broker that stops in the middle of it is finished by the next.
describeOnEmbedded('close in the middle of a hook, then a new broker on the same dataDir', () => {
  test('interrupted activateResource: the new broker resumes it (resume: true) and the lease becomes active', async () => {
    const dataDir = tempDataDir();
    const first = fakeBlueprint({ name: 'f', gates: { activateResource: never } });
    const broker1 = await open(dataDir, first);
    const handle = await broker1.requestLease({ type: 'fake' });
    await waitFor(() => first.calls.activateResource > 0, 'activateResource to start');
    const [resource] = await broker1.resources.list();
    expect(resource!.status).toBe('pending');
    await broker1.close({ grace: { milliseconds: 50 } });

    const { broker, bp } = await resume(dataDir);
    expect((await broker.leases.get(handle.id))!.status).toBe('active');
    expect((await broker.resources.get(resource!.id))!.status).toBe('active');
    expect(resumed(bp, 'activateResource', resource!.id)).toEqual([{ hook: 'activateResource', id: resource!.id, resume: true }]);
    // allocation had finished: it is not repeated
    expect(bp.calls.allocateResource).toBe(0);
    const [resumeLog] = await broker.logs({ resource: resource!.id, type: 'resource.resume' });
    expect(resumeLog!.data).toMatchObject({ phase: 'activateResource' });
    expect(await broker.resources.list()).toHaveLength(1);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('interrupted allocateResource: resumed with resume: true, same resource, lease active', async () => {
    const dataDir = tempDataDir();
    const first = fakeBlueprint({ name: 'f', gates: { allocateResource: never } });
    const broker1 = await open(dataDir, first);
    const handle = await broker1.requestLease({ type: 'fake' });
    await waitFor(() => first.calls.allocateResource > 0, 'allocateResource to start');
    const [resource] = await broker1.resources.list();
    await broker1.close({ grace: { milliseconds: 50 } });

    const { broker, bp } = await resume(dataDir);
    expect((await broker.leases.get(handle.id))!.status).toBe('active');
    expect(resumed(bp, 'allocateResource', resource!.id)).toEqual([{ hook: 'allocateResource', id: resource!.id, resume: true }]);
    expect(resumed(bp, 'activateResource', resource!.id)).toEqual([{ hook: 'activateResource', id: resource!.id, resume: false }]);
    // no second resource was started for the same lease
    expect(await broker.resources.list()).toHaveLength(1);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('interrupted destroyResource: resumed with resume: true, the resource ends destroyed', async () => {
    const dataDir = tempDataDir();
    const first = fakeBlueprint({ name: 'f', gates: { destroyResource: never } });
    const broker1 = await open(dataDir, first);
    const acquiring = broker1.acquire({ type: 'fake' });
    await broker1.runUntilIdle();
    const lease = await acquiring;
    const releasing = lease.release();
    await broker1.runUntilIdle();
    await releasing;
    await broker1.releaseResource(lease.resource.id);
    await waitFor(() => first.calls.destroyResource > 0, 'destroyResource to start');
    expect((await broker1.resources.get(lease.resource.id))!.status).toBe('released');
    await broker1.close({ grace: { milliseconds: 50 } });

    const { broker, bp } = await resume(dataDir);
    expect((await broker.resources.get(lease.resource.id))!.status).toBe('destroyed');
    expect(resumed(bp, 'destroyResource', lease.resource.id)).toEqual([{ hook: 'destroyResource', id: lease.resource.id, resume: true }]);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });
});

const fixture = fileURLToPath(new URL('./fixtures/crash-child.ts', import.meta.url));

/** Forks a broker process that gets stuck in `hook`; resolves with the resource id once it says "ready". */
function startChild(dataDir: string, hook: FakeHook): Promise<{ child: ChildProcess; resourceId: string }> {
  const child = fork(fixture, [dataDir, hook], { execPath: process.execPath, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`child never became ready; stdout: ${out}; stderr: ${err}`));
    }, 40_000);
    child.stdout!.on('data', (chunk) => {
      out += chunk;
      const match = /ready (\S+)/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve({ child, resourceId: match[1]! });
      }
    });
    child.stderr!.on('data', (chunk) => (err += chunk));
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`child exited early (${code ?? signal}); stdout: ${out}; stderr: ${err}`));
    });
  });
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

// Invariant 4 with a real crash: the process holding the claim is SIGKILLed in the middle of the hook (no close, no
// grace, no cleanup). A broker in this process opens the same dataDir, recovers it, and finishes the work.
describeOnEmbedded('a broker process SIGKILLed in the middle of a hook', () => {
  test('activateResource: after the kill, the lease becomes active and the hook is told resume: true', async () => {
    const dataDir = tempDataDir();
    const { child, resourceId } = await startChild(dataDir, 'activateResource');
    await kill(child);
    expect(child.signalCode).toBe('SIGKILL');

    const { broker, bp } = await resume(dataDir);
    expect((await broker.resources.get(resourceId))!.status).toBe('active');
    const [lease] = await broker.leases.list();
    expect(lease!.status).toBe('active');
    expect(lease!.resourceId).toBe(resourceId);
    expect(resumed(bp, 'activateResource', resourceId)).toEqual([{ hook: 'activateResource', id: resourceId, resume: true }]);
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });

  test('destroyResource: after the kill, the resource ends destroyed and the hook is told resume: true', async () => {
    const dataDir = tempDataDir();
    const { child, resourceId } = await startChild(dataDir, 'destroyResource');
    await kill(child);

    const { broker, bp } = await resume(dataDir);
    expect((await broker.resources.get(resourceId))!.status).toBe('destroyed');
    expect(resumed(bp, 'destroyResource', resourceId)).toEqual([{ hook: 'destroyResource', id: resourceId, resume: true }]);
    const [lease] = await broker.leases.list();
    expect(lease!.status).toBe('destroyed');
    expect(engineErrors(broker)).toEqual([]);
    await broker.close();
  });
});
