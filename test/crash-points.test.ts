import { fork } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createBroker, type Broker } from '../lib/index.js';
import { internals } from '../lib/broker/index.js';
import { CRASH_POINTS, type CrashPoint } from '../lib/engine/crash-points.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import type { DatabaseOptions } from '../lib/store/open.js';
import { hooksLeftOut, maxResources } from './fixtures/crash-point-shapes.js';
import { guardBrokers, track } from './helpers/broker.js';
import { freshSchema, tier, tierUrl } from './helpers/tier.js';

guardBrokers();

const child = fileURLToPath(new URL('./fixtures/crash-point-child.ts', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'slipway-crash-points-'));
let template: string | undefined;

/** A fresh database on this tier: a copy of one migrated PGlite dataDir, or a new schema. */
async function freshDatabase(point: string): Promise<DatabaseOptions> {
  if (tierUrl) return { url: tierUrl, schema: freshSchema(point.replace(/\W/g, '_').slice(0, 20)) };
  if (!template) {
    template = join(scratch, 'template');
    const b = await createBroker({ database: { embedded: true, dataDir: template }, workers: false });
    await b.close();
  }
  const dir = join(scratch, point);
  cpSync(template, dir, { recursive: true });
  return { embedded: true, dataDir: dir };
}

/** Runs the child until it kills itself at `point`; resolves with how it ended and what it printed. */
function runChild(database: DatabaseOptions, point: CrashPoint): Promise<{ signal: NodeJS.Signals | null; code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const p = fork(child, [JSON.stringify(database), point], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    let out = '';
    p.stdout!.on('data', (d) => (out += d));
    p.stderr!.on('data', (d) => (out += d));
    const timer = setTimeout(() => p.kill('SIGKILL'), 90_000);
    p.on('error', reject);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out });
    });
  });
}

async function leftovers(broker: Broker) {
  const { db, store } = internals.get(broker)!;
  const s = store.s;
  const [row] = await db.query(`
    SELECT (SELECT count(*)::int FROM ${s}.leases WHERE status <> 'destroyed') AS leases,
           (SELECT count(*)::int FROM ${s}.resources WHERE status <> 'destroyed') AS resources,
           (SELECT count(*)::int FROM ${s}.slot_locks) AS slot_locks,
           (SELECT count(*)::int FROM ${s}.commands WHERE consumed_at IS NULL) AS commands,
           (SELECT count(*)::int FROM ${s}.work_items) AS work_items`);
  return row;
}

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// Every named crash point: the process dies there (SIGKILL: no grace, no cleanup), a new
// broker on the same data takes over, and whatever the dead one left half done is
// finished. Then the cycle is completed from outside (release what is live), and nothing
// may be stranded: no live object, no slot lock, no unconsumed command, no work item.
describe(`crash points (${tier} tier)`, () => {
  test.each(CRASH_POINTS.map((p) => [p]))('SIGKILL at %s: a new broker converges with nothing stranded', async (point) => {
    const database = await freshDatabase(point);
    const died = await runChild(database, point);
    expect({ point, signal: died.signal, out: died.out.trim().split('\n').at(-1) }).toEqual({ point, signal: 'SIGKILL', out: `crash ${point}` });

    const bp = fakeBlueprint({ name: 'f', exclusive: true, limits: { maxResources: maxResources(point) }, without: hooksLeftOut(point) });
    const started = Date.now();
    const broker = track(await createBroker({ database, blueprints: [bp], claimTtl: { seconds: 1 }, sweepInterval: { milliseconds: 100 } }));
    // First the new broker finishes what the dead one left half done: every lease ends
    // active (or terminal), with any interrupted hook resumed.
    const deadline = Date.now() + 30_000;
    while ((await broker.leases.list({ status: ['pending', 'acquired'] })).length > 0) {
      if (Date.now() > deadline) throw new Error(`a lease was never served after a crash at ${point}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // Then what a client does after its process died: release its leases and resources.
    for (;;) {
      for (const lease of await broker.leases.list({ status: ['pending', 'acquired', 'active'] })) {
        await broker.release(lease.id, { reason: 'client died' });
      }
      for (const resource of await broker.resources.list({ status: ['pending', 'active'] })) {
        if ((await broker.leases.list({ resource: resource.id, status: ['pending', 'acquired', 'active', 'released', 'broken'] })).length === 0) {
          await broker.releaseResource(resource.id, { reason: 'cleanup after crash' });
        }
      }
      const left = await leftovers(broker);
      if (Object.values(left).every((n) => Number(n) === 0)) break;
      if (Date.now() > deadline) throw new Error(`not converged after a crash at ${point}: ${JSON.stringify(left)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // Bounded: the dead claims expire after 1 s (claimTtl); allow 3 × that plus the work.
    expect(Date.now() - started).toBeLessThan(15_000);
    // A phase hook interrupted after its intent was recorded is resumed, and told so.
    const resumed = bp.history.filter((h) => h.resume).map((h) => h.hook);
    // Killed after the holder's inline release recorded the intent to destroy: the next pass resumes destroyLease.
    const hookName = point === 'releaseInline.released' ? 'destroyLease' : point.split('.')[0];
    if (['allocateResource', 'activateResource', 'destroyResource', 'activateLease', 'destroyLease'].includes(hookName)) {
      expect({ point, resumed: resumed.includes(hookName as never) }).toEqual({ point, resumed: true });
    }
    expect(await leftovers(broker)).toEqual({ leases: 0, resources: 0, slot_locks: 0, commands: 0, work_items: 0 });
    await broker.close();
  }, 120_000);
});
