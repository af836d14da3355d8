import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Blueprint } from '../blueprint/contract.js';
import type { Broker } from '../broker/index.js';
import { BrokerClosedError } from '../errors/broker-closed-error.js';
import { SlipwayError } from '../errors/slipway-error.js';
import { ValidationError } from '../errors/validation-error.js';
import { LEASE_STATUSES, RESOURCE_STATUSES } from '../model/states.js';
import { CSS, JS } from './assets.js';
import { COOKIE, sameOrigin, type Auth, type Caller } from './auth.js';
import { href, type Markup } from './html.js';
import { errorPage, loginPage, page, type PageContext } from './layout.js';
import type { LiveUpdates } from './live.js';
import type { DashboardSettings } from './options.js';
import { filtersOf, leaseFilters, leasesPage, resourceFilters, resourcesPage } from './pages/lists.js';
import { leasePage, resourcePage } from './pages/object.js';
import { poolsPage } from './pages/pools.js';
import { COMMANDS, readForm } from './writes.js';

/**
 * Only the dashboard's own files run or style a page (no inline code, no other origin),
 * forms post only to it, and no other site may frame it.
 */
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
const SECURITY_HEADERS = {
  'content-security-policy': CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
};

/** One request's path inside the base path, as decoded segments; null when it is outside. */
function routeOf(req: IncomingMessage, base: string): { segments: string[]; query: URLSearchParams; self: string } | null {
  // express hands a mounted handler a shortened req.url, and the full one as originalUrl.
  const raw = (req as { originalUrl?: string }).originalUrl ?? req.url ?? '/';
  const url = new URL(raw.startsWith('/') ? raw : `/${raw}`, 'http://dashboard.invalid');
  let path = url.pathname;
  if (base) {
    if (path === base) path = '/';
    else if (path.startsWith(`${base}/`)) path = path.slice(base.length);
    else return null;
  }
  const segments = path.split('/').filter(Boolean).map((s) => decodeURIComponent(s));
  return { segments, query: url.searchParams, self: `${url.pathname}${url.search}` };
}

export class Router {
  closed = false;

  constructor(
    private readonly broker: Broker,
    private readonly blueprints: ReadonlyMap<string, Blueprint<any, any, any>>,
    private readonly settings: DashboardSettings,
    private readonly auth: Auth,
    private readonly live: LiveUpdates,
  ) {}

  async handle(req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void): Promise<void> {
    const base = this.settings.basePath;
    let route: ReturnType<typeof routeOf>;
    try {
      route = routeOf(req, base);
    } catch {
      return this.send(res, 400, 'text/plain', 'bad request path');
    }
    if (!route) return next ? next() : this.send(res, 404, 'text/html', errorPage(base, 'Not found', 'Nothing here.'));
    if (this.closed) return this.send(res, 503, 'text/plain', 'the dashboard is closed');
    const { segments, query } = route;
    const [first, id] = segments;
    const method = req.method ?? 'GET';

    if (method === 'GET' && first === 'assets' && segments.length === 2) {
      if (id === 'dashboard.css') return this.send(res, 200, 'text/css', CSS, { 'cache-control': 'max-age=300' });
      if (id === 'dashboard.js') return this.send(res, 200, 'text/javascript', JS, { 'cache-control': 'max-age=300' });
    }
    const caller = this.auth.caller(req);
    if (first === 'login' && segments.length === 1) return this.login(req, res, method);
    if (method === 'POST' && first === 'logout' && segments.length === 1) return this.logout(req, res, caller);
    if (method === 'POST') return this.write(req, res, caller, segments);
    if (method !== 'GET' && method !== 'HEAD') return this.send(res, 405, 'text/plain', 'method not allowed', { allow: 'GET, HEAD, POST' });

    // With a token, reading needs it too: owners, attributes and logs may be sensitive.
    if (this.settings.token !== null && caller.kind === 'anonymous') {
      const wantsHtml = first !== 'events' && !query.has('fragment');
      if (wantsHtml) return this.send(res, 303, 'text/plain', 'log in first', { location: `${base}/login` });
      return this.send(res, 401, 'text/plain', 'the dashboard needs its token', { 'www-authenticate': 'Bearer' });
    }
    if (first === 'events' && segments.length === 1) {
      res.setHeader('x-content-type-options', 'nosniff');
      return this.live.open(res);
    }

    const ctx: PageContext = {
      base,
      caller,
      csrf: this.auth.csrf(caller),
      canWrite: this.settings.token !== null && !this.settings.readOnly && caller.kind !== 'anonymous',
      loggedIn: caller.kind === 'session',
      stuckMs: this.settings.stuckAfter.toMillis(),
      nowMs: this.broker.clock.now().toMillis(),
    };
    const fragment = query.has('fragment');
    const fragmentUrl = (() => {
      const q = new URLSearchParams(query);
      q.set('fragment', '1');
      return `${base}/${segments.map(encodeURIComponent).join('/')}?${q}`;
    })();
    const show = (title: string, top: Markup | null, live: Markup | null) => {
      if (!live) return this.send(res, 404, 'text/html', errorPage(base, 'Not found', `No ${title.toLowerCase()} ${id ?? ''}.`));
      return this.send(res, 200, 'text/html', fragment ? live : page(ctx, title, top, live, fragmentUrl));
    };
    try {
      if (segments.length === 0) return show('Pools', null, await poolsPage(this.broker, this.blueprints, ctx));
      if (first === 'leases' && segments.length === 1) {
        const f = filtersOf(query, ['status', 'type', 'owner'], LEASE_STATUSES);
        return show('Leases', leaseFilters(ctx, f), await leasesPage(this.broker, ctx, f));
      }
      if (first === 'resources' && segments.length === 1) {
        const f = filtersOf(query, ['status', 'type', 'blueprint'], RESOURCE_STATUSES);
        return show('Resources', resourceFilters(ctx, f), await resourcesPage(this.broker, ctx, f));
      }
      if (first === 'leases' && id && segments.length === 2) return show('Lease', null, await leasePage(this.broker, ctx, id));
      if (first === 'resources' && id && segments.length === 2) return show('Resource', null, await resourcePage(this.broker, ctx, id));
    } catch (error) {
      return this.failed(res, error);
    }
    return this.send(res, 404, 'text/html', errorPage(base, 'Not found', 'Nothing here.'));
  }

