import type { Blueprint } from '../blueprint/contract.js';
import { crashPoint } from '../engine/crash-points.js';
import { submitLease, type LeaseOrigin } from '../engine/submit.js';
import { AbortError } from '../errors/abort-error.js';
import { BrokerClosedError } from '../errors/broker-closed-error.js';
import { CommitOutcomeUnknownError } from '../errors/commit-outcome-unknown-error.js';
import { LeaseBrokenError } from '../errors/lease-broken-error.js';
import { LeaseTimeoutError } from '../errors/lease-timeout-error.js';
import { SlipwayError } from '../errors/slipway-error.js';
import { UnknownTypeError } from '../errors/unknown-type-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { checkOptions, optionalSignal } from '../model/call-arguments.js';
import type { Lease, LeaseHandle } from '../model/lease.js';
import { normalizeSpec, type LeaseSpec, type NormalizedSpec } from '../model/spec.js';
import { LEASE_STATE_FLAGS } from '../model/states.js';
import type { LeaseRow, LeaseWithResource } from '../store/store.js';
import { humanDuration, parseDuration, type DurationInput } from '../time.js';
import { writeCommand } from './commands.js';
import type { BrokerContext } from './context.js';
import { leaseObject } from './lease-object.js';
import { extendLease, keepAlive } from './renewal.js';
import { releaseAndWait, SETTLED, watchLease } from './waiter.js';

/**
 * Runs a public call: refused at once on a closed broker, and an error it meets because
 * the broker closed while it ran (the database went away under it) is reported as
 * BrokerClosedError, with that error as the cause.
 */
export function liveCall(ctx: BrokerContext) {
  return async <T>(call: () => Promise<T>): Promise<T> => {
    if (ctx.closed) throw new BrokerClosedError();
    try {
      return await call();
    } catch (error) {
      // A commit cut off by the close is the close's doing too.
      if (ctx.closed && (!(error instanceof SlipwayError) || error instanceof CommitOutcomeUnknownError)) throw new BrokerClosedError({ cause: error });
      throw error;
    }
  };
}

function checkSpecAgainstRegistry(blueprints: Map<string, Blueprint<any, any, any>>, spec: NormalizedSpec) {
  if (blueprints.size === 0) return;
  const ofType = [...blueprints.values()].filter((b) => b.type === spec.type);
  if (ofType.length === 0) throw new UnknownTypeError(spec.type, [...new Set([...blueprints.values()].map((b) => b.type))]);
  for (const name of spec.blueprints ?? []) {
    const b = blueprints.get(name);
    if (!b) throw new ValidationError('spec.blueprints', `unknown blueprint "${name}" (known: ${[...blueprints.keys()].join(', ')})`);
    if (b.type !== spec.type) throw new ValidationError('spec.blueprints', `blueprint "${name}" serves type "${b.type}", not "${spec.type}"`);
    // The lease is typed by the object given: it must be the one that will serve it.
    const given = spec.blueprintObjects.get(name);
    if (given && given !== b) throw new ValidationError('spec.blueprints', `the blueprint "${name}" given is not the one this broker was created with (pass that object, or its name)`);
  }
}

/** Records a lease of this broker's API or of a resource's hook (a child lease): refused on a closed broker or for a type no blueprint serves. */
export async function recordLease(ctx: BrokerContext, spec: NormalizedSpec, origin: LeaseOrigin = {}, atOnce = false, onId?: (id: string) => void): Promise<LeaseRow> {
  if (ctx.closed) throw new BrokerClosedError();
  checkSpecAgainstRegistry(ctx.settings.blueprints, spec);
  return submitLease(ctx.runtime, ctx.engine, spec, origin, atOnce, onId);
}

/**
 * Waits until the lease is active and hands it over. `justRequested`: the lease was
 * recorded by this call's caller, and its row as recorded is the one to start from (no
 * read); if it was recorded active already, it is handed over at once.
 */
