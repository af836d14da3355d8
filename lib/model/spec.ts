import { Duration, type DateTime } from 'luxon';
import { BLUEPRINT_NAME, describeValue, isPlainObject } from '../values.js';
import { AbortError } from '../errors/abort-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { parseDateTime, parseDuration, type DateTimeInput, type DurationInput } from '../time.js';

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/**
 * A configured blueprint object, as far as a lease spec needs to know it: by name. A
 * `Blueprint` (from `defineBlueprint`) is one; its attribute types are read by the types in
 * `lib/blueprint/typed-leases.ts`, one layer up.
 */
export interface BlueprintRef {
  readonly name: string;
  readonly type: string;
  readonly implementation: object;
}

/** What a host application asks for. */
export interface LeaseSpec<LeaseAttrs extends JsonObject = JsonObject> {
  /** The resource type, as a blueprint declares it (`host`, `working-copy`). */
  type: string;
  /** What blueprints match on (a repository and commit, a host class). Must be JSON. @defaultValue `{}` */
  attributes?: LeaseAttrs;
  /**
   * The blueprints allowed to serve this lease, by name or as the blueprint objects the
   * broker was created with. Given as objects only, they type the lease: `acquire()`
   * resolves to a lease whose `attributes` and `resource.attributes` carry the attribute
   * types those blueprints declare. @defaultValue every blueprint of the type
   */
  blueprints?: ReadonlyArray<string | BlueprintRef>;
  /** Who holds the lease, for queries and logs. */
  owner?: string;
  /** The lease expires this long after it is requested. */
  ttl?: DurationInput;
  /** The lease expires at this time. */
  until?: DateTimeInput;
  /**
   * Renews the ttl from this process while it lives (`true`: every third of the ttl): each
   * renewal moves the expiry to a ttl from then. A holder that dies stops renewing, and
   * the lease expires a ttl later instead of holding its resource until a far expiry.
   * Needs `ttl`. The renewals stop when the lease is released or ends, or the broker closes.
   */
  keepAlive?: boolean | { every: DurationInput };
  /** `acquire()` rejects with LeaseTimeoutError, and the lease is released, if it is not active by then. */
  timeout?: DurationInput;
  /** Higher goes first among waiting leases. @defaultValue 0 */
  priority?: number;
  /** Aborting releases a lease that is not active yet and rejects with AbortError; a signal aborted already rejects before anything is written. */
  signal?: AbortSignal;
}

export interface NormalizedSpec {
  type: string;
  attributes: JsonObject;
  blueprints: string[] | null;
  /** The blueprints `spec.blueprints` gave as objects, by name: each must be the one the broker has under that name. */
  blueprintObjects: ReadonlyMap<string, object>;
  owner: string | null;
  ttl: Duration | null;
  until: DateTime | null;
  /** How often the holder's process renews the ttl; null: never. */
  keepAlive: Duration | null;
  timeout: Duration | null;
  priority: number;
  signal: AbortSignal | undefined;
}

const SPEC_KEYS = new Set(['type', 'attributes', 'blueprints', 'owner', 'ttl', 'until', 'keepAlive', 'timeout', 'priority', 'signal']);

/** The longest `ttl` or `timeout` a spec may give: beyond it the expiry would overflow the date range, and no lease means it. */
export const MAX_SPEC_DURATION = Duration.fromObject({ years: 100 });

/** How deeply attributes may nest: deeper JSON is a mistake, and checking it must not overflow the stack. */
export const MAX_JSON_DEPTH = 100;

/**
 * Checks a spec field by field; the error names the first bad field. Knows nothing of the
 * broker's blueprints. With `now` (the broker's clock), `until` must lie after it: a lease
 * that is expired before it is written is a mistake, not a request.
 */
