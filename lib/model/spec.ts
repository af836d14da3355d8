import type { DateTime, Duration } from 'luxon';
import { ValidationError } from '../errors/validation-error.js';
import { parseDateTime, parseDuration, type DateTimeInput, type DurationInput } from '../time.js';

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** What a host application asks for. */
export interface LeaseSpec<LeaseAttrs extends JsonObject = JsonObject> {
  /** The resource type, as a blueprint declares it (`host`, `working-copy`). */
  type: string;
  /** What blueprints match on (a repository and commit, a host class). Must be JSON. @defaultValue `{}` */
  attributes?: LeaseAttrs;
  /** Names of the blueprints allowed to serve this lease. @defaultValue every blueprint of the type */
  blueprints?: string[];
  /** Who holds the lease, for queries and logs. */
  owner?: string;
  /** The lease expires this long after it is requested. */
  ttl?: DurationInput;
  /** The lease expires at this time. */
  until?: DateTimeInput;
  /** `acquire()` rejects with LeaseTimeoutError, and the lease is released, if it is not active by then. */
  timeout?: DurationInput;
  /** Higher goes first among waiting leases. @defaultValue 0 */
  priority?: number;
  /** Aborting releases a lease that is not active yet and rejects with AbortError. */
  signal?: AbortSignal;
}

export interface NormalizedSpec {
  type: string;
  attributes: JsonObject;
  blueprints: string[] | null;
  owner: string | null;
  ttl: Duration | null;
  until: DateTime | null;
  timeout: Duration | null;
  priority: number;
  signal: AbortSignal | undefined;
}

const SPEC_KEYS = new Set(['type', 'attributes', 'blueprints', 'owner', 'ttl', 'until', 'timeout', 'priority', 'signal']);

/** Checks a spec field by field; the error names the first bad field. Knows nothing of the broker's blueprints. */
export function normalizeSpec(spec: unknown): NormalizedSpec {
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) throw new ValidationError('spec', 'must be an object');
  const s = spec as Record<string, unknown>;
  for (const key of Object.keys(s)) if (!SPEC_KEYS.has(key)) throw new ValidationError(`spec.${key}`, 'is not a known field');
  if (typeof s.type !== 'string' || s.type.trim() === '') throw new ValidationError('spec.type', 'is required: a non-empty string');
  const attributes = s.attributes === undefined ? {} : s.attributes;
  if (attributes === null || typeof attributes !== 'object' || Array.isArray(attributes)) throw new ValidationError('spec.attributes', 'must be a JSON object');
  assertJson(attributes, 'spec.attributes');
  let blueprints: string[] | null = null;
  if (s.blueprints !== undefined) {
    if (!Array.isArray(s.blueprints) || s.blueprints.length === 0 || !s.blueprints.every((b) => typeof b === 'string')) {
      throw new ValidationError('spec.blueprints', 'must be a non-empty array of blueprint names');
    }
    blueprints = [...s.blueprints];
  }
  if (s.owner !== undefined && typeof s.owner !== 'string') throw new ValidationError('spec.owner', 'must be a string');
  if (s.ttl !== undefined && s.until !== undefined) throw new ValidationError('spec.until', 'give ttl or until, not both');
  const ttl = s.ttl === undefined ? null : parseDuration(s.ttl, 'spec.ttl');
  if (ttl && ttl.toMillis() === 0) throw new ValidationError('spec.ttl', 'must be longer than zero');
  const until = s.until === undefined ? null : parseDateTime(s.until, 'spec.until');
  const timeout = s.timeout === undefined ? null : parseDuration(s.timeout, 'spec.timeout');
  if (s.priority !== undefined && !(Number.isInteger(s.priority) && Math.abs(s.priority as number) <= 1_000_000)) {
    throw new ValidationError('spec.priority', 'must be an integer between -1000000 and 1000000');
  }
  if (s.signal !== undefined && !(s.signal instanceof AbortSignal)) throw new ValidationError('spec.signal', 'must be an AbortSignal');
  return {
    type: s.type,
    attributes: attributes as JsonObject,
    blueprints,
    owner: (s.owner as string | undefined) ?? null,
    ttl,
    until,
    timeout,
    priority: (s.priority as number | undefined) ?? 0,
    signal: s.signal as AbortSignal | undefined,
  };
}

/** Rejects what JSON cannot carry faithfully: functions, undefined, NaN, Infinity, class instances, cycles. */
export function assertJson(value: unknown, field: string, seen = new Set<unknown>()): void {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new ValidationError(field, `is not JSON: ${value}`);
    return;
  }
  if (typeof value !== 'object') throw new ValidationError(field, `is not JSON: a ${typeof value}`);
  if (seen.has(value)) throw new ValidationError(field, 'is not JSON: it contains a cycle');
  seen.add(value);
  if (Array.isArray(value)) value.forEach((v, i) => assertJson(v, `${field}[${i}]`, seen));
  else {
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) throw new ValidationError(field, `is not JSON: a ${proto?.constructor?.name ?? 'class'} instance`);
    for (const [k, v] of Object.entries(value)) assertJson(v, `${field}.${k}`, seen);
  }
  seen.delete(value);
}