export async function whenActive(ctx: BrokerContext, id: string, opts: { timeout?: DurationInput; signal?: AbortSignal; justRequested?: LeaseRow } = {}): Promise<Lease> {
  const { store } = ctx;
  const { clock } = ctx.settings;
  const timeout = opts.timeout === undefined ? undefined : parseDuration(opts.timeout, 'timeout');
  optionalSignal(opts.signal, 'signal');
  const giveUp = () => writeCommand(ctx, 'lease', id, 'release', { reason: 'not active in time' }, 'acquire').catch(() => undefined);
  const timeoutText = (l: LeaseRow) => humanDuration(timeout ?? l.deadlineAt!.diff(l.createdAt));
  const settle = (l: LeaseWithResource): { value: LeaseWithResource } | { error: Error } | null => {
    if (l.status === 'active') {
      // Activated just before its expiry and read after it: its worker releases it now; never hand it over.
      if (l.expiresAt && l.expiresAt <= clock.now()) return { error: new LeaseBrokenError(id, `it expired at ${l.expiresAt.toISO()} as it became active`) };
      return { value: l };
    }
    if (l.status === 'broken' || (l.status === 'destroyed' && l.brokenReason)) return { error: new LeaseBrokenError(id, l.brokenReason ?? 'broken', { cause: l.brokenReason }) };
    if (l.status === 'released' || l.status === 'destroyed') {
      // Its own worker released it at its deadline: the same error as this watcher's own timer gives.
      if (l.endCause === 'timeout') return { error: new LeaseTimeoutError(id, timeoutText(l), { released: true, lastFailure: l.lastFailure }) };
      if (l.endCause === 'expired') return { error: new LeaseBrokenError(id, `it expired at ${l.expiresAt?.toISO()} before it became active`) };
      return { error: new LeaseBrokenError(id, 'it was released before it became active') };
    }
    return null;
  };
  const recorded = opts.justRequested;
  const atOnce = recorded?.status === 'active' && recorded.resource ? settle({ ...recorded, resource: recorded.resource }) : null;
  if (atOnce && 'error' in atOnce) throw atOnce.error;
  const row = atOnce
    ? atOnce.value
    : await watchLease<LeaseWithResource, LeaseWithResource>(ctx, id, settle, {
      timeout,
      signal: opts.signal,
      onTimeout: async () => {
        await giveUp();
        // What the lease is now: released already (by its worker at the same deadline), or only asked to be.
        const now = await store.lease(id).catch(() => null);
        const released = !!now && !LEASE_STATE_FLAGS[now.status].live;
        return new LeaseTimeoutError(id, humanDuration(timeout!), { released, lastFailure: now?.lastFailure ?? null });
      },
      onAbort: () => (void giveUp(), new AbortError(`lease ${id}: aborted before it became active`, { cause: opts.signal?.reason })),
      read: (leaseId) => store.leaseWithResource(leaseId),
      // The worker that activated the lease in this process had both rows.
      fromEvent: (e) => (e.row && e.resource ? { ...(e.row as LeaseRow), resource: e.resource } : null),
      decisive: SETTLED,
      skipFirstRead: recorded !== undefined,
    });
  return leaseObject(ctx, row, row.resource);
}

/** Records a lease request; the caller watches it. */
async function request(ctx: BrokerContext, spec: LeaseSpec, atOnce = false, onId?: (id: string) => void) {
  const normalized = normalizeSpec(spec, { now: ctx.settings.clock.now() });
  // No acquire timeout and no abort signal: hooks run inline cannot honour either.
  const row = await recordLease(ctx, normalized, {}, atOnce && !normalized.timeout && !normalized.signal, onId);
  crashPoint('acquire.recorded');
  const activeOptions = (opts: { timeout?: DurationInput; signal?: AbortSignal }) => ({ timeout: opts.timeout ?? normalized.timeout ?? undefined, signal: opts.signal ?? normalized.signal });
  // From the request on: a lease that waits for capacity longer than its ttl is renewed too.
  const stopKeepAlive = normalized.keepAlive ? keepAlive(ctx, row.id, normalized.ttl!, normalized.keepAlive) : () => undefined;
  return { id: row.id, row, activeOptions, stopKeepAlive };
}

/** `whenActive`, and the keepalive stopped when the lease will never be active. */
async function activeOrStop(ctx: BrokerContext, id: string, stopKeepAlive: () => void, opts: Parameters<typeof whenActive>[2]): Promise<Lease> {
  try {
    return await whenActive(ctx, id, opts);
  } catch (error) {
    if (!(error instanceof BrokerClosedError)) stopKeepAlive();
    throw error;
  }
}

export async function requestLease(ctx: BrokerContext, spec: LeaseSpec): Promise<LeaseHandle> {
  const live = liveCall(ctx);
  const { id, activeOptions, stopKeepAlive } = await request(ctx, spec);
  let gone = false;
  const release = async (opts?: { wait?: boolean }) => {
    await releaseAndWait(ctx, id, opts);
    if (opts?.wait !== false) gone = true;
  };
  return {
    id,
    whenActive: (options) => live(() => activeOrStop(ctx, id, stopKeepAlive, activeOptions(checkOptions(options, ['timeout', 'signal'], { call: 'whenActive' }) as { timeout?: DurationInput; signal?: AbortSignal }))),
    status: () => live(async () => (await ctx.store.lease(id))!.status),
    extend: (renewal, options) => live(() => extendLease(ctx, id, renewal, options)),
    release: (opts) => live(() => release(opts)),
    // Seen destroyed already: nothing to release, also after close.
    [Symbol.asyncDispose]: () => (gone ? Promise.resolve() : live(() => release())),
  };
}

/**
 * `acquire()`: one implementation for both overloads; the typed one only narrows what the
 * caller sees. `onId` hears the lease's id once chosen, before its hooks run (tracing).
 */
export async function acquire(ctx: BrokerContext, spec: LeaseSpec, onId?: (id: string) => void): Promise<Lease> {
  const { id, row, activeOptions, stopKeepAlive } = await request(ctx, spec, true, onId);
  // Nothing can have moved the lease since its insert returned: no statement completes
  // between here and the watch starting, so the watch skips its first read.
  return activeOrStop(ctx, id, stopKeepAlive, { ...activeOptions({}), justRequested: row });
}
