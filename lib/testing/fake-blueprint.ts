import type { HookTimeouts } from '../blueprint/timeouts.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { defineBlueprint } from '../blueprint/define-blueprint.js';
import type { Blueprint, BlueprintImplementation, BlueprintLimits, CommandInterface, CommandOptions, CommandResult } from '../blueprint/contract.js';
import { AbortError } from '../errors/abort-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { thrownClass } from '../engine/hooks.js';
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

/**
 * What a hook does instead of succeeding: throw this value (an Error, `new RetryLater(...)`,
 * anything), a given number of times or always. A function is called for the value to
 * throw, except an error class, which is thrown as it is (as `throw RetryLater` would be).
 */
export interface FakeFailure {
  throws: unknown | (() => unknown);
  /** How many calls fail before the hook succeeds again. @defaultValue Infinity */
  times?: number;
}

/** One `lease.interface('command').run(argv, options)` call on a fake's lease, as recorded in `FakeBlueprint.commands`. */
export interface FakeCommandCall {
  argv: string[];
  /** As given; the fake has no directory of its own to default to. */
  cwd: string | undefined;
  /** As given: only the variables the caller set, not the merged environment. */
  env: Record<string, string | undefined> | undefined;
  stdin: string | undefined;
  /** The lease and the resource the command ran on. */
  lease: string;
  resource: string;
}

/** What a fake command answers. Missing fields are those of a quiet success. */
export interface FakeCommandReply {
  /** @defaultValue 0 */
  exitCode?: number | null;
  /** @defaultValue '' */
  stdout?: string;
  /** @defaultValue '' */
  stderr?: string;
  /** @defaultValue null */
  signal?: string | null;
  /** @defaultValue false */
  timedOut?: boolean;
}

/**
 * The scripted `command` interface of a fake's leases: nothing runs. Each call is recorded
 * first, then `respond` decides the result from the call; an error it throws (a
 * `CommandStartError` of `slipway/blueprints`, say) is what `run()` rejects with.
 */
export interface FakeCommandOptions {
  /** @defaultValue every command exits 0 with no output */
  respond?: (call: FakeCommandCall) => FakeCommandReply | Promise<FakeCommandReply>;
}

export interface FakeBlueprintOptions {
  name?: string;
  type?: string;
  limits?: BlueprintLimits;
  /** Per-hook timeouts, as in the blueprint options. */
  timeouts?: HookTimeouts;
  enabled?: boolean;
  /** Serve only authorized owners, as in the blueprint options. @defaultValue false */
  requireAuthorization?: boolean;
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
  /**
   * Hooks the fake leaves out, as a blueprint that needs them not: any hook but
   * `allocateResource`. Without `activateLease`, `releaseLease` and `destroyLease` a lease
   * takes slipway's shorter paths (no intent to record before a hook that does not exist).
   * @defaultValue [] (every hook defined)
   */
  without?: FakeHook[];
  /**
   * The leases' `command` interface. `run(argv, options)` is checked as `localHosts` checks
   * it (a non-empty array of strings), rejects with `AbortError` when `options.signal` is
   * aborted, passes the output to `onStdout`/`onStderr`, and resolves with the reply.
   * @defaultValue every command exits 0 with no output
   */
  command?: FakeCommandOptions;
}

/**
 * A blueprint for users' own test suites: configurable delays, injected failures, counted
 * calls, and leases with a scripted `command` interface (`echo` too: the lease and
 * resource ids).
 */
export interface FakeBlueprint extends Blueprint<FakeBlueprintOptions> {
  /** How many times each hook was called. */
  readonly calls: Record<FakeHook, number>;
  /** Each call in order, with the object id and whether it was a resume. */
  readonly history: Array<{ hook: FakeHook; id: string; resume: boolean }>;
  /** Changes a failure while the test runs; `undefined` clears it. */
  fail(hook: FakeHook, failure: FakeFailure | undefined): void;
  /** Every `command` run on this blueprint's leases, in order; answered or not. */
  readonly commands: FakeCommandCall[];
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
      // An error class (`throws: RetryLater`) is thrown as it is, as a hook that forgot `new` would: it cannot be called.
      throw typeof failure.throws === 'function' && !thrownClass(failure.throws) ? (failure.throws as () => unknown)() : failure.throws;
    }
  }

  if (options.command !== undefined && (options.command === null || typeof options.command !== 'object')) throw new ValidationError('command', 'must be { respond? }');
  const respond = options.command?.respond;
  if (respond !== undefined && typeof respond !== 'function') throw new ValidationError('command.respond', 'must be a function (call) => ({ exitCode?, stdout?, stderr? })');
  const commands: FakeCommandCall[] = [];
  const commandInterface = (lease: string, resource: string): CommandInterface => ({
    async run(argv: readonly string[], runOptions?: CommandOptions): Promise<CommandResult> {
      if (!Array.isArray(argv) || argv.length === 0 || argv.some((arg) => typeof arg !== 'string')) {
        throw new ValidationError('argv', 'must be a non-empty array of strings, like ["git", "status"]');
      }
      const call: FakeCommandCall = { argv: [...argv], cwd: runOptions?.cwd, env: runOptions?.env && { ...runOptions.env }, stdin: runOptions?.stdin, lease, resource };
      commands.push(call);
      if (runOptions?.signal?.aborted) throw new AbortError(`command ${JSON.stringify(argv[0])} was aborted before it started`, { cause: runOptions.signal.reason });
      const reply = (await respond?.(call)) ?? {};
      const result: CommandResult = {
        exitCode: reply.exitCode === undefined ? 0 : reply.exitCode,
        signal: reply.signal ?? null,
        stdout: reply.stdout ?? '',
        stderr: reply.stderr ?? '',
        timedOut: reply.timedOut ?? false,
      };
      if (result.stdout) runOptions?.onStdout?.(result.stdout);
      if (result.stderr) runOptions?.onStderr?.(result.stderr);
      return result;
    },
  });

  const without = options.without ?? [];
  if (!Array.isArray(without) || without.some((hook) => !(hook in calls) || hook === 'allocateResource')) {
    throw new ValidationError('without', `must be an array of hook names other than allocateResource (known: ${Object.keys(calls).join(', ')})`);
  }
  const type = options.type ?? 'fake';
  const full: BlueprintImplementation<FakeBlueprintOptions> = {
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
      command: (ctx) => commandInterface(ctx.lease.id, ctx.resource.id),
      /** The lease and resource ids, for a test that only needs to see which resource it got. */
      echo: (ctx) => ({ lease: ctx.lease.id, resource: ctx.resource.id }),
    },
  };
  for (const hook of without) delete (full as unknown as Record<string, unknown>)[hook];
  const implementation = defineBlueprint<FakeBlueprintOptions>(full);
  const limits = options.exclusive ? { maxLeasesPerResource: 1, ...options.limits } : options.limits;
  const blueprint = implementation({ name: options.name ?? `fake-${++counter}`, config: options, limits, enabled: options.enabled, requireAuthorization: options.requireAuthorization, timeouts: options.timeouts });
  return Object.assign(Object.create(null), blueprint, { calls, history, fail, commands }) as FakeBlueprint;
}
