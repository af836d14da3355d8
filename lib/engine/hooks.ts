import type { DateTime } from 'luxon';
import type { Blueprint, LeaseView, ResourceView } from '../blueprint/contract.js';
import { HookError } from '../errors/hook-error.js';
import { RetryLater } from '../errors/retry-later.js';
import type { JsonObject } from '../model/spec.js';
import type { LeaseRow, ResourceRow } from '../store/store.js';
import { backoffDelay, type Runtime } from './runtime.js';

/** Thrown inside a hook by `ctx.acquireLease` while the child lease is not active yet: the object parks until the child moves. */
export class WaitingForChild extends Error {
  constructor(readonly childId: string) {
    super(`waiting for child lease ${childId}`);
  }
}

export type HookResult<T> =
  | { ok: true; value: T }
  | { ok: false; kind: 'retry'; at: DateTime; reason: string }
  | { ok: false; kind: 'child'; childId: string }
  | { ok: false; kind: 'failed'; error: HookError };

/**
 * Calls one blueprint hook, with no transaction open, and classifies what happened.
 * Missing optional hooks behave as their documented default.
 */
export async function callHook<T>(rt: Runtime, blueprint: Blueprint<any, any, any>, hook: string, ctx: object, fallback: T, attempt = 1): Promise<HookResult<T>> {
  const fn = (blueprint.implementation as unknown as Record<string, unknown>)[hook];
  if (typeof fn !== 'function') return { ok: true, value: fallback };
  try {
    const value = await (fn as (ctx: object) => unknown).call(blueprint.implementation, ctx);
    return { ok: true, value: (value ?? fallback) as T };
  } catch (thrown) {
    if (thrown instanceof WaitingForChild) return { ok: false, kind: 'child', childId: thrown.childId };
    if (thrown instanceof RetryLater) {
      const delay = thrown.after ?? backoffDelay(rt, attempt);
      return { ok: false, kind: 'retry', at: rt.clock.now().plus(delay), reason: thrown.message };
    }
    return { ok: false, kind: 'failed', error: new HookError(blueprint.name, hook, thrown) };
  }
}

export function errorCode(error: HookError): string | null {
  const cause = error.cause as { code?: unknown } | undefined;
  return cause && typeof cause === 'object' && typeof cause.code === 'string' ? cause.code : null;
}

export function resourceView(r: ResourceRow, leaseCount: number): ResourceView {
  return { id: r.id, type: r.type, blueprint: r.blueprint, status: r.status, attributes: structuredClone(r.attributes), leaseCount };
}

export function leaseView(l: LeaseRow): LeaseView {
  return { id: l.id, type: l.type, attributes: structuredClone(l.attributes), owner: l.owner, expiresAt: l.expiresAt };
}

/** The part of every hook context that does not depend on the object. */
export function baseContext(rt: Runtime, blueprint: Blueprint<any, any, any>, target: { lease?: string; resource?: string }, resume: boolean) {
  return {
    blueprint: { name: blueprint.name, type: blueprint.type, config: blueprint.config },
    clock: rt.clock,
    signal: rt.signal,
    resume,
    log: async (type: string, data: JsonObject = {}) => {
      await rt.store.unit((u) => rt.store.log(u, { type, data, blueprint: blueprint.name, lease: target.lease ?? null, resource: target.resource ?? null }));
    },
  };
}
