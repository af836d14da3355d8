/** Small timing and statistics helpers shared by the workloads. */

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Nearest-rank percentile of an unsorted sample (p in 0..100). */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1];
}

export interface LatencySummary {
  samples: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  meanMs: number;
  minMs: number;
  maxMs: number;
}

export function summarize(valuesMs: readonly number[]): LatencySummary {
  const mean = valuesMs.reduce((a, b) => a + b, 0) / Math.max(1, valuesMs.length);
  return {
    samples: valuesMs.length,
    p50Ms: round(percentile(valuesMs, 50)),
    p90Ms: round(percentile(valuesMs, 90)),
    p99Ms: round(percentile(valuesMs, 99)),
    meanMs: round(mean),
    minMs: round(Math.min(...valuesMs)),
    maxMs: round(Math.max(...valuesMs)),
  };
}

export function round(value: number, digits = 2): number {
  if (!Number.isFinite(value)) return value;
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/** Resolves once `check` holds, polling every `everyMs`; rejects after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 60_000, everyMs = 5): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`bench: timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Prints a progress line to stderr, so stdout stays clean for piping. */
export function progress(message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}
