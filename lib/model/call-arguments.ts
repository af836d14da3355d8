import { ValidationError } from '../errors/validation-error.js';
import { describeValue, isPlainObject } from '../values.js';
import { assertText } from './spec.js';

/**
 * Checks of the arguments of the broker's public calls (release, list, logs, on, ...),
 * run before anything is read or written. Each error names the bad argument or key.
 */

/** A whole-number option within [min, max] (a limit, a count). */
export function checkIntegerIn(value: unknown, field: string, min: number, max: number): number {
  if (!(Number.isInteger(value) && (value as number) >= min && (value as number) <= max)) {
    throw new ValidationError(field, `must be an integer from ${min} to ${max} (got ${describeValue(value)})`);
  }
  return value as number;
}

/** `checkIntegerIn`, where absent stays absent. */
export function optionalIntegerIn(value: unknown, field: string, min: number, max: number): number | undefined {
  return value === undefined ? undefined : checkIntegerIn(value, field, min, max);
}

/** A text argument or option (an id, a reason, an author): a non-empty string Postgres can store. */
export function checkText(value: unknown, field: string): string {
  if (typeof value !== 'string' || value === '') throw new ValidationError(field, `must be a non-empty string (got ${describeValue(value)})`);
  assertText(value, field);
  return value;
}

/** An optional text option: undefined, or what checkText accepts. */
export function optionalText(value: unknown, field: string): string | undefined {
  return value === undefined ? undefined : checkText(value, field);
}

/**
 * The options (or query, or filter) object of a call: undefined for none, else a plain
 * object with only `known` keys. A misspelt key is refused rather than ignored: ignored,
 * it would quietly do something else than asked (list every lease, drop the reason).
 */
export function checkOptions(value: unknown, known: readonly string[], where: { call: string; field?: string }): Record<string, unknown> {
  const field = where.field ?? 'options';
  if (value === undefined) return {};
  if (!isPlainObject(value)) throw new ValidationError(field, `${where.call}() takes an object with the keys ${known.join(', ')} (got ${describeValue(value)})`);
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) throw new ValidationError(key, `is not an option of ${where.call}() (known: ${known.join(', ')})`);
  }
  return value;
}

/** A query or filter object: known keys only, and the `text` ones non-empty strings when given. */
export function checkFilter(value: unknown, where: { call: string; field: string }, text: readonly string[], other: readonly string[] = []): Record<string, unknown> {
  const filter = checkOptions(value, [...other, ...text], where);
  for (const key of text) optionalText(filter[key], key);
  return filter;
}

/** The `{ reason?, author? }` of a command a host application writes (release, reclaim, break). */
export function checkCommandOptions(value: unknown, call: string, known: ReadonlyArray<'reason' | 'author'>): { reason?: string; author?: string } {
  const o = checkOptions(value, known, { call });
  return { reason: optionalText(o.reason, 'reason'), author: optionalText(o.author, 'author') };
}

/** A `wait` option: undefined or a boolean (a string such as "no" is truthy, and would wait). */
export function optionalBoolean(value: unknown, field: string): boolean | undefined {
  if (value !== undefined && typeof value !== 'boolean') throw new ValidationError(field, `must be a boolean (got ${describeValue(value)})`);
  return value;
}

/** A `signal` option: undefined or an AbortSignal. */
export function optionalSignal(value: unknown, field: string): AbortSignal | undefined {
  if (value !== undefined && !(value instanceof AbortSignal)) throw new ValidationError(field, `must be an AbortSignal (got ${describeValue(value)})`);
  return value;
}

/** The arguments of `broker.on(event, listener)`. */
export function checkSubscription(event: unknown, listener: unknown, known: readonly string[]): void {
  if (typeof event !== 'string' || !known.includes(event)) throw new ValidationError('event', `must be one of ${known.join(', ')} (got ${describeValue(event)})`);
  if (typeof listener !== 'function') throw new ValidationError('listener', `must be a function (got ${describeValue(listener)})`);
}