export function normalizeSpec(spec: unknown, options: { now?: DateTime } = {}): NormalizedSpec {
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) throw new ValidationError('spec', 'must be an object');
  const s = spec as Record<string, unknown>;
  for (const key of Object.keys(s)) if (!SPEC_KEYS.has(key)) throw new ValidationError(`spec.${key}`, 'is not a known field');
  if (typeof s.type !== 'string' || s.type.trim() === '') throw new ValidationError('spec.type', 'is required: a non-empty string');
  assertText(s.type, 'spec.type');
  const attributes = s.attributes === undefined ? {} : s.attributes;
  if (attributes === null || typeof attributes !== 'object' || Array.isArray(attributes)) throw new ValidationError('spec.attributes', 'must be a JSON object');
  assertJson(attributes, 'spec.attributes');
  let blueprints: string[] | null = null;
  const blueprintObjects = new Map<string, object>();
  if (s.blueprints !== undefined) {
    if (!Array.isArray(s.blueprints) || s.blueprints.length === 0) throw new ValidationError('spec.blueprints', 'must be a non-empty array of blueprint names or blueprints');
    blueprints = [];
    // An index loop, not every(): every() skips the holes of a sparse array.
    for (let i = 0; i < s.blueprints.length; i++) {
      const given: unknown = s.blueprints[i];
      const name: unknown = isBlueprintObject(given) ? given.name : given;
      if (typeof name !== 'string' || !BLUEPRINT_NAME.test(name)) {
        throw new ValidationError(`spec.blueprints[${i}]`, `must be a blueprint name matching ${BLUEPRINT_NAME}, or a blueprint (got ${describeValue(given)})`);
      }
      if (isBlueprintObject(given)) {
        if (blueprintObjects.has(name) && blueprintObjects.get(name) !== given) throw new ValidationError(`spec.blueprints[${i}]`, `two different blueprints are named "${name}"`);
        blueprintObjects.set(name, given);
      }
      blueprints.push(name);
    }
  }
  if (s.owner !== undefined && (typeof s.owner !== 'string' || s.owner === '')) throw new ValidationError('spec.owner', 'must be a non-empty string');
  if (s.owner !== undefined) assertText(s.owner as string, 'spec.owner');
  if (s.ttl !== undefined && s.until !== undefined) throw new ValidationError('spec.until', 'give ttl or until, not both');
  const ttl = s.ttl === undefined ? null : boundedDuration(s.ttl, 'spec.ttl');
  const until = s.until === undefined ? null : expiryTime(s.until, 'spec.until', options.now);
  const keepAlive = keepAliveInterval(s.keepAlive, ttl, s.until !== undefined);
  const timeout = s.timeout === undefined ? null : boundedDuration(s.timeout, 'spec.timeout');
  if (s.priority !== undefined && !(Number.isInteger(s.priority) && Math.abs(s.priority as number) <= 1_000_000)) {
    throw new ValidationError('spec.priority', 'must be an integer between -1000000 and 1000000');
  }
  if (s.signal !== undefined && !(s.signal instanceof AbortSignal)) throw new ValidationError('spec.signal', 'must be an AbortSignal');
  // Like fetch(): an aborted signal refuses the request before anything is written.
  if ((s.signal as AbortSignal | undefined)?.aborted) throw new AbortError('the lease request was aborted before it was made', { cause: (s.signal as AbortSignal).reason });
  return {
    type: s.type,
    attributes: attributes as JsonObject,
    blueprints,
    blueprintObjects,
    owner: (s.owner as string | undefined) ?? null,
    ttl,
    until,
    keepAlive,
    timeout,
    priority: (s.priority as number | undefined) ?? 0,
    signal: s.signal as AbortSignal | undefined,
  };
}

/** A configured blueprint, as a factory of `defineBlueprint` returns it (not a name). */
function isBlueprintObject(value: unknown): value is { name: unknown } {
  return value !== null && typeof value === 'object' && 'implementation' in value && 'name' in value;
}

/** A duration longer than zero and at most MAX_SPEC_DURATION. */
/**
 * An expiry as a caller gives it (`until`): a date-time Postgres stores as given, and with
 * `now` (the broker's clock) one after it: a lease that expires before it is written is a
 * mistake, not a request.
 */
export function expiryTime(value: unknown, field: string, now?: DateTime): DateTime {
  const until = parseDateTime(value, field);
  // Postgres and luxon agree on four-digit years; later ones do not survive the round trip.
  if (until.year < 1 || until.year > 9999) throw new ValidationError(field, `must be between the years 1 and 9999 (got ${until.toISO()})`);
  if (now && until <= now) throw new ValidationError(field, `must be in the future (got ${until.toISO()}, the broker's clock says ${now.toUTC().toISO()})`);
  return until;
}

