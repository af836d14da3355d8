import { DateTime, Duration, FixedOffsetZone, type DurationLike } from 'luxon';
import { ValidationError } from './errors/validation-error.js';
import { describeValue, isPlainObject } from './values.js';

export { describeValue } from './values.js';

/** A duration as the public API accepts it: a luxon Duration, a duration-like object (`{ minutes: 5 }`), an ISO 8601 string (`PT5M`) or milliseconds. */
export type DurationInput = Duration | DurationLike | string;

/** A point in time as the public API accepts it: a luxon DateTime, a Date or an ISO 8601 string. */
export type DateTimeInput = DateTime | Date | string;

export function parseDuration(value: unknown, field: string): Duration {
  let duration: Duration;
  try {
    if (Duration.isDuration(value)) duration = value;
    else if (typeof value === 'number') duration = Duration.fromMillis(value);
    else if (typeof value === 'string') duration = Duration.fromISO(value);
    // Only a plain object is duration-like: a Date (or any class instance) has no own unit keys and would read as zero.
    else if (isPlainObject(value)) duration = Duration.fromObject(value as Record<string, number>);
    else throw new Error('not a duration');
  } catch (error) {
    throw new ValidationError(field, `is not a duration (got ${describeValue(value)}): give a luxon Duration, { minutes: 5 }, an ISO string like "PT5M" or milliseconds`, { cause: error });
  }
  if (!duration.isValid || !Number.isFinite(duration.toMillis())) {
    throw new ValidationError(field, `is not a valid duration (got ${describeValue(value)})`);
  }
  if (duration.toMillis() < 0) throw new ValidationError(field, `must not be negative (${duration.toISO()})`);
  return duration;
}

export function parseDateTime(value: unknown, field: string): DateTime {
  let at: DateTime;
  if (DateTime.isDateTime(value)) at = value;
  else if (value instanceof Date) at = DateTime.fromJSDate(value);
  else if (typeof value === 'string') at = DateTime.fromISO(value);
  else throw new ValidationError(field, `is not a date-time (got ${describeValue(value)}): give a luxon DateTime, a Date or an ISO 8601 string`);
  if (!at.isValid) throw new ValidationError(field, `is not a valid date-time (got ${describeValue(value)})`);
  return at.toUTC();
}

const UTC = FixedOffsetZone.utcInstance;

/** A moment in UTC from epoch milliseconds: the cheapest DateTime luxon makes. */
export function utcMillis(ms: number): DateTime {
  return DateTime.fromMillis(ms, { zone: UTC });
}

/** Ends with Z or a numeric offset: Postgres writes one on every timestamptz, in text and in JSON. */
const WITH_OFFSET = /(?:Z|[+-]\d\d(?::?\d\d)?)$/;

/**
 * Postgres hands back Date objects for timestamptz, and ISO strings inside JSON (a row read
 * with another as JSON); the engine works in luxon, in UTC. Every timestamp of every row read
 * comes through here, so it takes the cheap road: a DateTime made in UTC at once (one made
 * in the local zone and moved to UTC costs eight times as much), and the runtime's own
 * parser for a string with its offset (luxon's is a tenth of the fastest bench's cycle).
 */
export function fromDb(value: Date | string | null | undefined): DateTime | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return utcMillis(value.getTime());
  const ms = WITH_OFFSET.test(value) ? Date.parse(value) : NaN;
  return Number.isNaN(ms) ? DateTime.fromISO(value, { zone: UTC }) : utcMillis(ms);
}

/**
 * `at` plus `duration`, as luxon's `plus`, without its calendar arithmetic where none is
 * needed: a moment in UTC and a duration with no months or years (a day in UTC is always
 * 24 hours). Hot: every claim, hook call and lease pass schedules something.
 */
export function after(at: DateTime, duration: Duration): DateTime {
  if (at.offset === 0 && at.zone.isUniversal && duration.years === 0 && duration.quarters === 0 && duration.months === 0) return utcMillis(at.toMillis() + duration.toMillis());
  return at.plus(duration);
}

export function toDb(value: DateTime | null | undefined): string | null {
  return value ? value.toUTC().toISO() : null;
}

/** A duration as a person reads it in a message: "1.5 seconds", "2 minutes", "250 milliseconds". */
export function humanDuration(duration: Duration): string {
  const ms = duration.toMillis();
  const unit = ms < 1_000 ? 'milliseconds' : ms < 60_000 ? 'seconds' : ms < 3_600_000 ? 'minutes' : 'hours';
  return duration.shiftTo(unit).toHuman({ maximumFractionDigits: 1 });
}
