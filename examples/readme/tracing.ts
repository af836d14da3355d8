import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';
import { slipwayTracing } from 'slipway/tracing';

// The application's SDK, set up once. In production: NodeSDK with an OTLP exporter, which registers both.
const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

await using broker = await createBroker({ blueprints: [localHosts({ name: 'local', config: { slots: 2 } })] });
await using tracing = slipwayTracing(broker); // the global provider; or { tracerProvider } or { tracer }; { unitsOfWork: true } adds claims and passes

// The app's own span: slipway's acquire span is its child, and the hooks that served the lease are the acquire's.
const lease = await trace.getTracer('ci').startActiveSpan('build #42', async (build) => {
  try {
    return await broker.acquire({ type: 'host', owner: 'build-42' });
  } finally {
    build.end();
  }
});

const spans = exporter.getFinishedSpans();
const nameOf = (spanId: string | undefined) => spans.find((s) => s.spanContext().spanId === spanId)?.name ?? '-';
for (const span of spans) console.log(`${span.name} ← ${nameOf(span.parentSpanContext?.spanId)}`);
// slipway.hook allocateResource ← slipway.acquire
// slipway.hook activateResource ← slipway.acquire
// slipway.hook canAcquireLease ← slipway.acquire
// slipway.hook acquireLease ← slipway.acquire
// slipway.hook activateLease ← slipway.acquire
// slipway.acquire ← build #42
// build #42 ← -
const acquire = spans.find((s) => s.name === 'slipway.acquire')!;
console.log(acquire.attributes['slipway.lease.id'] === lease.id, acquire.attributes['slipway.resource.id'] === lease.resource.id);
// true true

await lease.release();
