import type { Logger } from '../engine/runtime.js';
import { channelFor, Listener } from '../store/notifier.js';
import { listenConnection } from '../store/open.js';
import type { BrokerContext } from './context.js';
import { ANY_HINT } from './events.js';

/**
 * On Postgres, the LISTEN connection that hears the other brokers of the schema: work
 * became due (wake the workers), or leases they moved (re-read the ones watched here).
 * Null on the embedded database, which has one broker. Hints are only hints: the sweep
 * and the waits' slow re-read cover any that is lost.
 */
export async function listenForHints(ctx: BrokerContext, workerId: string, logger: Logger): Promise<Listener | null> {
  const { database } = ctx.settings;
  // A DataSource of the app's: a dedicated client with its connection settings, not one of its pool.
  const url = listenConnection(database);
  if (!url) return null;
  const listener = new Listener({
    url: url as ConstructorParameters<typeof Listener>[0]['url'],
    channel: channelFor(ctx.store.db.schema),
    applicationName: ('applicationName' in database ? database.applicationName : undefined) ?? 'slipway',
    self: workerId,
    onHint(hint) {
      ctx.leaseHints.emit(ANY_HINT);
      if (hint.work) ctx.engine?.poke();
      if (hint.leases === null) ctx.leaseHints.emit('*');
      else for (const id of hint.leases) ctx.leaseHints.emit(id);
    },
    onConnected(again) {
      if (!again) return;
      logger.info({}, 'slipway: LISTEN connection is back');
      ctx.engine?.poke();
      ctx.leaseHints.emit('*');
      ctx.leaseHints.emit(ANY_HINT);
    },
    onLost(error, retryInMs) {
      logger.warn({ err: error, retryInMs }, 'slipway: LISTEN connection lost; reconnecting (the sweep covers the gap)');
    },
  });
  await listener.start();
  return listener;
}
