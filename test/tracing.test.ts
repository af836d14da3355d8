import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { internals, type Broker } from '../lib/broker/index.js';
import { ValidationError } from '../lib/errors/validation-error.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { slipwayTracing, SPAN_ATTRIBUTES as A, TRACER_NAME } from '../lib/tracing.js';
import { guardBrokers, realBroker, testBroker } from './helpers/broker.js';

guardBrokers();

// As an application's SDK setup does (NodeSDK, NodeTracerProvider.register()): async context for context.active().
const contextManager = new AsyncLocalStorageContextManager();
beforeAll(() => context.setGlobalContextManager(contextManager.enable()));
afterAll(() => {
  contextManager.disable();
  context.disable();
});

/** An SDK that keeps every span in memory, ended spans exported at once. */
function sdk() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, provider, spans: () => exporter.getFinishedSpans() };
}

const parentOf = (span: ReadableSpan) => span.parentSpanContext?.spanId;
const idOf = (span: ReadableSpan) => span.spanContext().spanId;
const named = (spans: ReadableSpan[], name: string) => spans.filter((s) => s.name === name);

async function destroyed(broker: Broker, id: string) {
  const deadline = Date.now() + 20_000;
  while ((await broker.leases.get(id))?.status !== 'destroyed') {
    if (Date.now() > deadline) throw new Error(`lease ${id} not destroyed in time`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('slipway/tracing', () => {
  test('one acquire on a real-clock broker: its span is the child of the caller\'s span and names the lease; its hooks are its children', async () => {
    const bp = fakeBlueprint({ name: 'builder', type: 'slot' });
    const broker = await realBroker({ blueprints: [bp] });
    const { provider, spans, exporter } = sdk();
    const tracing = slipwayTracing(broker, { tracerProvider: provider });
    const appTracer = provider.getTracer('app');

    const lease = await appTracer.startActiveSpan('app.job', async (job) => {
      try {
        return await broker.acquire({ type: 'slot', owner: 'ci-42' });
      } finally {
        job.end();
      }
    });
    const [job] = named(spans(), 'app.job');
    const [acquire, ...more] = named(spans(), 'slipway.acquire');
    expect(more).toEqual([]);
    expect(acquire!.instrumentationScope.name).toBe(TRACER_NAME);
    expect(parentOf(acquire!)).toBe(idOf(job!));
    expect(acquire!.spanContext().traceId).toBe(job!.spanContext().traceId);
    expect(acquire!.status.code).toBe(SpanStatusCode.UNSET);
    expect(acquire!.attributes).toEqual({
      [A.leaseType]: 'slot',
      [A.leaseOwner]: 'ci-42',
      [A.leaseId]: lease.id,
      [A.blueprint]: 'builder',
      [A.resourceId]: lease.resource.id,
      [A.leaseWaitedMs]: expect.any(Number),
    });
    expect(acquire!.attributes[A.leaseWaitedMs]).toBeGreaterThanOrEqual(0);

    // Every hook that served this lease ran while acquire() waited: a child of its span, with the lease's ids.
    const hooks = spans().filter((s) => s.name.startsWith('slipway.hook '));
    const called = Object.entries(bp.calls).flatMap(([hook, n]) => Array.from({ length: n }, () => `slipway.hook ${hook}`));
    expect(hooks.map((s) => s.name).sort()).toEqual(called.sort());
    expect(called).toEqual(expect.arrayContaining(['slipway.hook allocateResource', 'slipway.hook activateResource', 'slipway.hook acquireLease', 'slipway.hook activateLease']));
    for (const hook of hooks) {
      expect([hook.name, parentOf(hook)]).toEqual([hook.name, idOf(acquire!)]);
      expect(hook.attributes).toMatchObject({ [A.hookOutcome]: 'ok', [A.blueprint]: 'builder', [A.leaseId]: lease.id, [A.hookName]: hook.name.slice('slipway.hook '.length) });
      expect(hook.status.code).toBe(SpanStatusCode.UNSET);
      expect(hook.duration[0] * 1e3 + hook.duration[1] / 1e6).toBeGreaterThanOrEqual(0);
    }
    expect(named(hooks, 'slipway.hook activateLease')[0]!.attributes[A.resourceId]).toBe(lease.resource.id);
    // Units of work are off by default.
    expect(spans().filter((s) => s.name === 'slipway.pass' || s.name === 'slipway.claim')).toEqual([]);

    // The release hooks run after acquire() returned: their spans are roots.
    exporter.reset();
    await lease.release();
    await destroyed(broker, lease.id);
    const after = spans();
    expect(after.map((s) => s.name)).toEqual(expect.arrayContaining(['slipway.hook destroyLease']));
    for (const s of after) expect([s.name, parentOf(s)]).toEqual([s.name, undefined]);
    expect(after.filter((s) => s.name === 'slipway.acquire' || s.name === 'slipway.pass')).toEqual([]);
    tracing.stop();
    await broker.close();
  }, 60_000);

  test('a failing hook\'s span has status ERROR, its outcome, the code of what it threw and the exception; a failing acquire too', async () => {
    const bp = fakeBlueprint({ name: 'flaky', failures: { allocateResource: { throws: Object.assign(new Error('disk full'), { code: 'ENOSPC' }), times: 1 } } });
    const broken = fakeBlueprint({ name: 'broken', type: 'never', failures: { allocateResource: { throws: new Error('out of quota') } } });
    const broker = await realBroker({ blueprints: [bp, broken], backoff: { initial: { milliseconds: 10 }, max: { milliseconds: 50 } }, maxAllocationFailures: 3 });
    const { provider, spans } = sdk();
    slipwayTracing(broker, { tracer: provider.getTracer('custom') });
    const lease = await broker.acquire({ type: 'fake' });
    const [acquire] = named(spans(), 'slipway.acquire');
    expect(acquire!.instrumentationScope.name).toBe('custom');
    const allocations = named(spans(), 'slipway.hook allocateResource');
    expect(allocations.map((s) => s.attributes[A.hookOutcome])).toEqual(['failed', 'ok']);
    const [failed] = allocations;
    expect(failed!.status).toEqual({ code: SpanStatusCode.ERROR, message: expect.stringContaining('disk full') });
    expect(failed!.attributes).toMatchObject({ [A.blueprint]: 'flaky', [A.leaseId]: lease.id, [A.errorCode]: 'ENOSPC', [A.resourceId]: expect.any(String) });
    expect(failed!.events.map((e) => e.name)).toEqual(['exception']);
    expect(failed!.events[0]!.attributes!['exception.message']).toMatch(/disk full/);
    expect(parentOf(failed!)).toBe(idOf(acquire!));
    expect(acquire!.status.code).toBe(SpanStatusCode.UNSET);
    await lease.release();

    // A lease that cannot be served: acquire() throws, and its span says so.
    const error = (await broker.acquire({ type: 'never', owner: 'doomed' }).then(
      () => new Error('acquired'),
      (e: unknown) => e,
    )) as Error & { code: string };
    expect(error).toBeInstanceOf(Error);
    const [doomed] = named(spans(), 'slipway.acquire').filter((s) => s.attributes[A.leaseOwner] === 'doomed');
    expect(doomed!.status).toEqual({ code: SpanStatusCode.ERROR, message: error.message });
    expect(doomed!.attributes).toMatchObject({ [A.leaseType]: 'never', [A.leaseId]: expect.any(String), [A.errorCode]: error.code });
    expect(doomed!.events.map((e) => e.name)).toEqual(['exception']);
    const doomedHooks = named(spans(), 'slipway.hook allocateResource').filter((s) => s.attributes[A.leaseId] === doomed!.attributes[A.leaseId]);
    expect(doomedHooks.length).toBeGreaterThan(0);
    for (const s of doomedHooks) expect([s.status.code, parentOf(s)]).toEqual([SpanStatusCode.ERROR, idOf(doomed!)]);
    await broker.close();
  }, 60_000);

  test('without a context manager, the acquire span is a root and its hooks still hang under it (found by lease id)', async () => {
    contextManager.disable();
    context.disable();
    try {
      const bp = fakeBlueprint({ name: 'plain' });
      const broker = await realBroker({ blueprints: [bp] });
      const { provider, spans } = sdk();
      const tracing = slipwayTracing(broker, { tracerProvider: provider });
      const lease = await provider.getTracer('app').startActiveSpan('app.job', async (job) => {
        try {
          return await broker.acquire({ type: 'fake' });
        } finally {
          job.end();
        }
      });
      const [acquire] = named(spans(), 'slipway.acquire');
      // No context manager: the API cannot carry the app's span into the call.
      expect(parentOf(acquire!)).toBeUndefined();
      const hooks = spans().filter((s) => s.name.startsWith('slipway.hook '));
      expect(hooks.length).toBe(Object.values(bp.calls).reduce((a, b) => a + b, 0));
      for (const hook of hooks) expect([hook.name, hook.attributes[A.leaseId], parentOf(hook)]).toEqual([hook.name, lease.id, idOf(acquire!)]);
      await lease.release();
      tracing.stop();
      await broker.close();
    } finally {
      context.setGlobalContextManager(contextManager.enable());
    }
  });

  test('units of work are spans only with unitsOfWork: true: claims and passes, with the lease or resource they worked on', async () => {
    const broker = await realBroker({ blueprints: [fakeBlueprint()] });
    const runtime = internals.get(broker)!.runtime;
    const { provider, spans } = sdk();
    const off = slipwayTracing(broker, { tracerProvider: provider });
    expect(runtime.workObserver!()).toBeNull();
    off.stop();
    const tracing = slipwayTracing(broker, { tracerProvider: provider, unitsOfWork: true });
    expect(runtime.workObserver!()).toEqual(expect.any(Function));
    const lease = await broker.acquire({ type: 'fake' });
    await lease.release();
    await destroyed(broker, lease.id);
    const passes = named(spans(), 'slipway.pass');
    const ofLease = passes.filter((s) => s.attributes[A.leaseId] === lease.id);
    expect(ofLease.length).toBeGreaterThan(0);
    for (const s of ofLease) expect(s.attributes).toMatchObject({ [A.workUnit]: 'pass', [A.workKind]: 'lease', [A.workOutcome]: expect.stringMatching(/^(park|at|delete)$/) });
    expect(passes.filter((s) => s.attributes[A.workKind] === 'resource').every((s) => typeof s.attributes[A.resourceId] === 'string')).toBe(true);
    // The release is a command: the worker claims the lease's work item to carry it out.
    const claims = named(spans(), 'slipway.claim');
    expect(claims.length).toBeGreaterThan(0);
    for (const s of claims) expect([parentOf(s), typeof s.attributes[A.workClaimed]]).toEqual([undefined, 'number']);
    await tracing[Symbol.asyncDispose]();
    expect(runtime.workObserver!()).toBeNull();
    await broker.close();
  }, 60_000);

  test('after stop() nothing is emitted; with no SDK registered the global tracer makes no spans; tracing can start again', async () => {
    const bp = fakeBlueprint();
    const broker = await testBroker({ blueprints: [bp] });
    const inner = internals.get(broker)!;
    expect(inner.wrappers.acquire).toBeNull();
    expect(inner.runtime.hookObserver!()).toBeNull();
    const { exporter, provider, spans } = sdk();
    const tracing = slipwayTracing(broker, { tracerProvider: provider, unitsOfWork: true });
    tracing.stop();
    tracing.stop();
    expect(inner.wrappers.acquire).toBeNull();
    expect(inner.runtime.hookObserver!()).toBeNull();
    expect(inner.runtime.workObserver!()).toBeNull();
    const first = await broker.acquire({ type: 'fake' });
    await first.release();
    await broker.runUntilIdle();
    expect(spans()).toEqual([]);

    // The global provider with no SDK: a no-op tracer, whose spans record nothing, and
    // nothing for the engine to time: no hook or pass observer (the cost is nil).
    const global = slipwayTracing(broker, { unitsOfWork: true });
    expect(global.tracer.startSpan('probe').isRecording()).toBe(false);
    expect(trace.getTracerProvider().getTracer('x').startSpan('probe').isRecording()).toBe(false);
    expect(inner.runtime.hookObserver!()).toBeNull();
    expect(inner.runtime.workObserver!()).toBeNull();
    const second = await broker.acquire({ type: 'fake' });
    expect(second.status).toBe('active');
    await second.release();
    // An SDK registered afterwards, as an app may do after creating its broker, is seen at the next acquire.
    expect(trace.setGlobalTracerProvider(provider)).toBe(true);
    try {
      expect(inner.runtime.hookObserver!()).not.toBeNull();
      const late = await broker.acquire({ type: 'fake' });
      await late.release();
      await broker.runUntilIdle();
      expect(named(spans(), 'slipway.acquire').map((s) => s.attributes[A.leaseId])).toEqual([late.id]);
      expect(named(spans(), 'slipway.hook acquireLease').length).toBe(1);
    } finally {
      trace.disable();
    }
    exporter.reset();
    global.stop();

    const again = slipwayTracing(broker, { tracerProvider: provider });
    const third = await broker.acquire({ type: 'fake' });
    expect(named(spans(), 'slipway.acquire').map((s) => s.attributes[A.leaseId])).toEqual([third.id]);
    await third.release();
    again.stop();
    await broker.close();
  });

  test('real clock, no SDK registered: cycles run with no hook or pass observer and no span; an SDK registered meanwhile gets the next acquire', async () => {
    const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'quiet', type: 'slot' })] });
    const inner = internals.get(broker)!;
    const tracing = slipwayTracing(broker, { unitsOfWork: true });
    for (let i = 0; i < 3; i++) {
      const lease = await broker.acquire({ type: 'slot' });
      expect(inner.runtime.hookObserver!()).toBeNull();
      expect(inner.runtime.workObserver!()).toBeNull();
      await lease.release();
    }
    const { provider, spans } = sdk();
    expect(trace.setGlobalTracerProvider(provider)).toBe(true);
    try {
      const lease = await broker.acquire({ type: 'slot' });
      await lease.release();
      expect(named(spans(), 'slipway.acquire').map((s) => s.attributes[A.leaseId])).toEqual([lease.id]);
    } finally {
      trace.disable();
      tracing.stop();
      await broker.close();
    }
  });

  test('bad options are a ValidationError naming the field; a second tracer on one broker is refused', async () => {
    const broker = await testBroker({ blueprints: [fakeBlueprint()] });
    const { provider } = sdk();
    const refusal = (call: () => unknown) => {
      try {
        call();
      } catch (error) {
        expect(error).toBeInstanceOf(ValidationError);
        return (error as Error).message;
      }
      throw new Error('not refused');
    };
    expect(refusal(() => slipwayTracing(broker, { unitsOfWork: 'yes' } as never))).toMatch(/^options\.unitsOfWork: must be true or false/);
    expect(refusal(() => slipwayTracing(broker, { tracer: {} } as never))).toMatch(/^options\.tracer: must be an OpenTelemetry Tracer/);
    expect(refusal(() => slipwayTracing(broker, { tracerProvider: 1 } as never))).toMatch(/^options\.tracerProvider: must be an OpenTelemetry TracerProvider/);
    expect(refusal(() => slipwayTracing(broker, { tracer: provider.getTracer('a'), tracerProvider: provider }))).toMatch(/^options\.tracer: give tracer or tracerProvider, not both/);
    expect(refusal(() => slipwayTracing(broker, { sampler: 1 } as never))).toMatch(/^options\.sampler: is not an option of slipwayTracing \(tracer, tracerProvider, unitsOfWork\)/);
    expect(refusal(() => slipwayTracing(broker, null as never))).toMatch(/^options: must be an object/);
    expect(refusal(() => slipwayTracing({ ...broker }))).toMatch(/^broker: is not a broker/);
    const tracing = slipwayTracing(broker, { tracerProvider: provider });
    expect(refusal(() => slipwayTracing(broker, { tracerProvider: provider }))).toMatch(/^broker: is traced already/);
    tracing.stop();
    slipwayTracing(broker, { tracerProvider: provider }).stop();
    await broker.close();
  });
});
