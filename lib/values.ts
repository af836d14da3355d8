/**
 * Value checks every layer shares (model, blueprint, store, broker): the lowest layer of
 * `lib/`, importing nothing of it.
 */

/** What a blueprint's name must match: it is a slot-lock and log key, and a CLI argument. */
export const BLUEPRINT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

/**
 * An object literal or `Object.create(null)`, from any realm: its prototype is some
 * realm's `Object.prototype` (whose own prototype is null), or null. Rows parsed by the
 * database driver and values from a vm context (jest) come from another realm.
 */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === null || Object.getPrototypeOf(proto) === null;
}

/** A value as an error message may show it: never throws (a BigInt, a cycle, a null-prototype object). */
export function describeValue(value: unknown): string {
  if (typeof value === 'bigint') return `the BigInt ${value}n`;
  if (typeof value === 'symbol' || typeof value === 'function') return `a ${typeof value}`;
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && !isPlainObject(value)) {
    return `a ${Object.getPrototypeOf(value)?.constructor?.name ?? 'class'} instance`;
  }
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return Array.isArray(value) ? 'an array that is not JSON' : 'an object that is not JSON';
  }
}