  /**
   * A button's command: the token (bearer or session), a same-origin request, and the
   * CSRF token of the caller, all checked before the command is written through the
   * public API. A form gets 303 back to the object; a script (`Accept: application/json`) 200.
   */
  private async write(req: IncomingMessage, res: ServerResponse, caller: Caller, segments: string[]): Promise<void> {
    const [kind, id, action] = segments;
    const command = segments.length === 3 && id ? COMMANDS[`${kind}/${action}`] : undefined;
    if (!command) return this.send(res, 404, 'text/plain', 'no such command');
    if (this.settings.token === null || this.settings.readOnly) return this.send(res, 403, 'text/plain', 'this dashboard is read-only');
    if (caller.kind === 'anonymous') return this.send(res, 401, 'text/plain', 'the dashboard needs its token', { 'www-authenticate': 'Bearer' });
    if (!sameOrigin(req, caller.kind === 'bearer')) return this.send(res, 403, 'text/plain', 'cross-origin write refused');
    const form = await readForm(req);
    if (!form) return this.send(res, 413, 'text/plain', 'request body too large (or broken off)');
    if (!this.auth.checkCsrf(caller, form.get('csrf') ?? undefined)) return this.send(res, 403, 'text/plain', 'missing or wrong CSRF token');
    try {
      await command(this.broker, id!, form);
    } catch (error) {
      return this.failed(res, error);
    }
    if (/application\/json/.test(req.headers.accept ?? '')) return this.send(res, 200, 'application/json', JSON.stringify({ ok: true }));
    return this.send(res, 303, 'text/plain', 'written', { location: href(this.settings.basePath, [kind!, id!]) });
  }

  private async login(req: IncomingMessage, res: ServerResponse, method: string): Promise<void> {
    const base = this.settings.basePath;
    if (this.settings.token === null) return this.send(res, 303, 'text/plain', 'no token to log in with', { location: `${base}/` });
    if (method === 'GET') return this.send(res, 200, 'text/html', loginPage(base, false));
    if (method !== 'POST') return this.send(res, 405, 'text/plain', 'method not allowed', { allow: 'GET, POST' });
    // A login form posted from another site would log the victim in to the attacker's session.
    if (!sameOrigin(req, false)) return this.send(res, 403, 'text/plain', 'cross-origin login refused');
    const form = await readForm(req);
    if (!form) return this.send(res, 413, 'text/plain', 'request body too large (or broken off)');
    if (!this.auth.checkToken(form.get('token') ?? '')) return this.send(res, 401, 'text/html', loginPage(base, true));
    const session = this.auth.login();
    const secure = (req.socket as { encrypted?: boolean }).encrypted || req.headers['x-forwarded-proto'] === 'https' ? '; Secure' : '';
    return this.send(res, 303, 'text/plain', 'logged in', {
      location: `${base}/`,
      'set-cookie': `${COOKIE}=${session}; HttpOnly; SameSite=Strict; Path=${base || '/'}; Max-Age=43200${secure}`,
    });
  }

  private async logout(req: IncomingMessage, res: ServerResponse, caller: Caller): Promise<void> {
    const base = this.settings.basePath;
    const form = await readForm(req);
    if (!form) return this.send(res, 413, 'text/plain', 'request body too large (or broken off)');
    if (caller.kind !== 'anonymous' && sameOrigin(req, false) && this.auth.checkCsrf(caller, form.get('csrf') ?? undefined)) this.auth.logout(caller);
    return this.send(res, 303, 'text/plain', 'logged out', { location: `${base}/login`, 'set-cookie': `${COOKIE}=; HttpOnly; SameSite=Strict; Path=${base || '/'}; Max-Age=0` });
  }

  private failed(res: ServerResponse, error: unknown): void {
    const base = this.settings.basePath;
    if (error instanceof BrokerClosedError) return this.send(res, 503, 'text/html', errorPage(base, 'Unavailable', 'The broker is closed.'));
    if (error instanceof ValidationError) return this.send(res, 400, 'text/html', errorPage(base, 'Bad request', error.message));
    if (error instanceof SlipwayError) return this.send(res, error.code === 'NOT_FOUND' ? 404 : 409, 'text/html', errorPage(base, 'Refused', error.message));
    return this.send(res, 500, 'text/html', errorPage(base, 'Error', 'The dashboard could not read the broker; see the server log.'));
  }

  private send(res: ServerResponse, status: number, type: string, body: string | Markup, headers: Record<string, string> = {}): void {
    res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': `${type}; charset=utf-8`, ...headers });
    res.end(String(body));
  }
}
