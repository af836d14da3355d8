import { inspect } from 'node:util';
import { SlipwayError } from './slipway-error.js';

/**
 * Wraps whatever a blueprint hook threw (an Error or not), naming the hook and blueprint:
 * the message is `<blueprint>.<hook> failed: <reason>`, what a broken object's reason says.
 */
export class HookError extends SlipwayError {
  readonly hook: string;
  readonly blueprint: string;
  /** What was thrown, described: the message without the `<blueprint>.<hook> failed: ` prefix (a `hook.failure` log's `error`). */
  readonly reason: string;
  constructor(blueprint: string, hook: string, thrown: unknown) {
    const reason = describeThrown(thrown);
    super('HOOK_FAILED', `${blueprint}.${hook} failed: ${reason}`, { cause: thrown });
    this.hook = hook;
    this.blueprint = blueprint;
    this.reason = reason;
  }
}

/**
 * Whatever a hook threw, as text a log row can hold. Never throws itself, whatever the value
 * (a cycle, a null prototype, a toString that throws, a revoked Proxy), and never returns what
 * Postgres refuses to store (a NUL character or a lone surrogate, in text or jsonb).
 */
export function describeThrown(thrown: unknown): string {
  return storable(describe(thrown));
}

function describe(thrown: unknown): string {
  try {
    if (thrown instanceof Error) return typeof thrown.message === 'string' && thrown.message ? thrown.message : String(thrown.name);
  } catch {
    // a revoked Proxy, or a message getter that throws: described as a value below
  }
  if (typeof thrown === 'string') return thrown;
  try {
    const json = JSON.stringify(thrown);
    // `{}` for an object with keys: JSON dropped them (functions, symbols); inspect shows them.
    if (json !== undefined && !(json === '{}' && Reflect.ownKeys(thrown as object).length > 0)) return json;
  } catch {
    // a cycle, a BigInt, a toJSON that throws: inspect copes with all of them
  }
  try {
    return inspect(thrown, { depth: 2, breakLength: Infinity });
  } catch {
    return `a thrown ${typeof thrown} that cannot be described`;
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

function storable(text: string): string {
  return text.replaceAll('\u0000', '\\u0000').replace(LONE_SURROGATE, '\uFFFD');
}
