/**
 * The second process of the two-process hand-off (handoff.ts, `handoffAcrossProcesses`):
 * a broker of its own on the parent's schema, whose leases wait for the resource the
 * parent holds. Started with `node --import tsx`; driven over IPC, one message at a time.
 */
import { createBroker } from '../../lib/index.js';
import { until } from '../support/measure.js';
import { ACROSS, handoffBlueprint } from './handoff.js';

export type ToChild = { start: { url: string; schema: string } } | { request: true } | { stop: true };
export type FromChild = { ready: true } | { waiting: true } | { active: true } | { released: true } | { error: string };

const send = (m: FromChild) => new Promise<void>((resolve) => process.send!(m, () => resolve()));

let broker: Awaited<ReturnType<typeof createBroker>> | undefined;
const waiting = new Set<string>();

async function handle(m: ToChild): Promise<void> {
  if ('start' in m) {
    broker = await createBroker({ database: m.start, blueprints: [handoffBlueprint(ACROSS)] });
    broker.on('log', (e) => e.type === 'lease.waiting-for-resources' && e.lease && waiting.add(e.lease));
    await send({ ready: true });
  } else if ('request' in m) {
    const next = await broker!.requestLease({ type: 'fake' });
    await until(() => waiting.has(next.id), `lease ${next.id} to wait`);
    waiting.delete(next.id);
    const active = next.whenActive();
    await send({ waiting: true });
    const lease = await active;
    // The parent's clock stops when this message arrives.
    await send({ active: true });
    await lease.release();
    await send({ released: true });
  } else {
    await broker?.close();
    process.exit(0);
  }
}

let queue = Promise.resolve();
process.on('message', (m: ToChild) => {
  queue = queue.then(() => handle(m)).catch(async (error) => {
    await send({ error: String((error as Error)?.stack ?? error) });
    await broker?.close().catch(() => undefined);
    process.exit(1);
  });
});
