import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Lease } from '../../lib/index.js';
import { fakeBlueprint, type FakeBlueprint } from '../../lib/testing/index.js';
import type { BenchConfig } from '../support/config.js';
import { sleep, summarize, until, type LatencySummary } from '../support/measure.js';
import type { Tier } from '../support/tiers.js';
import { bounded, openBroker, STUCK_MS } from './common.js';
import type { FromChild, ToChild } from './handoff-child.js';

export interface HandoffResult extends LatencySummary {
  resourcesBuilt: number;
  gapMs: number;
}

/** One exclusive resource at most: every lease after the first waits for the one before it. */
export function handoffBlueprint(name: string): FakeBlueprint {
  // Brokers that share a schema share a blueprint by its name: the child's is the same as the parent's.
  return fakeBlueprint({ name, exclusive: true, limits: { maxResources: 1 } });
}

/**
 * Release to the next waiting lease being active: one exclusive resource
 * (`maxResources: 1`), held by lease A; lease B is requested and has settled into
 * waiting (its `lease.waiting-for-resources` log committed). The sample runs from
 * `A.release()` to B's `whenActive()` resolving. B then holds the resource for the next
 * sample.
 */
export async function handoff(tier: Tier, config: BenchConfig): Promise<HandoffResult> {
  const blueprint = handoffBlueprint('handoff');
  const { broker } = await openBroker(tier, 'handoff', blueprint);
  const waiting = new Set<string>();
  const off = broker.on('log', (e) => e.type === 'lease.waiting-for-resources' && e.lease && waiting.add(e.lease));
  try {
    let holder: Lease = await broker.acquire({ type: 'fake' });
    const samples: number[] = [];
    const total = config.handoff.warmup + config.handoff.samples;
    for (let i = 0; i < total; i++) {
      const next = await broker.requestLease({ type: 'fake' });
      await until(() => waiting.has(next.id), `lease ${next.id} to wait`);
      const active = next.whenActive();
      await sleep(config.handoff.gapMs);
      const t0 = performance.now();
      await holder.release({ wait: false });
      holder = await bounded(broker, next.id, 'active', active);
      if (i >= config.handoff.warmup) samples.push(performance.now() - t0);
      waiting.delete(next.id);
    }
    await holder.release();
    return { ...summarize(samples), resourcesBuilt: blueprint.calls.allocateResource, gapMs: config.handoff.gapMs };
  } finally {
    off();
    await broker.close();
  }
}

const CHILD = fileURLToPath(new URL('./handoff-child.ts', import.meta.url));
/** The blueprint of the two-process hand-off, in both processes. */
export const ACROSS = 'handoff_across';

/**
 * The same hand-off across two processes (Postgres only): this process's broker holds
 * lease A; a broker in a child process, on the same schema, requests lease B and reports
 * when it has settled into waiting. The sample runs from `A.release()` here until the
 * child's message that B is active arrives (so it includes one IPC message, tenths of a
 * millisecond). The child then releases B and this process acquires A again.
 */
export async function handoffAcrossProcesses(tier: Tier, config: BenchConfig): Promise<HandoffResult> {
  const blueprint = handoffBlueprint(ACROSS);
  const { broker, database } = await openBroker(tier, 'handoff2', blueprint);
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const inbox: FromChild[] = [];
  let wake: (() => void) | null = null;
  let exited: string | null = null;
  child.on('message', (m: FromChild) => {
    inbox.push(m);
    wake?.();
  });
  child.on('exit', (code) => {
    exited = `the hand-off child exited (${code})`;
    wake?.();
  });
  const receive = async (key: string): Promise<void> => {
    const deadline = performance.now() + STUCK_MS;
    for (;;) {
      const m = inbox.shift();
      if (m && 'error' in m) throw new Error(`hand-off child: ${m.error}`);
      if (m && key in m) return;
      if (m) throw new Error(`hand-off child: expected ${key}, got ${JSON.stringify(m)}`);
      if (exited) throw new Error(exited);
      if (performance.now() > deadline) throw new Error(`hand-off child: no ${key} after ${STUCK_MS} ms`);
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 100).unref();
      });
      wake = null;
    }
  };
  const send = (m: ToChild) => child.send(m);
  try {
    send({ start: database as { url: string; schema: string } });
    await receive('ready');
    const samples: number[] = [];
    const total = config.handoff.warmup + config.handoff.samples;
    for (let i = 0; i < total; i++) {
      const holder = await bounded(broker, null, 'active', broker.acquire({ type: 'fake' }));
      send({ request: true });
      await receive('waiting');
      await sleep(config.handoff.gapMs);
      const t0 = performance.now();
      await holder.release({ wait: false });
      await receive('active');
      if (i >= config.handoff.warmup) samples.push(performance.now() - t0);
      await receive('released');
    }
    return { ...summarize(samples), resourcesBuilt: blueprint.calls.allocateResource, gapMs: config.handoff.gapMs };
  } finally {
    if (!exited) {
      send({ stop: true });
      await Promise.race([new Promise((resolve) => child.once('exit', resolve)), sleep(10_000)]);
      if (!exited) child.kill('SIGKILL');
    }
    await broker.close();
  }
}
