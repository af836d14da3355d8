import { after } from '../time.js';
import type { DateTime } from 'luxon';
import type { Blueprint, LeaseView, ResourceView } from '../blueprint/contract.js';
import { normalizeTimeouts, type HookName } from '../blueprint/timeouts.js';
import { HookError } from '../errors/hook-error.js';
import { HookTimeoutError } from '../errors/hook-timeout-error.js';
import { hookCrashPoint } from './crash-points.js';
import { RetryLater } from '../errors/retry-later.js';
import { ValidationError } from '../errors/validation-error.js';
import { LeaseNotActiveError } from '../errors/lease-not-active-error.js';
import { assertJson, type JsonObject } from '../model/spec.js';
import { isPlainObject } from '../values.js';
import type { LeaseRow, LogInsert, ResourceRow } from '../store/store.js';
import type { Lease } from '../model/lease.js';
import { at, backoffDelay, type HookResult, type Outcome, type Runtime } from './runtime.js';

export type { HookCall, HookResult } from './runtime.js';

/** Thrown inside a hook by `ctx.acquireLease` while the child lease is not active yet: the object parks until the child moves. */
export class WaitingForChild extends Error {
  constructor(readonly childId: string) {
    super(`waiting for child lease ${childId}`);
  }
}

/**
 * Calls one blueprint hook, with no transaction open, and classifies what happened.
 * Missing optional hooks behave as their documented default. A hook that has not
 * settled within its timeout (the blueprint's `timeouts`, on the broker's clock) is a
 * failure: its `ctx.signal` is aborted and whatever it does later is ignored.
 */
/** Whether the blueprint defines this hook (a missing one answers its default at once). */
export function hasHook(blueprint: Blueprint<any, any, any>, hook: string): boolean {
  return typeof (blueprint.implementation as unknown as Record<string, unknown>)[hook] === 'function';
}

export async function callHook<T>(rt: Runtime, blueprint: Blueprint<any, any, any>, hook: string, ctx: object, fallback: T, attempt = 1): Promise<HookResult<T>> {
  const fn = (blueprint.implementation as unknown as Record<string, unknown>)[hook];
  if (typeof fn !== 'function') return { ok: true, value: fallback };
  const observe = rt.hookObserver?.();
  if (!observe) return runHook(rt, blueprint, hook, fn, ctx, fallback, attempt);
  const started = rt.clock.now();
  const result = await runHook(rt, blueprint, hook, fn, ctx, fallback, attempt);
  const outcome = result.ok ? 'ok' : result.kind;
  const code = !result.ok && result.kind === 'failed' ? errorCode(result.error) : null;
  const error = !result.ok && result.kind === 'failed' ? result.error : null;
  const { lease, resource } = ctx as { lease?: { id: string } | null; resource?: { id: string } | null };
  observe({ blueprint: blueprint.name, hook, outcome, durationMs: Math.max(0, rt.clock.now().toMillis() - started.toMillis()), code, lease: lease?.id ?? null, resource: resource?.id ?? null, error });
  return result;
}

/** `callHook` once the hook is known to exist: the call itself, raced against its timeout. */
async function runHook<T>(rt: Runtime, blueprint: Blueprint<any, any, any>, hook: string, fn: unknown, ctx: object, fallback: T, attempt: number): Promise<HookResult<T>> {
  const timeout = blueprint.timeouts?.[hook as HookName] ?? normalizeTimeouts(undefined)[hook as HookName];
  // ctx.signal is made when the hook first reads it: most hooks never do, and
  // AbortSignal.any is among the costliest steps of a hook call.
  let deadline: AbortController | undefined;
  let signal: AbortSignal | undefined;
  const hookSignal = () => (signal ??= AbortSignal.any([rt.signal, (deadline ??= new AbortController()).signal]));
  let cancel: (() => void) | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    cancel = rt.clock.schedule(after(rt.clock.now(), timeout), () => {
      const error = new HookTimeoutError(blueprint.name, hook, timeout);
      // Made now if the hook has not read it yet: a read after the timeout finds it aborted.
      (deadline ??= new AbortController()).abort(error);
      reject(error);
    });
  });
  try {
    hookCrashPoint(hook, 'before');
    const hookCtx = {
      ...ctx,
      get signal() {
        return hookSignal();
      },
    };
    const running = Promise.resolve().then(() => (fn as (ctx: object) => unknown).call(blueprint.implementation, hookCtx));
    // A hook that settles after its timeout must not become an unhandled rejection.
    running.catch(() => undefined);
    const value = await Promise.race([running, timedOut]);
    hookCrashPoint(hook, 'after');
    checkReturned(hook, value);
    return { ok: true, value: (value ?? fallback) as T };
  } catch (thrown) {
    if (isA(thrown, WaitingForChild)) return { ok: false, kind: 'child', childId: thrown.childId };
    if (isA(thrown, RetryLater)) {
      const delay = thrown.after ?? backoffDelay(rt, attempt);
      return { ok: false, kind: 'retry', at: rt.clock.now().plus(delay), reason: thrown.message };
    }
    const errorClass = thrownClass(thrown);
    if (errorClass) {
      const args = errorClass === 'RetryLater' ? 'reason, after' : 'message';
      return { ok: false, kind: 'failed', error: new HookError(blueprint.name, hook, new MalformedHookResult(`threw the class ${errorClass} itself, not an instance: write throw new ${errorClass}(${args})`)) };
    }
    return { ok: false, kind: 'failed', error: new HookError(blueprint.name, hook, thrown) };
  } finally {
    cancel?.();
  }
}

