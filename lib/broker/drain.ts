import { checkOptions, optionalText } from '../model/call-arguments.js';
import { writeAgainIfUnknown } from '../store/db.js';
import { checkBlueprintName } from './authorizations.js';
import type { BrokerContext } from './context.js';
import type { Broker, DrainResult } from './types.js';

/**
 * `broker.drainBlueprint` and `broker.resumeBlueprint`: operational state stored in the
 * database, so that every broker of it sees it (unlike `enabled: false`, which is one
 * broker's configuration). A change is one transaction: the blueprint's state row, its
 * log entry, and the wake-ups it implies (a drain: the workers of its idle resources, each
 * of which releases its own; a resume: the best waiting lease of its types, and the warm
 * pool's top-up). The
 * statements that take a resource check the state themselves, so no lease gets onto a
 * draining blueprint however the allocator's reads race with the drain.
 */
export function drainCalls(ctx: BrokerContext, live: <T>(call: () => Promise<T>) => Promise<T>): Pick<Broker, 'drainBlueprint' | 'resumeBlueprint'> {
  const { store } = ctx;
  const change = (call: string, draining: boolean) => (blueprint: string, options?: { author?: string }) =>
    live(async (): Promise<DrainResult> => {
      const name = checkBlueprintName(ctx, blueprint);
      const author = optionalText(checkOptions(options, ['author'], { call }).author, 'author') ?? null;
      // Idempotent: written again after a lost outcome, it sets the same state.
      const result = await writeAgainIfUnknown(() =>
        store.unit(async (u) => {
          const { wasDraining, idle } = await store.setDraining(u, name, draining, author);
          if (draining) {
            if (!wasDraining) await store.log(u, { type: 'blueprint.draining', data: { blueprint: name, idle: idle.length, author }, blueprint: name });
          } else if (wasDraining) {
            await store.log(u, { type: 'blueprint.resumed', data: { blueprint: name, author }, blueprint: name });
            const known = ctx.settings.blueprints.get(name);
            const types = known ? [known.type] : await store.typesOfBlueprint(name, u.sql);
            // The best waiter looks now; if it allocates, it passes the wake on (the allocator's chain).
            if (types.length > 0) await store.wakeNextWaiting(u, types, [name]);
          }
          return { blueprint: name, draining, changed: wasDraining !== draining, idleResources: idle };
        }),
      );
      // A resumed warm pool fills up again now (other brokers on their next sweep).
      if (!draining) ctx.engine?.topUpWarmPools();
      return result;
    });
  return { drainBlueprint: change('drainBlueprint', true), resumeBlueprint: change('resumeBlueprint', false) };
}
