import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { DateTime, Duration } from 'luxon';
import { after, fromDb } from '../lib/time.js';

const root = fileURLToPath(new URL('..', import.meta.url));

// The short roads fromDb and after take must give what luxon's long ones give.
describe('timestamps read from the database', () => {
  test('a Date is the same moment, in UTC', () => {
    const d = new Date('2026-12-06T21:40:00.123Z');
    const at = fromDb(d)!;
    expect(at.toMillis()).toBe(d.getTime());
    expect(at.zoneName).toBe('UTC');
    expect(at.equals(DateTime.fromJSDate(d).toUTC())).toBe(true);
  });

  test.each([
    ['2026-12-06T21:40:00.123456+00:00', '2026-12-06T21:40:00.123Z'],
    ['2026-12-06T22:40:00.123999+01:00', '2026-12-06T21:40:00.123Z'],
    ['2026-12-06T16:40:00-05:00', '2026-12-06T21:40:00.000Z'],
    ['2026-12-06T21:40:00.5Z', '2026-12-06T21:40:00.500Z'],
  ])('the ISO string %s (as JSON carries it) is %s, as luxon reads it', (text, iso) => {
    const at = fromDb(text)!;
    expect(at.toISO()).toBe(iso);
    expect(at.zoneName).toBe('UTC');
    expect(at.toMillis()).toBe(DateTime.fromISO(text).toMillis());
  });

  test('a string with no offset is UTC whatever the local zone (the runtime parser would read local time)', () => {
    // In a process of its own: the local zone is read from TZ when the process starts.
    const code = "import { fromDb } from './lib/time.ts'; process.stdout.write(fromDb('2026-07-06T21:40:00.123').toISO())";
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], { cwd: root, env: { ...process.env, TZ: 'America/New_York' }, encoding: 'utf8' });
    expect(out).toBe('2026-07-06T21:40:00.123Z');
  });

  test('null and undefined are null; a string that is no timestamp is an invalid DateTime, as before', () => {
    expect(fromDb(null)).toBeNull();
    expect(fromDb(undefined)).toBeNull();
    expect(fromDb('garbage')!.isValid).toBe(false);
  });
});

describe('after(at, duration)', () => {
  const at = DateTime.fromISO('2026-01-31T12:00:00.250Z').toUTC();
  test.each([{ seconds: 30 }, { milliseconds: 1 }, { hours: 49, minutes: 3 }, { days: 3 }, { weeks: 2 }])('in UTC, plus %o is luxon plus', (d) => {
    const duration = Duration.fromObject(d);
    expect(after(at, duration).toISO()).toBe(at.plus(duration).toISO());
  });

  test('months and years keep the calendar: January 31 plus a month is February 28', () => {
    expect(after(at, Duration.fromObject({ months: 1 })).toISO()).toBe('2026-02-28T12:00:00.250Z');
    expect(after(at, Duration.fromObject({ years: 1, quarters: 1 })).toISO()).toBe(at.plus({ years: 1, quarters: 1 }).toISO());
  });

  test('a moment in a zone with summer time keeps its wall clock across the change, as luxon does', () => {
    const berlin = DateTime.fromISO('2026-03-28T12:00:00', { zone: 'Europe/Berlin' });
    const next = after(berlin, Duration.fromObject({ days: 1 }));
    expect(next.toISO()).toBe(berlin.plus({ days: 1 }).toISO());
    expect(next.diff(berlin).as('hours')).toBe(23);
  });
});
