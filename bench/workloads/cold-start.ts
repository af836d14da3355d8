/**
 * `createBroker()` cold and warm on the embedded database. Each sample is two fresh Node
 * processes (children): one times its first broker in memory (cold: PGlite's WASM, the
 * migrated template, the broker), a second one (warm), then a new dataDir after them; the
 * other times a new dataDir as the process's first broker (cold), then a second new one.
 * Each sample runs twice: with the template cache off (every process makes the migrated
 * template itself), and with it on disk (a private cache directory, filled by one process
 * before the samples), as a machine has it from its second process on.
 * Run alone: `npx tsx bench/workloads/cold-start.ts [samples]`.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface ColdStart {
  samples: number;
  /** Milliseconds, median over the samples. */
  memoryColdMs: number;
  memoryWarmMs: number;
  dataDirColdMs: number;
  dataDirWarmMs: number;
  /** A new dataDir opened after in-memory brokers in the same process. */
  dataDirAfterMemoryMs: number;
  /** The same, with the migrated template read from the cache on disk. */
  cached: { memoryColdMs: number; memoryWarmMs: number; dataDirColdMs: number; dataDirWarmMs: number; dataDirAfterMemoryMs: number };
}

const CHILD = fileURLToPath(import.meta.url);

async function child(): Promise<void> {
  const { createBroker } = await import('../../lib/index.js');
  const timed = async (options: Parameters<typeof createBroker>[0]) => {
    const at = performance.now();
    const broker = await createBroker(options);
    const ms = performance.now() - at;
    await broker.close();
    return ms;
  };
  const dir = mkdtempSync(join(tmpdir(), 'slipway-cold-'));
  try {
    if (process.argv.includes('dataDir')) {
      const dataDirCold = await timed({ database: { embedded: true, dataDir: join(dir, 'a') } });
      const dataDirWarm = await timed({ database: { embedded: true, dataDir: join(dir, 'b') } });
      process.stdout.write(JSON.stringify({ dataDirCold, dataDirWarm }));
    } else {
      const memoryCold = await timed({});
      const memoryWarm = await timed({});
      const dataDirAfterMemory = await timed({ database: { embedded: true, dataDir: join(dir, 'a') } });
      process.stdout.write(JSON.stringify({ memoryCold, memoryWarm, dataDirAfterMemory }));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.floor(s.length / 2)]!);
};

export async function coldStart(samples: number): Promise<ColdStart> {
  const cacheDir = mkdtempSync(join(tmpdir(), 'slipway-cold-cache-'));
  try {
    const sample = (cache: string) => {
      const run = (first: string) =>
        JSON.parse(execFileSync(process.execPath, ['--import', 'tsx', CHILD, '--child', first], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, SLIPWAY_TEMPLATE_CACHE: cache } }));
      return { ...run('memory'), ...run('dataDir') };
    };
    sample(cacheDir); // fills the cache
    const off: Array<Record<string, number>> = [];
    const on: Array<Record<string, number>> = [];
    for (let i = 0; i < samples; i++) {
      off.push(sample('off'));
      on.push(sample(cacheDir));
    }
    const of = (runs: Array<Record<string, number>>) => {
      const m = (k: string) => median(runs.map((r) => r[k]!));
      return { memoryColdMs: m('memoryCold'), memoryWarmMs: m('memoryWarm'), dataDirColdMs: m('dataDirCold'), dataDirWarmMs: m('dataDirWarm'), dataDirAfterMemoryMs: m('dataDirAfterMemory') };
    };
    return { samples, ...of(off), cached: of(on) };
  } finally {
    rmSync(cacheDir, { recursive: true, force: true });
  }
}

if (process.argv[1] === CHILD) {
  if (process.argv.includes('--child')) await child();
  else console.log(await coldStart(Number(process.argv[2] ?? 3)));
}
