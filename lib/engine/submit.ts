import { after } from '../time.js';
import type { NormalizedSpec } from '../model/spec.js';
import { unlessOutcomeUnknown, writeAgainIfUnknown } from '../store/db.js';
import type { LeaseRow, NewLease } from '../store/store.js';
import { acquireAtOnce } from './allocator.js';
import type { Engine } from './engine.js';
import type { HookFailure, Runtime } from './runtime.js';

/** Where a lease comes from when a resource takes it as a child (`ctx.acquireLease`). */
export interface LeaseOrigin {
  parentResourceId?: string;
  childKey?: string;
}

/**
 * Records a lease. With `atOnce` (only `acquire()`, whose caller waits for the hooks
 * anyway), a free resource with nobody waiting is taken here, in this call: its hooks
 * run inline and the lease is created acquired (active when its blueprint has no
 * `activateLease`; the row returned then carries the resource). `requestLease()` and child leases only
 * record, so that they return as soon as the row exists, however slow the hooks are.
 * `engine` is null for a broker without workers: the lease then waits for another's.
 * `onId` hears the lease's id as soon as it is chosen, before any hook of it runs.
 */
export async function submitLease(rt: Runtime, engine: Engine | null, spec: NormalizedSpec, origin: LeaseOrigin = {}, atOnce = false, onId?: (id: string) => void): Promise<LeaseRow> {
  const { store, clock } = rt;
  const id = store.newId('lease');
  // Before any hook runs inline: a tracer files the hooks of this lease under its request.
  onId?.(id);
  // This broker's workers take the new lease at once when they have a free slot: it is
  // created claimed by them, and its first pass needs no claim and no poll.
  const claim = engine?.reserve() ?? null;
  const now = clock.now();
  const lease: NewLease = {
    id,
    type: spec.type,
    attributes: spec.attributes,
    blueprints: spec.blueprints,
    owner: spec.owner,
    priority: spec.priority,
    expiresAt: spec.ttl ? after(now, spec.ttl) : spec.until,
    deadlineAt: spec.timeout ? after(now, spec.timeout) : null,
    parentResourceId: origin.parentResourceId ?? null,
    childKey: origin.childKey ?? null,
  };
  const insert = () => store.single((u) => store.insertLease(u, lease, claim));
  let row: LeaseRow | null;
  let trouble: HookFailure | undefined;
  try {
    // A free resource and nobody waiting: the lease is created acquired on it.
    const fast = claim && atOnce ? await acquireAtOnce(rt, lease, claim).catch(unlessOutcomeUnknown) : null;
    if (fast && 'lease' in fast) {
      // Created active (no activateLease): unclaimed, it needs no pass before its expiry.
      if (fast.lease.status === 'active') engine!.unreserve(fast.lease.expiresAt);
      else engine!.adopt('lease', id, fast);
      return { ...fast.lease, resource: fast.resource };
    }
    trouble = fast ?? undefined;
    // Idempotent per id: if the fast path or a first insert whose outcome was lost
    // committed the lease, this inserts nothing and the lease is read instead.
    row = (await writeAgainIfUnknown(insert)) ?? (await store.lease(id));
  } catch (error) {
    if (claim) engine!.unreserve();
    throw error;
  }
  if (!row) {
    if (claim) engine!.unreserve();
    throw new Error(`lease ${id} was not recorded`);
  }
  if (claim) engine!.adopt('lease', id, { lease: row, trouble });
  return row;
}
