import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';

/**
 * A CPU profile of this process (the V8 sampling profiler, as `node --cpu-prof`
 * records), summed up by self time: which code the worker's thread spends its time in.
 */
export interface CpuSummary {
  seconds: number;
  /** Share of sampled time by where the code lives (idle excluded from the shares). */
  byArea: Array<{ area: string; percent: number }>;
  /** Busy share of the sampled wall time: 100 means the thread never waited. */
  busyPercent: number;
  top: Array<{ fn: string; where: string; area: string; percent: number }>;
}

function areaOf(url: string, fn: string): string {
  if (fn === '(idle)') return 'idle';
  if (fn === '(garbage collector)') return 'gc';
  if (fn === '(program)') return 'v8/native';
  if (!url) return fn.startsWith('wasm') ? 'pglite (wasm)' : 'v8/native';
  if (url.startsWith('wasm://')) return 'pglite (wasm)';
  if (url.startsWith('node:')) return 'node core';
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1] === '@electric-sql/pglite' ? 'pglite (js)' : m[1];
  if (url.includes('/lib/')) return 'slipway lib/';
  if (url.includes('/bench/')) return 'bench';
  return 'other';
}

export async function profileCpu(seconds: number, during: (stopAt: number) => Promise<void>): Promise<CpuSummary> {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 200 });
  await session.post('Profiler.start');
  const started = performance.now();
  await during(started + seconds * 1000);
  const { profile } = await session.post('Profiler.stop');
  const wallS = (performance.now() - started) / 1000;
  session.disconnect();
  // The whole profile, for Chrome's DevTools or a script that walks the callers: SLIPWAY_BENCH_CPUPROFILE=file.
  if (process.env.SLIPWAY_BENCH_CPUPROFILE) writeFileSync(process.env.SLIPWAY_BENCH_CPUPROFILE, JSON.stringify(profile));

  const byNode = new Map<number, { fn: string; where: string; area: string }>();
  for (const node of profile.nodes) {
    const f = node.callFrame;
    const file = f.url.replace(/^file:\/\//, '').replace(/^.*\/(node_modules\/)/, '$1').replace(/^.*\/work\/main\//, '');
    byNode.set(node.id, { fn: f.functionName || '(anonymous)', where: f.url ? `${file}:${f.lineNumber + 1}` : '', area: areaOf(f.url, f.functionName) });
  }
  const self = new Map<number, number>();
  const deltas = profile.timeDeltas ?? [];
  (profile.samples ?? []).forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (deltas[i] ?? 0)));
  let total = 0;
  let idle = 0;
  const areas = new Map<string, number>();
  const fns = new Map<string, { fn: string; where: string; area: string; us: number }>();
  for (const [id, us] of self) {
    const n = byNode.get(id)!;
    total += us;
    if (n.area === 'idle') {
      idle += us;
      continue;
    }
    areas.set(n.area, (areas.get(n.area) ?? 0) + us);
    const key = `${n.fn}@${n.where}`;
    const entry = fns.get(key) ?? { ...n, us: 0 };
    entry.us += us;
    fns.set(key, entry);
  }
  const busy = Math.max(1, total - idle);
  const pct = (us: number) => Math.round((us / busy) * 1000) / 10;
  return {
    seconds: Math.round(wallS * 10) / 10,
    busyPercent: Math.round((busy / Math.max(1, total)) * 1000) / 10,
    byArea: [...areas.entries()].sort((a, b) => b[1] - a[1]).map(([area, us]) => ({ area, percent: pct(us) })),
    top: [...fns.values()].sort((a, b) => b.us - a.us).slice(0, 15).map((f) => ({ fn: f.fn, where: f.where, area: f.area, percent: pct(f.us) })),
  };
}
