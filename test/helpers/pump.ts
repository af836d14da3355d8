import { setTimeout as sleep } from 'node:timers/promises';
import { internals } from '../../lib/broker/index.js';
import type { TestBroker } from '../../lib/testing/index.js';

/** Runs the test broker's workers until `promise` settles (acquire() and release() wait on the workers). */
export async function pump<T>(broker: TestBroker, promise: Promise<T>, ms = 20_000): Promise<T> {
  let settled = false;
  const watched = promise.finally(() => (settled = true));
  watched.catch(() => undefined);
  const deadline = Date.now() + ms;
  while (!settled) {
    if (Date.now() > deadline) throw new Error('pump: the promise did not settle in time');
    await broker.runUntilIdle();
    if (!settled) await sleep(5);
  }
  return watched;
}

/** A promise a fake hook waits on until the test opens it. */
export function gate() {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  let entered!: () => void;
  /** Resolves once the hook has reached the gate. */
  const reached = new Promise<void>((r) => (entered = r));
  return { wait: () => (entered(), promise), open, reached };
}

/** Lets the workers run on real time (sweeps and pokes) without waiting for idle: for when a hook is blocked. */
export async function settle(ms = 300): Promise<void> {
  await sleep(ms);
}

/** Polls `check` on the real clock until it holds (for when a hook is blocked and runUntilIdle would not return). */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Rows of one of the library's tables, straight from the database. */
export async function rows(broker: TestBroker, sql: (schema: string) => string, params: unknown[] = []): Promise<Array<Record<string, any>>> {
  const db = internals.get(broker)!.db;
  return db.query(sql(`"${db.schema}"`), params);
}