/** `spec.keepAlive`: how often the holder's process renews the lease's ttl, or null. By default a third of the ttl. */
function keepAliveInterval(value: unknown, ttl: Duration | null, hasUntil: boolean): Duration | null {
  if (value === undefined || value === false) return null;
  const field = 'spec.keepAlive';
  if (value !== true && !(isPlainObject(value) && Object.keys(value).every((k) => k === 'every'))) {
    throw new ValidationError(field, `must be true or { every: duration } (got ${describeValue(value)})`);
  }
  if (!ttl) throw new ValidationError(field, hasUntil ? 'renews a ttl: give spec.ttl instead of spec.until' : 'renews a ttl: give spec.ttl too');
  if (value === true || (value as { every?: unknown }).every === undefined) return Duration.fromMillis(Math.max(10, Math.floor(ttl.toMillis() / 3)));
  const every = boundedDuration((value as { every: unknown }).every, 'spec.keepAlive.every');
  if (every.toMillis() < 10) throw new ValidationError('spec.keepAlive.every', 'must be at least 10 milliseconds');
  if (every >= ttl) throw new ValidationError('spec.keepAlive.every', `must be shorter than spec.ttl (${ttl.toISO()}), or the lease expires between two renewals`);
  return every;
}

export function boundedDuration(value: unknown, field: string): Duration {
  const duration = parseDuration(value, field);
  if (duration.toMillis() === 0) throw new ValidationError(field, 'must be longer than zero');
  if (duration.toMillis() > MAX_SPEC_DURATION.toMillis()) throw new ValidationError(field, `must be at most ${MAX_SPEC_DURATION.toHuman()} (got ${duration.toISO()})`);
  return duration;
}

// A lone UTF-16 surrogate: Postgres refuses it in jsonb, and in text it silently becomes U+FFFD.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** Rejects strings Postgres cannot store as they are: a NUL character or a lone surrogate. */
export function assertText(value: string, field: string): void {
  if (value.includes('\0')) throw new ValidationError(field, 'must not contain a NUL character (\\u0000)');
  if (LONE_SURROGATE.test(value)) throw new ValidationError(field, 'must be well-formed Unicode (it holds a lone surrogate)');
}

/**
 * Rejects what JSON cannot carry faithfully: functions, undefined, NaN, Infinity, class
 * instances, cycles, symbol keys, holes in arrays; strings Postgres cannot store (NUL, lone
 * surrogates); nesting deeper than MAX_JSON_DEPTH.
 */
export function assertJson(value: unknown, field: string, seen = new Set<unknown>()): void {
  if (value === null || typeof value === 'boolean') return;
  if (typeof value === 'string') return assertText(value, field);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new ValidationError(field, `is not JSON: ${value}`);
    return;
  }
  if (typeof value !== 'object') throw new ValidationError(field, `is not JSON: a ${typeof value}`);
  if (seen.has(value)) throw new ValidationError(field, 'is not JSON: it contains a cycle');
  if (seen.size >= MAX_JSON_DEPTH) throw new ValidationError(field, `nests deeper than ${MAX_JSON_DEPTH} levels`);
  seen.add(value);
  if (Object.getOwnPropertySymbols(value).length > 0) throw new ValidationError(field, 'is not JSON: it has symbol keys');
  if (Array.isArray(value)) {
    // An index loop, not forEach(): forEach() skips holes, which JSON would turn into null.
    for (let i = 0; i < value.length; i++) {
      if (!(i in value)) throw new ValidationError(`${field}[${i}]`, 'is not JSON: a hole in a sparse array');
      assertJson(value[i], `${field}[${i}]`, seen);
    }
  } else {
    if (!isPlainObject(value)) throw new ValidationError(field, `is not JSON: a ${Object.getPrototypeOf(value)?.constructor?.name ?? 'class'} instance`);
    for (const [k, v] of Object.entries(value)) {
      if (k.includes('\0') || LONE_SURROGATE.test(k)) throw new ValidationError(field, `has a key Postgres cannot store (${JSON.stringify(k)}): no NUL characters or lone surrogates`);
      assertJson(v, `${field}.${k}`, seen);
    }
  }
  seen.delete(value);
}

