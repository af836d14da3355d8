import { baseContext, leaseView, resourceView } from '../engine/hooks.js';
import { LeaseBrokenError } from '../errors/lease-broken-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { leaseSignal } from './lease-signal.js';
import type { Lease } from '../model/lease.js';
import type { LeaseRow, ResourceRow } from '../store/store.js';
import type { BrokerContext } from './context.js';
import { extendLease } from './renewal.js';
import { releaseAndWait } from './waiter.js';

/** The object `acquire()` and `whenActive()` hand over, and a child lease's owner gets: the lease, its interfaces, its signal, its release. */
export async function leaseObject(ctx: BrokerContext, row: LeaseRow, known?: ResourceRow | null): Promise<Lease> {
  const { store, runtime, leaseWatchers, leaseHints, abort } = ctx;
  const { clock, sweepInterval, blueprints } = ctx.settings;
  const resource = known ?? (row.resourceId ? await store.resource(row.resourceId) : null);
  if (!resource) throw new LeaseBrokenError(row.id, 'lease has no resource');
  const blueprint = blueprints.get(resource.blueprint);
  const signal = leaseSignal({ clock, store, changes: leaseWatchers, hints: leaseHints, recheck: sweepInterval, closed: abort.signal }, row);
  const lease: Lease = {
    id: row.id,
    type: row.type,
    status: row.status,
    attributes: row.attributes,
    owner: row.owner,
    get expiresAt() {
      return expiresAt;
    },
    resource: { id: resource.id, type: resource.type, blueprint: resource.blueprint, attributes: resource.attributes },
    get signal() {
      return signal.get();
    },
    interface(name: string): any {
      const offers = blueprint?.implementation.interfaces ?? {};
      // Own names only: `constructor` or `__proto__` must not find Object's.
      const factory = typeof name === 'string' && Object.hasOwn(offers, name) ? offers[name] : undefined;
      if (!factory) {
        throw new ValidationError('interface', `blueprint ${resource.blueprint} offers no "${String(name)}" interface (it offers: ${Object.keys(offers).join(', ') || 'none'})`);
      }
      return factory({
        ...baseContext(runtime, blueprint!, { lease: row.id, resource: resource.id }, false),
        lease: leaseView(row),
        resource: resourceView(resource),
        // Read when the interface needs it: an interface that never looks starts no watch.
        get signal() {
          return signal.get();
        },
      });
    },
    async extend(renewal, options) {
      const until = await extendLease(ctx, row.id, renewal, options);
      // Not waited for, the renewal may still be refused: the object keeps what it knows.
      if (options?.wait !== false) expiresAt = until;
      return until;
    },
    async release(opts) {
      await releaseAndWait(ctx, row.id, opts, resource.blueprint);
      if (opts?.wait !== false) {
        gone = true;
        signal.destroyed();
      }
    },
    // Seen destroyed already: nothing to release, also after close (`await using` after an explicit release).
    async [Symbol.asyncDispose]() {
      if (gone) return;
      await releaseAndWait(ctx, row.id, undefined, resource.blueprint);
      gone = true;
      signal.destroyed();
    },
  };
  let gone = false;
  let expiresAt = row.expiresAt;
  return lease;
}
