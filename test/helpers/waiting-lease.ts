import { internals } from '../../lib/broker/index.js';
import type { Broker } from '../../lib/index.js';

/**
 * Resolves once lease `id` waits for a resource with its first pass over (its work item
 * unclaimed): a hand-off from then on finds it free to claim. For a real-clock broker of
 * this process (its own workers); also used by the crash-point child.
 */
export async function untilWaiting(broker: Broker, id: string, ms = 30_000): Promise<void> {
  const engine = internals.get(broker)!.engine!;
  const deadline = Date.now() + ms;
  while ((await broker.logs({ lease: id, type: 'lease.waiting-for-resources' })).length === 0 || engine.inflightKeys().includes(`lease:${id}`)) {
    if (Date.now() > deadline) throw new Error(`lease ${id} never waited for a resource`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Writes a release command for lease `id` as another process would, but with no wake of
 * the lease's work item (as if its wake were still to come): the lease has a command
 * waiting that no worker has been told of.
 */
export async function releaseWrittenUnwoken(broker: Broker, id: string): Promise<void> {
  const { db, store } = internals.get(broker)!;
  await db.query(`INSERT INTO ${store.s}.commands (target_kind, target_id, command, data, author, created_at) VALUES ('lease', $1, 'release', '{"reason":"released"}', 'other', now())`, [id]);
}
