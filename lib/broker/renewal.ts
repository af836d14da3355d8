import type { DateTime, Duration } from 'luxon';
import { BrokerClosedError } from '../errors/broker-closed-error.js';
import { LeaseEndedError, type LeaseEnd } from '../errors/lease-ended-error.js';
import { NotFoundError } from '../errors/not-found-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { checkOptions, checkText, optionalBoolean, optionalText } from '../model/call-arguments.js';
import { boundedDuration, expiryTime } from '../model/spec.js';
import { isPlainObject } from '../values.js';
import { writeAgainIfUnknown } from '../store/db.js';
import type { DateTimeInput, DurationInput } from '../time.js';
import type { BrokerContext } from './context.js';
import { watchLease } from './waiter.js';

/** The statuses a lease can be renewed in: those before it leaves `active`. */
const RENEWABLE = ['pending', 'acquired', 'active'] as const;

/** The new expiry a renewal asks for, on the broker's clock; refused when it is not in the future. */
export function renewalTime(ctx: BrokerContext, renewal: unknown, field = 'renewal'): DateTime {
  const now = ctx.settings.clock.now();
  if (isPlainObject(renewal) && ('ttl' in renewal || 'until' in renewal)) {
    const keys = Object.keys(renewal);
    if (keys.length !== 1) throw new ValidationError(field, `give { ttl } or { until }, one of them (got the keys ${keys.join(', ')})`);
    if ('until' in renewal) return expiryTime(renewal.until, `${field}.until`, now);
    return now.plus(boundedDuration(renewal.ttl, `${field}.ttl`));
  }
  // A bare duration is a ttl: `lease.extend('PT30M')`, `lease.extend({ minutes: 30 })`.
  return now.plus(boundedDuration(renewal, field));
}

/**
 * Writes an `extend` command for the lease's worker (the single writer of its row), and by
 * default waits until the worker has applied it. Resolves with the new expiry. Refused with
 * LeaseEndedError when the lease is released, broken or destroyed, or expired before the
 * worker got to the command; with NotFoundError when there is no such lease.
 */
export async function extendLease(ctx: BrokerContext, id: unknown, renewal: unknown, options?: unknown): Promise<DateTime> {
  checkText(id, 'leaseId');
  const until = renewalTime(ctx, renewal);
  const o = checkOptions(options, ['author', 'wait'], { call: 'extendLease' });
  const author = optionalText(o.author, 'author') ?? null;
  const wait = optionalBoolean(o.wait, 'wait') ?? true;
  return extendAt(ctx, id as string, until, author, wait);
}

/** `extendLease` with its arguments checked. */
export async function extendAt(ctx: BrokerContext, id: string, until: DateTime, author: string | null, wait: boolean): Promise<DateTime> {
  if (ctx.closed) throw new BrokerClosedError();
  const { store } = ctx;
  // Written again after a lost outcome: if both landed, both apply the same expiry.
  const { status, commandId } = await writeAgainIfUnknown(() => store.single((u) => store.writeCommand(u, 'lease', id, 'extend', { until: until.toUTC().toISO()! }, author, RENEWABLE)));
  if (status === null) throw new NotFoundError('lease', id);
  if (commandId === null) throw new LeaseEndedError(id, status as LeaseEnd);
  if (!wait) return until;
  return watchLease<DateTime, { consumedAt: DateTime | null; outcome: string | null }>(
    ctx,
    id,
    (c) => {
      if (!c.consumedAt) return null;
      if (c.outcome === 'applied') return { value: until };
      const ended = /^no effect: lease is already (\w+)/.exec(c.outcome ?? '');
      if (ended) return { error: new LeaseEndedError(id, ended[1] as LeaseEnd) };
      if (c.outcome?.startsWith('rejected: lease expired')) return { error: new LeaseEndedError(id, 'expired') };
      return { error: new ValidationError('until', `${until.toUTC().toISO()} was refused by the lease's worker (${c.outcome})`) };
    },
    { read: () => store.commandOutcome(commandId) },
  );
}

/**
 * A holder's keepalive: every `every`, on the broker's clock, the lease is renewed to a
 * `ttl` from then. Each renewal is written without waiting for its worker (a worker busy
 * with a long hook applies them in order afterwards), one at a time. It stops when the
 * lease has ended, when the broker closes, or when the returned function is called. A
 * renewal that fails for another reason (the database is away) is logged and tried again
 * at the next tick.
 */
export function keepAlive(ctx: BrokerContext, id: string, ttl: Duration, every: Duration): () => void {
  const { clock, logger } = ctx.settings;
  let stopped = false;
  let cancel = () => undefined as void;
  const stop = () => {
    stopped = true;
    cancel();
    ctx.keepAlives.delete(id);
  };
  const tick = async () => {
    if (stopped || ctx.closed) return stop();
    try {
      await extendAt(ctx, id, clock.now().plus(ttl), 'keepalive', false);
    } catch (error) {
      if (error instanceof LeaseEndedError || error instanceof NotFoundError || error instanceof BrokerClosedError || ctx.closed) return stop();
      logger.warn({ err: error, lease: id }, `slipway: could not renew lease ${id}; trying again in ${every.toHuman()}`);
    }
    if (!stopped) cancel = clock.schedule(clock.now().plus(every), () => void tick());
  };
  cancel = clock.schedule(clock.now().plus(every), () => void tick());
  ctx.keepAlives.set(id, stop);
  return stop;
}
