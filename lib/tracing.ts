/**
 * `slipway/tracing`: a broker's acquires, blueprint hooks and (on request) units of work as
 * OpenTelemetry spans, through `@opentelemetry/api`. The API is an optional peer dependency
 * and this is the only module that loads it: an application that never imports
 * `slipway/tracing` need not install it, and a broker nobody calls `slipwayTracing` on does
 * nothing at all for traces (one null check per `acquire()`).
 *
 * With the API installed but no SDK registered, the API's tracer is a no-op: spans are
 * non-recording objects that are made and dropped. `bench/` measures what that costs.
 */
import { createRequire } from 'node:module';
import type * as OtelApi from '@opentelemetry/api';
import type { Attributes, Context, Span, Tracer, TracerProvider } from '@opentelemetry/api';
import { internals, type Broker } from './broker/index.js';
import type { HookCall, WorkDone } from './engine/runtime.js';
import { MissingPeerDependencyError } from './errors/missing-peer-dependency-error.js';
import { ValidationError } from './errors/validation-error.js';
import type { Lease } from './model/lease.js';
import { isPlainObject } from './values.js';

export interface SlipwayTracingOptions {
  /**
   * The tracer the spans are made with. Give this or `tracerProvider`, not both.
   * @defaultValue `tracerProvider.getTracer('slipway')`, else the global provider's (`trace.getTracer('slipway')`)
   */
  tracer?: Tracer;
  /**
   * The provider whose tracer `slipway` makes the spans, when it is not the global one.
   * @defaultValue the global provider (`trace.getTracerProvider()`)
   */
  tracerProvider?: TracerProvider;
  /**
   * Also a span per unit of work of the engine's hot path: each claim of due work
   * (`slipway.claim`) and each worker pass over a lease or resource (`slipway.pass`).
   * Many spans, mostly of interest when the broker itself is what is being diagnosed.
   * @defaultValue false
   */
  unitsOfWork?: boolean;
}

/** What `slipwayTracing` returns: stop it to stop making spans. */
export interface SlipwayTracing extends AsyncDisposable {
  readonly tracer: Tracer;
  /**
   * No span starts after it, and no hook or unit-of-work span is made; an acquire span
   * that began before it ends when its call settles. Calling it again does nothing.
   */
  stop(): void;
}

/** The name slipway's tracer is asked for (the instrumentation scope of its spans). */
export const TRACER_NAME = 'slipway';

/** The attribute names of slipway's spans. */
export const SPAN_ATTRIBUTES = {
  leaseType: 'slipway.lease.type',
  leaseOwner: 'slipway.lease.owner',
  leaseId: 'slipway.lease.id',
  leaseWaitedMs: 'slipway.lease.waited_ms',
  blueprint: 'slipway.blueprint',
  resourceId: 'slipway.resource.id',
  hookName: 'slipway.hook.name',
  hookOutcome: 'slipway.hook.outcome',
  errorCode: 'slipway.error.code',
  workUnit: 'slipway.work.unit',
  workKind: 'slipway.work.kind',
  workOutcome: 'slipway.work.outcome',
  workClaimed: 'slipway.work.claimed',
} as const;

const A = SPAN_ATTRIBUTES;
const OPTIONS = ['tracer', 'tracerProvider', 'unitsOfWork'];

/**
 * Makes spans of `broker`'s work with the given tracer (the global provider's by default):
 * `slipway.acquire` for each `acquire()`, in the caller's active context; `slipway.hook
 * <name>` for each blueprint hook this process calls, the child of the acquire span whose
 * lease it serves when that acquire runs in this process; and with `unitsOfWork`,
 * `slipway.claim` and `slipway.pass`. See the README, "Metrics and traces".
 */
