import type { Duration } from 'luxon';
import { ValidationError } from '../errors/validation-error.js';
import { checkOptions } from '../model/call-arguments.js';
import { parseDuration, type DurationInput } from '../time.js';
import { describeValue } from '../values.js';

export interface DashboardOptions {
  /**
   * The path the dashboard is mounted under (`/slipway`): its links, its cookie's `Path`
   * and its routes all start with it. Requests outside it get 404 (or go to `next` under
   * express). Letters, digits and `-._~`, segments starting with `/`, no trailing `/`.
   * @defaultValue `''` (the root)
   */
  basePath?: string;
  /**
   * The secret that unlocks the dashboard: with it set, every page needs it (as
   * `Authorization: Bearer <token>`, or a session cookie from the login form), and, unless
   * `readOnly`, the release, reclaim and break buttons appear. At least 16 characters.
   * Without it, the pages are open to whoever reaches the port, and there are no buttons.
   * @defaultValue none: read-only pages open to anyone who can connect
   */
  token?: string;
  /** No buttons, and every write refused (403), even with the token. @defaultValue false */
  readOnly?: boolean;
  /**
   * An object longer than this in a transitional state (allocating, released, broken,
   * destroying; a lease waiting) is highlighted as stuck. The same default as
   * `slipway stats --stuck-after`.
   * @defaultValue 10 minutes
   */
  stuckAfter?: DurationInput;
  /**
   * How often the server re-reads `broker.stats()` while a page listens, to catch the
   * changes no event or LISTEN hint told of (a backstop, like the workers' sweep). At least 1 second.
   * @defaultValue 5 seconds
   */
  sweepInterval?: DurationInput;
}

export interface DashboardSettings {
  basePath: string;
  token: string | null;
  readOnly: boolean;
  stuckAfter: Duration;
  sweepInterval: Duration;
}

const KNOWN = ['basePath', 'token', 'readOnly', 'stuckAfter', 'sweepInterval'] as const;
const BASE_PATH = /^(\/[A-Za-z0-9._~-]+)*$/;

/** Checks `createDashboard`'s options; each error names the bad field. */
export function checkDashboardOptions(options: unknown): DashboardSettings {
  const o = checkOptions(options, KNOWN, { call: 'createDashboard' }) as DashboardOptions;
  const basePath = o.basePath ?? '';
  if (typeof basePath !== 'string' || !BASE_PATH.test(basePath) || /(^|\/)\.\.?($|\/)/.test(basePath)) {
    throw new ValidationError('basePath', `must be '' or a path like /slipway (segments of letters, digits and -._~, no trailing /) (got ${describeValue(o.basePath)})`);
  }
  if (o.token !== undefined && (typeof o.token !== 'string' || o.token.length < 16 || o.token.length > 1024 || /[^\x21-\x7e]/.test(o.token))) {
    throw new ValidationError('token', 'must be a string of 16 to 1024 printable ASCII characters, no spaces (a random one: openssl rand -hex 32)');
  }
  if (o.readOnly !== undefined && typeof o.readOnly !== 'boolean') throw new ValidationError('readOnly', `must be a boolean (got ${describeValue(o.readOnly)})`);
  const stuckAfter = parseDuration(o.stuckAfter ?? { minutes: 10 }, 'stuckAfter');
  const sweepInterval = parseDuration(o.sweepInterval ?? { seconds: 5 }, 'sweepInterval');
  if (sweepInterval.toMillis() < 1000) throw new ValidationError('sweepInterval', 'must be at least 1 second: the sweep reads the database');
  return { basePath, token: o.token ?? null, readOnly: o.readOnly ?? false, stuckAfter, sweepInterval };
}
