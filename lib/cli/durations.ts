import { DateTime, Duration } from 'luxon';
import { UsageError } from './errors.js';

const UNITS: Record<string, string> = { ms: 'milliseconds', s: 'seconds', m: 'minutes', h: 'hours', d: 'days', w: 'weeks' };
const SHORT = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+$/;

/**
 * A duration as a person types it: `30m`, `2h`, `1h30m`, `7d`, `500ms`, or ISO 8601
 * (`PT5M`, `P7D`, which the library's parseDuration reads).
 */
export function parseCliDuration(text: string, flag: string): Duration {
  const trimmed = text.trim();
  if (SHORT.test(trimmed)) {
    const parts: Record<string, number> = {};
    for (const [, amount, unit] of trimmed.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/g)) {
      const key = UNITS[unit!]!;
      parts[key] = (parts[key] ?? 0) + Number(amount);
    }
    return Duration.fromObject(parts);
  }
  if (/^P/i.test(trimmed)) {
    // What the library's parseDuration reads from a string: luxon's ISO 8601, never negative.
    const duration = Duration.fromISO(trimmed.toUpperCase());
    if (duration.isValid && Number.isFinite(duration.toMillis()) && duration.toMillis() >= 0) return duration;
  }
  throw new UsageError(`${flag}: ${JSON.stringify(text)} is not a duration (examples: 30m, 2h, 1h30m, 7d, PT5M)`);
}

/** An absolute time (`--until`): ISO 8601, in the future. */
export function parseCliDateTime(text: string, flag: string, now: DateTime): DateTime {
  const at = DateTime.fromISO(text.trim(), { setZone: true });
  if (!at.isValid) throw new UsageError(`${flag}: ${JSON.stringify(text)} is not an ISO 8601 date-time (example: 2030-01-01T12:00:00Z)`);
  if (at <= now) throw new UsageError(`${flag}: ${at.toUTC().toISO()} is in the past`);
  return at.toUTC();
}