/**
 * The name of an error class thrown as it is (`throw RetryLater` instead of `throw new
 * RetryLater(...)`), or null. That is a mistake to name, not a value to describe: it would
 * read as `[class RetryLater extends SlipwayError]`, and break the object with no hint why.
 */
export function thrownClass(thrown: unknown): string | null {
  try {
    if (typeof thrown === 'function' && (thrown === Error || thrown.prototype instanceof Error)) return thrown.name || 'Error';
  } catch {
    // a revoked Proxy, or a prototype getter that throws: not a class of ours to name
  }
  return null;
}

/** `instanceof` that a hostile thrown value cannot make throw (a revoked Proxy throws on every prototype lookup). */
function isA<C extends abstract new (...args: any[]) => unknown>(value: unknown, type: C): value is InstanceType<C> {
  try {
    return value instanceof type;
  } catch {
    return false;
  }
}

const QUESTIONS = new Set(['canEverAllocate', 'canAllocate', 'canAcquireLease']);
const OUTCOMES = new Set(['allocateResource', 'activateResource', 'acquireLease', 'activateLease']);

/** A hook's return value must have its documented shape; anything else is the hook's failure, not the broker's. */
function checkReturned(hook: string, value: unknown) {
  const bad = (what: string) => {
    throw new MalformedHookResult(`returned ${what}`);
  };
  if (value === undefined || value === null) return;
  if (QUESTIONS.has(hook)) {
    if (typeof value !== 'boolean') bad(`a ${describeType(value)} where a boolean was expected`);
    return;
  }
  if (!OUTCOMES.has(hook)) return; // release and destroy hooks: the value is ignored
  if (!isPlainObject(value)) {
    bad(`a ${describeType(value)} where nothing or { attributes } was expected`);
  }
  const extra = Object.keys(value as object).filter((k) => k !== 'attributes');
  if (extra.length > 0) bad(`unknown key(s) ${extra.join(', ')} (only attributes is allowed)`);
  const attributes = (value as { attributes?: unknown }).attributes;
  if (attributes === undefined) return;
  if (!isPlainObject(attributes)) bad('attributes that are not a plain object');
  try {
    assertJson(attributes, 'attributes');
  } catch (error) {
    bad(`attributes that are not JSON (${(error as Error).message})`);
  }
}

function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return typeof value;
}

/** What a hook returned (or threw: an error class, not an instance) does not have the shape its contract gives. */
export class MalformedHookResult extends Error {
  readonly code = 'HOOK_MALFORMED_RESULT';
  constructor(message: string) {
    super(message);
    this.name = 'MalformedHookResult';
  }
}

export function errorCode(error: HookError): string | null {
  try {
    const cause = error.cause as { code?: unknown } | undefined;
    return cause && typeof cause === 'object' && typeof cause.code === 'string' ? cause.code : null;
  } catch {
    return null; // a code getter that throws, or a revoked Proxy
  }
}

/** The `hook.failure` entry of a hook that failed for good (no retry). */
export function hookFailureLog(error: HookError, target: { lease?: string; resource?: string }): LogInsert<'hook.failure'> {
  return { type: 'hook.failure', data: { hook: error.hook, error: error.reason, code: errorCode(error), retry: false }, blueprint: error.blueprint, ...target };
}

/**
 * The phase an object records once the outcome of its hook was a retry (a RetryLater, or a
 * destroy hook's failure): the hook's intent was seen through, so its next call is no
 * resume. `ctx.resume` is true only after a call whose outcome was never recorded (a crash,
 * a close, a suspension for a child lease, a result whose slot locks could not be taken).
 */
export const retryPhase = (phase: 'allocate' | 'activate' | 'destroy') => `${phase}:retry` as const;

/** Whether the object's destroy phase has begun (its first hook was called), with or without a recorded retry. */
export const inDestroyPhase = (phase: string | null) => phase === 'destroy' || phase === retryPhase('destroy');

/**
 * The log entry of a destroy hook (`destroyLease`, `destroyResource`) that is tried again at
 * `retryAt`: `hook.retry-later` when it asked to be, else `hook.failure` with the retry.
 */
export function destroyRetryLog(
  result: Exclude<HookResult<unknown>, { ok: true }>,
  hook: string,
  retryAt: DateTime,
  attempt: number,
  target: { lease?: string; resource: string; blueprint: string },
): LogInsert<'hook.failure'> | LogInsert<'hook.retry-later'> {
  if (result.kind === 'retry') return { type: 'hook.retry-later', data: { hook, reason: result.reason, retryAt: retryAt.toISO()! }, ...target };
  const error = result.kind === 'failed' ? result.error.reason : `waiting for child lease ${result.childId}`;
  const code = result.kind === 'failed' ? errorCode(result.error) : null;
  return { type: 'hook.failure', data: { hook, error, code, retry: true, attempt, retryAt: retryAt.toISO() }, ...target };
}

