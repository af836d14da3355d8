import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * lib/ is in layers (docs/architecture.md): each imports only from the layers below it, and
 * no file imports, even for a type, a file that imports it back. This reads every import of
 * lib/ (value, type, re-export and `import('…')` type) and checks both.
 */

const LIB = fileURLToPath(new URL('../lib/', import.meta.url));

/** Lowest first. Two layers of the same rank may not import each other. */
const LAYERS: Array<{ name: string; rank: number; owns: (file: string) => boolean }> = [
  { name: 'base', rank: 0, owns: (f) => /^(time|clock|values)\.ts$/.test(f) || f.startsWith('errors/') },
  { name: 'model', rank: 1, owns: (f) => f.startsWith('model/') },
  { name: 'logs', rank: 2, owns: (f) => f.startsWith('logs/') },
  { name: 'blueprint', rank: 3, owns: (f) => f.startsWith('blueprint/') },
  { name: 'store', rank: 3, owns: (f) => f.startsWith('store/') },
  { name: 'engine', rank: 4, owns: (f) => f.startsWith('engine/') },
  { name: 'broker', rank: 5, owns: (f) => f.startsWith('broker/') },
  { name: 'testing', rank: 6, owns: (f) => f.startsWith('testing/') },
  { name: 'entry points', rank: 7, owns: (f) => f === 'index.ts' || f === 'typeorm.ts' || f === 'metrics.ts' || f === 'tracing.ts' },
  // `slipway/dashboard`: an entry point of its own, on the broker, as metrics.ts is.
  { name: 'dashboard', rank: 7, owns: (f) => f.startsWith('dashboard/') },
  // The `slipway` bin: a user of the public API, as any program on the package would be.
  { name: 'cli', rank: 8, owns: (f) => f.startsWith('cli/') },
];

function layerOf(file: string) {
  const layer = LAYERS.find((l) => l.owns(file));
  if (!layer) throw new Error(`lib/${file} is in no layer: add it to one in test/layers.test.ts and docs/architecture.md`);
  return layer;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') ? [relative(LIB, path)] : [];
  });
}

/** The lib/ files a file imports in any way, relative to lib/. */
function importsOf(file: string): string[] {
  const text = readFileSync(join(LIB, file), 'utf8');
  const specifiers = [...text.matchAll(/\bfrom\s+'(\.[^']+)'|\bimport\(\s*'(\.[^']+)'\s*\)|^import\s+'(\.[^']+)'/gm)].map((m) => m[1] ?? m[2] ?? m[3]);
  return specifiers.map((s) => relative(LIB, resolve(dirname(join(LIB, file)), s.replace(/\.js$/, '.ts'))));
}

const files = sources(LIB);
const graph = new Map(files.map((f) => [f, importsOf(f)]));

test('every file of lib/ belongs to a layer, and every relative import resolves to a file of lib/', () => {
  for (const [file, imports] of graph) {
    layerOf(file);
    for (const target of imports) expect({ file, target, exists: graph.has(target) }).toEqual({ file, target, exists: true });
  }
});

test('no import runs from a lower layer to a higher one, or across layers of one rank', () => {
  const wrong: string[] = [];
  for (const [file, imports] of graph) {
    const from = layerOf(file);
    for (const target of imports) {
      const to = layerOf(target);
      if (to.name !== from.name && to.rank >= from.rank) wrong.push(`lib/${file} (${from.name}) imports lib/${target} (${to.name})`);
    }
  }
  expect(wrong).toEqual([]);
});

test('no import cycle among the files of lib/, type imports included', () => {
  const cycles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const path: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    path.push(file);
    for (const target of graph.get(file) ?? []) {
      if (state.get(target) === 'open') cycles.push([...path.slice(path.indexOf(target)), target].join(' → '));
      else if (!state.has(target)) visit(target);
    }
    path.pop();
    state.set(file, 'done');
  };
  for (const file of files) if (!state.has(file)) visit(file);
  expect(cycles).toEqual([]);
});

test('the bin (lib/cli/) uses only the public entry points, as a program on the package would', () => {
  const inner: string[] = [];
  for (const [file, imports] of graph) {
    if (!file.startsWith('cli/')) continue;
    for (const target of imports) if (!target.startsWith('cli/') && !['index.ts', 'typeorm.ts', 'dashboard/index.ts'].includes(target)) inner.push(`lib/${file} imports lib/${target}`);
  }
  expect(inner).toEqual([]);
  expect([...graph.keys()].filter((f) => f.startsWith('cli/')).length).toBeGreaterThan(5);
});

test('the check sees imports of every kind (a check that finds nothing would pass blindly)', () => {
  expect(graph.get('index.ts')).toContain('broker/index.ts');
  expect(graph.get('model/lease.ts')).toContain('model/interfaces.ts');
  expect(graph.get('cli/commands/lists.ts')).toContain('index.ts');
  expect([...graph.values()].flat().length).toBeGreaterThan(200);
});
