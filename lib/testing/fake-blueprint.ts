import type { HookTimeouts } from '../blueprint/timeouts.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { defineBlueprint } from '../blueprint/define-blueprint.js';
import type { Blueprint, BlueprintImplementation, BlueprintLimits } from '../blueprint/contract.js';
import type { JsonObject } from '../model/spec.js';

export type FakeHook =
  | 'canEverAllocate'
  | 'canAllocate'
  | 'allocateResource'
  | 'activateResource'
  | 'canAcquireLease'
  | 'acquireLease'
  | 'activateLease'
  | 'releaseLease'
  | 'destroyLease'
  | 'destroyResource';

/** What a hook does instead of succeeding: throw this value (an Error, RetryLater, anything), a given number of times or always. */
export interface FakeFailure {
  throws: unknown | (() => unknown);
  /** How many calls fail before the hook succeeds again. @defaultValue Infinity */
  times?: number;
}

export interface FakeBlueprintOptions {
  name?: string;
  type?: string;
  limits?: BlueprintLimits;
  /** Per-hook timeouts, as in the blueprint options. */
  timeouts?: HookTimeouts;
  enabled?: boolean;
  /** One lease per resource at a time (a slot lock per resource, and `limits.maxLeasesPerResource` 1 unless given). @defaultValue false */
  exclusive?: boolean;
  /** Milliseconds each hook waits before it answers (real time, so keep them small). */
  delays?: Partial<Record<FakeHook, number>>;
  /** Or a promise to wait for: a hook blocks until the test releases it. */
  gates?: Partial<Record<FakeHook, () => Promise<void>>>;
  failures?: Partial<Record<FakeHook, FakeFailure>>;
  /** Answers of the yes/no hooks. */
  answers?: { canEverAllocate?: (lease: JsonObject) => boolean; canAllocate?: () => boolean; canAcquireLease?: (lease: JsonObject, resource: JsonObject) => boolean };
  /** Resource attributes returned by allocateResource. */
  resourceAttributes?: JsonObject;
  idleExpiry?: BlueprintImplementation['idleExpiry'];
  /** A child lease to take during allocation. */
  child?: { type: string; attributes?: JsonObject };
}

/** A blueprint for users' own test suites: configurable delays, injected failures, counted calls. */
export interface FakeBlueprint extends Blueprint<FakeBlueprintOptions> {
  /** How many times each hook was called. */
  readonly calls: Record<FakeHook, number>;
  /** Each call in order, with the object id and whether it was a resume. */
  readonly history: Array<{ hook: FakeHook; id: string; resume: boolean }>;
  /** Changes a failure while the test runs; `undefined` clears it. */
  fail(hook: FakeHook, failure: FakeFailure | undefined): void;
}

let counter = 0;

export function fakeBlueprint(options: FakeBlueprintOptions = {}): FakeBlueprint {
  const calls = Object.fromEntries(
    ['canEverAllocate', 'canAllocate', 'allocateResource', 'activateResource', 'canAcquireLease', 'acquireLease', 'activateLease', 'releaseLease', 'destroyLease', 'destroyResource'].map((h) => [h, 0]),
  ) as Record<FakeHook, number>;
  const history: FakeBlueprint['history'] = [];
  const failures: Partial<Record<FakeHook, FakeFailure & { left: number }>> = {};
  const fail = (hook: FakeHook, failure: FakeFailure | undefined) => {
    if (failure) failures[hook] = { ...failure, left: failure.times ?? Infinity };
    else delete failures[hook];
  };
  for (const [hook, failure] of Object.entries(options.failures ?? {})) fail(hook as FakeHook, failure);

  async function step(hook: FakeHook, ctx: { resume?: boolean; lease?: { id: string } | null; resource?: { id: string } }) {
    calls[hook]++;
    history.push({ hook, id: ctx.resource?.id ?? ctx.lease?.id ?? '?', resume: Boolean(ctx.resume) });
    const delay = options.delays?.[hook];
    if (delay) await sleep(delay);
    const gate = options.gates?.[hook];
    if (gate) await gate();
    const failure = failures[hook];
    if (failure && failure.left > 0) {
      failure.left--;
      throw typeof failure.throws === 'function' ? (failure.throws as () => unknown)() : failure.throws;
    }
  }

  const type = options.type ?? 'fake';
  const implementation = defineBlueprint<FakeBlueprintOptions>({
    type,
    description: 'A test double: every hook counted, delayed or failed on demand.',
    idleExpiry: options.idleExpiry,
    async canEverAllocate(ctx) {
      await step('canEverAllocate', ctx);
      return options.answers?.canEverAllocate?.(ctx.lease.attributes) ?? true;
    },
    async canAllocate(ctx) {
      await step('canAllocate', ctx);
      return options.answers?.canAllocate?.() ?? true;
    },
    async allocateResource(ctx) {
      await step('allocateResource', ctx);
      if (options.child) await ctx.acquireLease({ type: options.child.type, attributes: options.child.attributes ?? {} }, { key: 'child' });
      return { attributes: { ...(options.resourceAttributes ?? {}), ...(ctx.lease ? { builtFor: ctx.lease.attributes } : {}) } };
    },
    async activateResource(ctx) {
      await step('activateResource', ctx);
    },
    async canAcquireLease(ctx) {
      await step('canAcquireLease', ctx);
      if (options.exclusive && ctx.resource.leaseCount > 0) return false;
      return options.answers?.canAcquireLease?.(ctx.lease.attributes, ctx.resource.attributes) ?? true;
    },
    async acquireLease(ctx) {
      await step('acquireLease', ctx);
      if (options.exclusive) ctx.lockSlots([`fake:${ctx.resource.id}`]);
    },
    async activateLease(ctx) {
      await step('activateLease', ctx);
    },
    async releaseLease(ctx) {
      await step('releaseLease', ctx);
    },
    async destroyLease(ctx) {
      await step('destroyLease', ctx);
    },
    async destroyResource(ctx) {
      await step('destroyResource', ctx);
    },
    interfaces: {
      echo: (ctx) => ({ lease: ctx.lease.id, resource: ctx.resource.id }),
    },
  });
  const limits = options.exclusive ? { maxLeasesPerResource: 1, ...options.limits } : options.limits;
  const blueprint = implementation({ name: options.name ?? `fake-${++counter}`, config: options, limits, enabled: options.enabled, timeouts: options.timeouts });
  return Object.assign(Object.create(null), blueprint, { calls, history, fail }) as FakeBlueprint;
}
