import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/**
 * Who a request is, for a dashboard with a token: the token itself (`Authorization:
 * Bearer`), or a session cookie that logging in with the token set. Sessions live in this
 * process (a restart logs everyone out) and expire after `SESSION_TTL_MS`.
 */
export type Caller = { kind: 'bearer' } | { kind: 'session'; id: string } | { kind: 'anonymous' };

export const COOKIE = 'slipway_session';
const SESSION_TTL_MS = 12 * 3600_000;
const MAX_SESSIONS = 10_000;

/** Equal strings, in time that does not depend on where they differ (HMACs of both: equal lengths). */
export function sameSecret(given: string, expected: string, key: Buffer): boolean {
  const a = createHmac('sha256', key).update(given).digest();
  const b = createHmac('sha256', key).update(expected).digest();
  return timingSafeEqual(a, b);
}

export class Auth {
  /** A per-dashboard key: the HMAC of comparisons and of CSRF tokens. */
  private readonly key = randomBytes(32);
  private readonly sessions = new Map<string, number>();

  constructor(private readonly token: string | null) {}

  /** The caller of a request, from its bearer token or its session cookie. */
  caller(req: IncomingMessage): Caller {
    if (this.token === null) return { kind: 'anonymous' };
    const header = req.headers.authorization;
    if (typeof header === 'string' && /^Bearer /i.test(header) && sameSecret(header.slice(7).trim(), this.token, this.key)) return { kind: 'bearer' };
    const id = cookieOf(req, COOKIE);
    if (id) {
      const until = this.sessions.get(id);
      if (until !== undefined && until > Date.now()) return { kind: 'session', id };
      this.sessions.delete(id);
    }
    return { kind: 'anonymous' };
  }

  /** Whether a login form's token is the dashboard's. */
  checkToken(given: string): boolean {
    return this.token !== null && sameSecret(given, this.token, this.key);
  }

  /** A new session: its id, for the cookie. */
  login(): string {
    const now = Date.now();
    for (const [id, until] of this.sessions) if (until <= now) this.sessions.delete(id);
    // Bounded: a flood of logins (each needs the token) cannot grow the map without end.
    if (this.sessions.size >= MAX_SESSIONS) this.sessions.delete(this.sessions.keys().next().value!);
    const id = randomBytes(32).toString('base64url');
    this.sessions.set(id, now + SESSION_TTL_MS);
    return id;
  }

  logout(caller: Caller): void {
    if (caller.kind === 'session') this.sessions.delete(caller.id);
  }

  /** The CSRF token of a caller: an HMAC of its session, so a page of another session cannot reuse it. */
  csrf(caller: Caller): string {
    const subject = caller.kind === 'session' ? `session:${caller.id}` : caller.kind;
    return createHmac('sha256', this.key).update(`csrf:${subject}`).digest('base64url');
  }

  checkCsrf(caller: Caller, given: string | undefined): boolean {
    return typeof given === 'string' && sameSecret(given, this.csrf(caller), this.key);
  }
}

/** A cookie's value from the Cookie header. */
export function cookieOf(req: IncomingMessage, name: string): string | null {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim() || null;
  }
  return null;
}

/**
 * Whether a write comes from a page of this dashboard's own origin. A browser sends
 * `Origin` (or at least `Sec-Fetch-Site` or `Referer`) with every form POST; each one given
 * must name this host. A request with none of them is no browser's cross-site form: it is
 * let through here only when `allowBare` (a bearer token: a script, which a browser cannot
 * send cross-site without a CORS preflight this dashboard never grants).
 */
export function sameOrigin(req: IncomingMessage, allowBare: boolean): boolean {
  const host = req.headers.host;
  if (!host) return false;
  const hostOf = (url: string) => {
    try {
      return new URL(url).host;
    } catch {
      return null;
    }
  };
  const origin = req.headers.origin;
  const site = req.headers['sec-fetch-site'];
  const referer = req.headers.referer;
  if (origin === undefined && site === undefined && referer === undefined) return allowBare;
  if (origin !== undefined && hostOf(origin) !== host) return false;
  if (site !== undefined && site !== 'same-origin') return false;
  if (referer !== undefined && hostOf(referer) !== host) return false;
  return true;
}