export function slipwayTracing(broker: Broker, options: SlipwayTracingOptions = {}): SlipwayTracing {
  const api = loadOtelApi();
  const inner = internals.get(broker);
  if (!inner) throw new ValidationError('broker', 'is not a broker returned by createBroker()');
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw new ValidationError('options', 'must be an object like { tracer, unitsOfWork }');
  const unknown = Object.keys(options).filter((k) => !OPTIONS.includes(k));
  if (unknown.length > 0) throw new ValidationError(`options.${unknown[0]}`, `is not an option of slipwayTracing (${OPTIONS.join(', ')})`);
  const { tracer: given, tracerProvider, unitsOfWork = false } = options;
  if (given !== undefined && tracerProvider !== undefined) throw new ValidationError('options.tracer', 'give tracer or tracerProvider, not both');
  if (given !== undefined && typeof (given as Partial<Tracer>)?.startSpan !== 'function') throw new ValidationError('options.tracer', 'must be an OpenTelemetry Tracer (with startSpan)');
  if (tracerProvider !== undefined && typeof (tracerProvider as Partial<TracerProvider>)?.getTracer !== 'function') {
    throw new ValidationError('options.tracerProvider', 'must be an OpenTelemetry TracerProvider (with getTracer)');
  }
  if (typeof unitsOfWork !== 'boolean') throw new ValidationError('options.unitsOfWork', `must be true or false (got ${typeof unitsOfWork})`);
  if (inner.wrappers.acquire) throw new ValidationError('broker', 'is traced already: stop() its slipwayTracing first');
  const provider = tracerProvider ?? api.trace.getTracerProvider();
  const tracer = given ?? provider.getTracer(TRACER_NAME);
  const recording = recorder(api, given === undefined ? provider : null);

  /** The contexts of the acquire spans in flight, by lease id: the hooks and passes of those leases are their children. */
  const acquiring = new Map<string, Context>();
  const parentOf = (leaseId: string | null) => (leaseId === null ? undefined : acquiring.get(leaseId)) ?? api.ROOT_CONTEXT;

  inner.wrappers.acquire = (spec, run) => {
    if (!recording()) return run(() => undefined);
    const caller = api.context.active();
    const span = tracer.startSpan('slipway.acquire', { kind: api.SpanKind.INTERNAL, attributes: specAttributes(spec) }, caller);
    const inSpan = api.trace.setSpan(caller, span);
    let leaseId: string | null = null;
    let requestedAt = 0;
    const settle = () => {
      if (leaseId !== null && acquiring.get(leaseId) === inSpan) acquiring.delete(leaseId);
      span.end();
    };
    return api.context
      .with(inSpan, () =>
        run((id) => {
          leaseId = id;
          requestedAt = broker.clock.now().toMillis();
          span.setAttribute(A.leaseId, id);
          acquiring.set(id, inSpan);
        }),
      )
      .then(
        (lease) => {
          span.setAttributes(leaseAttributes(lease, Math.max(0, broker.clock.now().toMillis() - requestedAt)));
          settle();
          return lease;
        },
        (error: unknown) => {
          failed(api, span, error);
          settle();
          throw error;
        },
      );
  };

  /** A span of something that has just ended, `durationMs` long, under `parent`. */
  const spanOfDone = (name: string, durationMs: number, parent: Context, attributes: Attributes, error: unknown, code: string | null = codeOf(error)) => {
    const end = Date.now();
    const span = tracer.startSpan(name, { kind: api.SpanKind.INTERNAL, startTime: new Date(end - durationMs), attributes }, parent);
    if (error) failed(api, span, error, code);
    span.end(new Date(end));
  };

  const unsubscribe = [
    inner.events.on('hook.called', (call: HookCall) => {
      const attributes: Attributes = { [A.hookName]: call.hook, [A.hookOutcome]: call.outcome, [A.blueprint]: call.blueprint };
      if (call.lease !== null) attributes[A.leaseId] = call.lease;
      if (call.resource !== null) attributes[A.resourceId] = call.resource;
      // The code of what the hook threw (call.code), not the HookError's own.
      spanOfDone(`slipway.hook ${call.hook}`, call.durationMs, parentOf(call.lease), attributes, call.error, call.code);
    }, recording),
  ];
  if (unitsOfWork) {
    unsubscribe.push(
      inner.events.on('work.done', (work: WorkDone) => {
        if (work.unit === 'claim') {
          spanOfDone('slipway.claim', work.durationMs, api.ROOT_CONTEXT, { [A.workUnit]: 'claim', [A.workClaimed]: work.claimed }, work.error);
          return;
        }
        const attributes: Attributes = { [A.workUnit]: 'pass', [A.workKind]: work.kind, [A.workOutcome]: work.outcome, [work.kind === 'lease' ? A.leaseId : A.resourceId]: work.id };
        spanOfDone('slipway.pass', work.durationMs, parentOf(work.kind === 'lease' ? work.id : null), attributes, work.error);
      }, recording),
    );
  }

  const wrapper = inner.wrappers.acquire;
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    if (inner.wrappers.acquire === wrapper) inner.wrappers.acquire = null;
    for (const off of unsubscribe) off();
  };
  return { tracer, stop, [Symbol.asyncDispose]: async () => stop() };
}

