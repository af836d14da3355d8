import { ValidationError } from '../errors/validation-error.js';
import { checkAuthorizationState, checkOwnerPattern, type AuthorizationRecord, type AuthorizationState } from '../model/authorizations.js';
import { checkFilter, checkOptions, optionalText } from '../model/call-arguments.js';
import { writeAgainIfUnknown } from '../store/db.js';
import { BLUEPRINT_NAME } from '../values.js';
import type { BrokerContext } from './context.js';
import type { AuthorizationQuery, Broker } from './types.js';

/** A blueprint name: well formed, and one of this broker's blueprints when it has any (a broker of the command line has none). */
export function checkBlueprintName(ctx: BrokerContext, value: unknown, field = 'blueprint'): string {
  if (typeof value !== 'string' || !BLUEPRINT_NAME.test(value)) throw new ValidationError(field, `must be a blueprint name matching ${BLUEPRINT_NAME} (got ${JSON.stringify(value)})`);
  const known = ctx.settings.blueprints;
  if (known.size > 0 && !known.has(value)) throw new ValidationError(field, `unknown blueprint "${value}" (known: ${[...known.keys()].join(', ')})`);
  return value;
}

/**
 * `broker.authorizations`: which owners may use the blueprints that require authorization.
 * Every change is one transaction under the blueprint's authorization lock: the row, its
 * log entry, and a wake for the pending leases it concerns, so that a waiting lease
 * proceeds (or breaks, declined) at once, on whichever broker runs its worker.
 */
export function authorizationCalls(ctx: BrokerContext, live: <T>(call: () => Promise<T>) => Promise<T>): Broker['authorizations'] {
  const { store } = ctx;

  const checkBlueprint = (value: unknown) => checkBlueprintName(ctx, value);
  const checkCall = (call: string, blueprint: unknown, owner: unknown, options: unknown) => {
    const name = checkBlueprint(blueprint);
    const pattern = checkOwnerPattern(owner);
    const o = checkOptions(options, ['author'], { call });
    return { blueprint: name, pattern, author: optionalText(o.author, 'author') ?? null };
  };

  const decide = (call: string, state: Exclude<AuthorizationState, 'requested'>) => (blueprint: string, owner: string, options?: { author?: string }) =>
    live(async () => {
      const a = checkCall(call, blueprint, owner, options);
      const type = ctx.settings.blueprints.get(a.blueprint)?.type ?? null;
      // Idempotent: written again after a lost outcome, it finds the state set and changes nothing.
      return writeAgainIfUnknown(() =>
        store.unit(async (u): Promise<AuthorizationRecord> => {
          await store.lockAuthorizations(u, a.blueprint);
          const before = await store.authorizationRow(u, a.blueprint, a.pattern);
          const changed = await store.setAuthorization(u, a.blueprint, a.pattern, state, a.author);
          if (!changed) return before!;
          await store.log(u, { type: `authorization.${state}`, data: { blueprint: a.blueprint, owner: a.pattern, from: before?.state ?? null, author: a.author }, blueprint: a.blueprint });
          await store.wakeForAuthorization(u, a.blueprint, a.pattern, type);
          return changed;
        }),
      );
    });

  return {
    request: (blueprint, owner, options) =>
      live(async () => {
        const a = checkCall('authorizations.request', blueprint, owner, options);
        return writeAgainIfUnknown(() =>
          store.unit(async (u) => {
            const { record, created } = await store.requestAuthorization(u, a.blueprint, a.pattern, a.author);
            if (created) await store.log(u, { type: 'authorization.requested', data: { blueprint: a.blueprint, owner: a.pattern, lease: null, author: a.author }, blueprint: a.blueprint });
            return record;
          }),
        );
      }),
    authorize: decide('authorizations.authorize', 'authorized'),
    decline: decide('authorizations.decline', 'declined'),
    list: (query) =>
      live(async () => {
        const q = checkFilter(query, { call: 'authorizations.list', field: 'query' }, ['blueprint', 'owner'], ['state']) as AuthorizationQuery;
        if (q.blueprint !== undefined) checkBlueprint(q.blueprint);
        const state = q.state === undefined ? undefined : checkAuthorizationState(q.state);
        return store.listAuthorizations({ blueprint: q.blueprint, owner: q.owner, state });
      }),
  };
}
