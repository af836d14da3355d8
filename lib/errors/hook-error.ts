import { SlipwayError } from './slipway-error.js';

/** Wraps whatever a blueprint hook threw (an Error or not), naming the hook and blueprint. */
export class HookError extends SlipwayError {
  readonly hook: string;
  readonly blueprint: string;
  constructor(blueprint: string, hook: string, thrown: unknown) {
    super('HOOK_FAILED', `${blueprint}.${hook} failed: ${describeThrown(thrown)}`, { cause: thrown });
    this.hook = hook;
    this.blueprint = blueprint;
  }
}

export function describeThrown(thrown: unknown): string {
  if (thrown instanceof Error) return thrown.message || thrown.name;
  if (typeof thrown === 'string') return thrown;
  try {
    return JSON.stringify(thrown) ?? String(thrown);
  } catch {
    return String(thrown);
  }
}
