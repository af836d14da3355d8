import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { fakeBlueprint } from '../../lib/testing/index.js';
import { slipwayTracing, type SlipwayTracing } from '../../lib/tracing.js';
import type { Broker } from '../../lib/index.js';
import type { BenchConfig } from '../support/config.js';
import { round, summarize, type LatencySummary } from '../support/measure.js';
import type { Tier } from '../support/tiers.js';
import { fullCycle, openBroker } from './common.js';

/** The three ways a broker runs in this workload. */
export const TRACING_MODES = ['off', 'noSdk', 'sdk'] as const;
export type TracingMode = (typeof TRACING_MODES)[number];

export interface TracingCostResult {
  rounds: number;
  cyclesPerRound: number;
  /** Sequential full cycles (acquire, release, destroyed) per mode, all rounds together. */
  modes: Record<TracingMode, LatencySummary & { cyclesPerSec: number }>;
  /** Mean cost per cycle against `off`, from the same run (1 = no cost). */
  ratioToOff: { noSdk: number; sdk: number };
  /** Spans the in-memory exporter received per cycle in `sdk` mode. */
  spansPerCycle: number;
}

/**
 * What tracing costs a full lease cycle: one broker, one acquirer, one idle resource of an
 * exclusive fake blueprint; rounds of `cyclesPerRound` sequential cycles in each mode, the
 * order of the modes rotating from round to round so that drift hits all three alike:
 * `off` (slipwayTracing never called), `noSdk` (slipwayTracing on the global provider with
 * no SDK registered: the API's no-op tracer), `sdk` (a BasicTracerProvider with a
 * SimpleSpanProcessor into an InMemorySpanExporter, emptied after each round). Unit-of-work
 * spans stay off, as by default.
 */
export async function tracingCost(tier: Tier, config: BenchConfig): Promise<TracingCostResult> {
  const { rounds, cyclesPerRound, warmup } = config.tracing;
  const blueprint = fakeBlueprint({ name: 'traced', exclusive: true });
  const { broker } = await openBroker(tier, 'tracing', blueprint);
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const enable: Record<TracingMode, (b: Broker) => SlipwayTracing | null> = {
    off: () => null,
    noSdk: (b) => slipwayTracing(b),
    sdk: (b) => slipwayTracing(b, { tracerProvider: provider }),
  };
  const samples: Record<TracingMode, number[]> = { off: [], noSdk: [], sdk: [] };
  let sdkSpans = 0;
  try {
    for (let i = 0; i < warmup; i++) await fullCycle(broker);
    for (let r = 0; r < rounds; r++) {
      for (let m = 0; m < TRACING_MODES.length; m++) {
        const mode = TRACING_MODES[(r + m) % TRACING_MODES.length]!;
        const tracing = enable[mode](broker);
        try {
          for (let c = 0; c < cyclesPerRound; c++) {
            const t0 = performance.now();
            await fullCycle(broker);
            samples[mode].push(performance.now() - t0);
          }
        } finally {
          tracing?.stop();
        }
        if (mode === 'sdk') sdkSpans += exporter.getFinishedSpans().length;
        exporter.reset();
      }
    }
  } finally {
    await broker.close();
    await provider.shutdown();
  }
  const modes = Object.fromEntries(
    TRACING_MODES.map((mode) => {
      const s = summarize(samples[mode]);
      return [mode, { ...s, cyclesPerSec: round(1000 / s.meanMs, 1) }];
    }),
  ) as TracingCostResult['modes'];
  return {
    rounds,
    cyclesPerRound,
    modes,
    ratioToOff: { noSdk: round(modes.noSdk.meanMs / modes.off.meanMs, 3), sdk: round(modes.sdk.meanMs / modes.off.meanMs, 3) },
    spansPerCycle: round(sdkSpans / samples.sdk.length, 1),
  };
}
