import { readFile } from 'node:fs/promises';
import type { PGliteOptions } from '@electric-sql/pglite';

/** What `PGlite.create` would otherwise read and compile again for every instance. */
export type PgliteAssets = Pick<PGliteOptions, 'pgliteWasmModule' | 'initdbWasmModule' | 'fsBundle'>;

/** The WebAssembly global of Node, which the project's type libraries do not declare. */
const wasm = (globalThis as unknown as { WebAssembly: { compile(bytes: Uint8Array): Promise<NonNullable<PgliteAssets['pgliteWasmModule']>> } }).WebAssembly;

let assets: Promise<PgliteAssets> | undefined;

/**
 * PGlite's two WASM modules, compiled once per process, and its file-system bundle, read
 * once: every embedded broker of the process shares them (each still gets its own
 * database). Should the files not be where the installed PGlite keeps them, PGlite
 * loads its own as before: an empty object.
 */
export function pgliteAssets(): Promise<PgliteAssets> {
  assets ??= (async () => {
    try {
      const dist = new URL('./', import.meta.resolve('@electric-sql/pglite'));
      const [pglite, initdb, data] = await Promise.all(['pglite.wasm', 'initdb.wasm', 'pglite.data'].map((name) => readFile(new URL(name, dist))));
      const [pgliteWasmModule, initdbWasmModule] = await Promise.all([wasm.compile(pglite), wasm.compile(initdb)]);
      return { pgliteWasmModule, initdbWasmModule, fsBundle: new Blob([data]) };
    } catch {
      return {};
    }
  })();
  return assets;
}