/**
 * Whether spans would be recorded now. False only while `provider` is the API's own
 * no-op: the global provider (or a `ProxyTracerProvider` given) with no SDK registered
 * behind it yet. Then `slipwayTracing` costs nothing: no span, no context, and the engine
 * does not time its hooks and passes for it. An SDK registered later is seen at the next
 * acquire or hook. A tracer given (null here) is taken to record.
 */
function recorder(api: typeof OtelApi, provider: TracerProvider | null): () => boolean {
  if (provider === null) return () => true;
  const noop = new api.ProxyTracerProvider().getDelegate();
  if (provider instanceof api.ProxyTracerProvider) return () => provider.getDelegate() !== noop;
  return () => provider !== noop;
}

/** What the caller asked for, as far as it can be read before the spec is checked (a bad spec fails the span). */
function specAttributes(spec: unknown): Attributes {
  const attributes: Attributes = {};
  if (isPlainObject(spec)) {
    const { type, owner } = spec as { type?: unknown; owner?: unknown };
    if (typeof type === 'string') attributes[A.leaseType] = type;
    if (typeof owner === 'string') attributes[A.leaseOwner] = owner;
  }
  return attributes;
}

function leaseAttributes(lease: Lease, waitedMs: number): Attributes {
  const attributes: Attributes = {
    [A.leaseType]: lease.type,
    [A.leaseId]: lease.id,
    [A.blueprint]: lease.resource.blueprint,
    [A.resourceId]: lease.resource.id,
    [A.leaseWaitedMs]: waitedMs,
  };
  if (lease.owner !== null) attributes[A.leaseOwner] = lease.owner;
  return attributes;
}

/** Status ERROR, the exception recorded, and its stable `code` when it has one. */
function failed(api: typeof OtelApi, span: Span, error: unknown, code = codeOf(error)) {
  if (code !== null) span.setAttribute(A.errorCode, code);
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}

function codeOf(error: unknown): string | null {
  try {
    const code = (error as { code?: unknown } | null)?.code;
    return typeof code === 'string' ? code : null;
  } catch {
    return null; // a code getter that throws, or a revoked Proxy
  }
}

/** @opentelemetry/api, loaded only when tracing is asked for: it is an optional peer dependency. */
function loadOtelApi(): typeof OtelApi {
  try {
    return createRequire(import.meta.url)('@opentelemetry/api') as typeof OtelApi;
  } catch (error) {
    if ((error as { code?: unknown })?.code === 'MODULE_NOT_FOUND') throw new MissingPeerDependencyError('@opentelemetry/api', 'slipway/tracing', '^1.3.0', error);
    throw error;
  }
}