/**
 * A destroy hook that did not succeed (it threw, timed out or asked to retry): logged
 * (`destroyRetryLog`), its outcome recorded so that the next call is a new try and not a
 * resume, and retried at its `RetryLater` time or after the broker's capped backoff for
 * this attempt. A destroy is never given up on.
 */
export async function retryDestroy(
  rt: Runtime,
  hook: 'destroyLease' | 'destroyResource',
  failure: Exclude<HookResult<unknown>, { ok: true }>,
  attempt: number,
  object: { kind: 'lease' | 'resource'; id: string; status: string },
  target: { lease?: string; resource: string; blueprint: string },
): Promise<Outcome> {
  const retryAt = failure.kind === 'retry' ? failure.at : rt.clock.now().plus(backoffDelay(rt, attempt));
  await rt.store.unit(async (u) => {
    await rt.store.log(u, destroyRetryLog(failure, hook, retryAt, attempt, target));
    await rt.store.update(u, object.kind, object.id, object.status, { phase: retryPhase('destroy') });
  });
  return at(retryAt, attempt);
}

export function resourceView(r: ResourceRow): ResourceView {
  return { id: r.id, type: r.type, blueprint: r.blueprint, status: r.status, attributes: structuredClone(r.attributes), leaseCount: r.leaseCount };
}

/** What a hook's view of a lease is made from: a lease row, or a lease about to be written. */
export type LeaseViewSource = Pick<LeaseRow, 'id' | 'type' | 'attributes' | 'owner' | 'expiresAt'>;

export function leaseView(l: LeaseViewSource): LeaseView {
  return { id: l.id, type: l.type, attributes: structuredClone(l.attributes), owner: l.owner, expiresAt: l.expiresAt };
}

/** The part of every hook context that does not depend on the object. */
export function baseContext(rt: Runtime, blueprint: Blueprint<any, any, any>, target: { lease?: string; resource?: string }, resume: boolean) {
  return {
    blueprint: { name: blueprint.name, type: blueprint.type, config: blueprint.config },
    clock: rt.clock,
    signal: rt.signal,
    resume,
    // Not async: a refused call throws at once, so it fails the hook (and reaches its
    // hook.failure log) even when the hook does not await it.
    log: (type: string, data: JsonObject = {}): Promise<void> => {
      checkLogCall(blueprint, type, data);
      return rt.store.single(async (u) => {
        await rt.store.log(u, { type, data, blueprint: blueprint.name, lease: target.lease ?? null, resource: target.resource ?? null });
      });
    },
    // Only resource-bound contexts declare it; elsewhere there is no resource to ask.
    childLease: (key: string): Promise<Lease> =>
      target.resource === undefined ? Promise.reject(new ValidationError('childLease', 'this hook is bound to no resource')) : activeChildLease(rt, target.resource, key),
  };
}

/** `ctx.childLease(key)`: the active child lease a resource took with `ctx.acquireLease(spec, { key })`. */
async function activeChildLease(rt: Runtime, resourceId: string, key: string): Promise<Lease> {
  if (typeof key !== 'string' || key === '') throw new ValidationError('key', 'must be a non-empty string naming a child lease');
  const child = await rt.store.childLease(resourceId, key);
  if (!child) throw new ValidationError('key', `resource ${resourceId} has no child lease "${key}"`);
  if (child.status !== 'active') throw new LeaseNotActiveError(child.id, child.status === 'broken' ? 'broken' : 'released');
  return rt.leaseObject(child);
}

/**
 * `ctx.log(type, data)` writes only what can be rendered: a type the blueprint declares in
 * `logTypes` (or the built-in `blueprint.note`, whose data is `{ message }`), with data
 * that is a JSON object. Anything else is a ValidationError on `ctx.log`.
 */
function checkLogCall(blueprint: Blueprint<any, any, any>, type: unknown, data: unknown): void {
  const declared = blueprint.implementation.logTypes ?? {};
  if (typeof type !== 'string' || !(type === 'blueprint.note' || Object.hasOwn(declared, type))) {
    const known = [...Object.keys(declared), 'blueprint.note'].map((t) => JSON.stringify(t)).join(', ');
    throw new ValidationError(
      'ctx.log',
      `log type ${typeof type === 'string' ? JSON.stringify(type) : `of type ${typeof type}`} is not declared by blueprint "${blueprint.name}": add a renderer for it to its logTypes (declared: ${known})`,
    );
  }
  if (!isPlainObject(data)) throw new ValidationError('ctx.log', `the data of a ${type} entry must be a JSON object like { path: '/tmp/x' } (got ${describeType(data)})`);
  assertJson(data, `ctx.log data of ${type}`);
  if (type === 'blueprint.note' && typeof data.message !== 'string') throw new ValidationError('ctx.log', "a blueprint.note entry needs data { message: string }");
}
