import { existsSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { BrokerOptions } from '../index.js';
import { CliFailure, UsageError } from './errors.js';

/** What a config module exports: the blueprints, and any other createBroker option. */
export type SlipwayConfig = BrokerOptions;

/** Looked for in the working directory when `--config` is not given. */
export const DEFAULT_CONFIG_FILES = ['slipway.config.js', 'slipway.config.mjs'];

/**
 * Loads the config module of the commands that run hooks (`worker`, `lease`). Its default
 * export is the options object, or a function (may be async) that returns it.
 *
 * A `.ts` config is imported as is: that works when slipway runs under a TypeScript
 * loader (`npx tsx node_modules/.bin/slipway ...`) and fails with a clear line otherwise,
 * since Node 20 does not strip types.
 */
export async function loadConfig(path: string | undefined): Promise<{ file: string; config: SlipwayConfig }> {
  const file = path ? resolve(path) : DEFAULT_CONFIG_FILES.map((name) => resolve(name)).find((candidate) => existsSync(candidate));
  if (!file) throw new UsageError(`this command runs blueprint hooks: give --config slipway.config.js (none found in ${process.cwd()})`);
  if (!existsSync(file)) throw new UsageError(`--config: ${file} does not exist`);
  let module: { default?: unknown };
  try {
    module = (await import(pathToFileURL(file).href)) as { default?: unknown };
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'ERR_UNKNOWN_FILE_EXTENSION' && /^\.[mc]?ts$/.test(extname(file))) {
      throw new UsageError(`--config: Node cannot load ${file} by itself: compile it to .js, or run slipway through tsx (npx tsx node_modules/.bin/slipway ...)`);
    }
    throw new CliFailure(`--config: loading ${file} failed: ${(error as Error).message ?? String(error)}`, { cause: error });
  }
  let config = module.default;
  if (typeof config === 'function') config = await (config as () => unknown)();
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new UsageError(`--config: ${file} must export default { blueprints, ...createBroker options } (or a function returning it)`);
  }
  const blueprints = (config as SlipwayConfig).blueprints;
  if (!Array.isArray(blueprints) || blueprints.length === 0) throw new UsageError(`--config: ${file} exports no blueprints`);
  return { file, config: config as SlipwayConfig };
}
