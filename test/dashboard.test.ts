/**
 * slipway/dashboard over real HTTP (node:http on 127.0.0.1), on a `createBroker` broker on
 * the real clock: options, who may read and write (token, session cookie, CSRF, origin),
 * the XSS corpus, pages of lists, mounting under a base path (as node:http and express
 * do), and the live updates' event stream. The browser's side is dashboard-browser.test.ts.
 */
import { createBroker, internals, type Broker } from '../lib/broker/index.js';
import { createDashboard, type Dashboard } from '../lib/dashboard/index.js';
import { escapeHtml } from '../lib/dashboard/html.js';
import { ValidationError } from '../lib/errors/validation-error.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, realBroker, track } from './helpers/broker.js';
import { commandCount, serve, XSS_PAYLOADS } from './helpers/dashboard.js';
import { until } from './helpers/pump.js';
import { describeOnPostgres, testDatabase, tierUrl } from './helpers/tier.js';

guardBrokers();

const TOKEN = 'test-token-0123456789abcdef';
const BEARER = { authorization: `Bearer ${TOKEN}` };

let cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.reverse()) await c();
  cleanups = [];
});

/** A broker whose one exclusive resource serves one lease at a time: a second lease waits. */
async function pool(extra: Parameters<typeof fakeBlueprint>[0] = {}): Promise<Broker> {
  return realBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host', exclusive: true, limits: { maxResources: 1 }, ...extra })] });
}

async function mounted(broker: Broker, options: Parameters<typeof createDashboard>[1] = {}): Promise<{ url: string; dashboard: Dashboard }> {
  const dashboard = createDashboard(broker, options);
  const server = await serve(dashboard);
  cleanups.push(async () => {
    await dashboard.close();
    await server.close();
  });
  return { url: server.url, dashboard };
}

/** The tags of a page: escaped text holds no `<`, so every tag is the dashboard's own. */
function tagsOf(html: string): string[] {
  return [...html.matchAll(/<[^>]*>/g)].map((m) => m[0]);
}

describe('options', () => {
  // One broker for the checks (none of them reads it); outside the leak guard, closed after the last.
  let shared: Broker;
  beforeAll(async () => {
    shared = await createBroker({ database: testDatabase() });
  });
  afterAll(() => shared.close());

  test.each([
    [{ basePath: 'dash' }, 'basePath'],
    [{ basePath: '/dash/' }, 'basePath'],
    [{ basePath: '/da sh' }, 'basePath'],
    [{ basePath: '/a/../b' }, 'basePath'],
    [{ basePath: '/"><x' }, 'basePath'],
    [{ token: 'short' }, 'token'],
    [{ token: 'has a space in it, sixteen+' }, 'token'],
    [{ token: 12345678901234567 }, 'token'],
    [{ readOnly: 'yes' }, 'readOnly'],
    [{ stuckAfter: 'soon' }, 'stuckAfter'],
    [{ sweepInterval: { milliseconds: 10 } }, 'sweepInterval'],
    [{ tokn: TOKEN }, 'tokn'],
  ])('%j is refused naming %s', (options, field) => {
    let thrown: unknown;
    try {
      createDashboard(shared, options as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ValidationError);
    expect((thrown as ValidationError).field).toBe(field);
  });

  test('something that is not a broker, or options that are not an object, are refused', () => {
    expect(() => createDashboard({} as Broker)).toThrow(ValidationError);
    expect(() => createDashboard(shared, 'x' as never)).toThrow(expect.objectContaining({ field: 'options' }));
  });
});

describe('reading', () => {
  test('the pools page shows the pool policies: idle with the warm target, and a draining blueprint', async () => {
    const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'warm', type: 'host', limits: { minIdle: 2, maxResources: 4 } })] });
    const { url } = await mounted(broker);
    await until('the warm pool built', async () => (await broker.stats()).blueprints.warm!.idle === 2);
    let pools = await (await fetch(url)).text();
    expect(pools).toMatch(/<td class="n">2 <span class="tag"[^>]*>warm 2<\/span><\/td>/);
    expect(pools).not.toContain('>draining<');
    await broker.drainBlueprint('warm');
    pools = await (await fetch(url)).text();
    expect(pools).toMatch(/>warm<\/a> <span class="tag"[^>]*>draining<\/span>/);
    await broker.close();
  });

  test('without a token: every page opens, with a strict CSP and nosniff, and has no buttons', async () => {
    const broker = await pool();
    const lease = await broker.acquire({ type: 'host', owner: 'alice' });
    const { url } = await mounted(broker);
    for (const path of ['/', '/leases', '/resources', `/leases/${lease.id}`, `/resources/${lease.resource.id}`, '/leases?status=active&owner=alice']) {
      const res = await fetch(url + path);
      const text = await res.text();
      expect([path, res.status]).toEqual([path, 200]);
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'self';/);
      expect(text).not.toMatch(/<script>|<style>|\son\w+=/);
      expect(text).not.toContain('method="post"');
    }
    const pools = await (await fetch(url)).text();
    expect(pools).toContain('data-blueprint="pool"');
    // The allocation limit in force: max(1, ceil(25% × 1 active)) = 1, and the cap.
    expect(pools).toMatch(/1 at once<\/span><br><span[^>]*>max 1</);
    const leasePage = await (await fetch(`${url}/leases/${lease.id}`)).text();
    expect(leasePage).toContain(`href="/resources/${lease.resource.id}"`);
    expect(leasePage).toMatch(/<ol class="timeline">.*status-pending.*status-acquired.*status-active/s);
    const js = await fetch(`${url}/assets/dashboard.js`);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(await js.text()).toContain("new EventSource(events)");
    expect((await fetch(`${url}/nothing`)).status).toBe(404);
    expect((await fetch(`${url}/leases/lease_nope`)).status).toBe(404);
    await lease.release();
    await broker.close();
  });

  test('with a token: pages need it (a browser is sent to log in, a fragment or stream gets 401); the bearer token opens them', async () => {
    const broker = await pool();
    const { url } = await mounted(broker, { token: TOKEN });
    const anonymous = await fetch(url, { redirect: 'manual' });
    expect(anonymous.status).toBe(303);
    expect(anonymous.headers.get('location')).toBe('/login');
    expect((await fetch(`${url}/?fragment=1`)).status).toBe(401);
    expect((await fetch(`${url}/events`)).status).toBe(401);
    expect((await fetch(url, { headers: { authorization: 'Bearer wrong-token-0123456789' }, redirect: 'manual' })).status).toBe(303);
    const page = await fetch(url, { headers: BEARER });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<h2>Resources by blueprint</h2>');
    // Assets hold no data: open to all.
    expect((await fetch(`${url}/assets/dashboard.css`)).status).toBe(200);
    await broker.close();
  });

  test('stuck objects are highlighted past stuckAfter', async () => {
    const broker = await pool({ answers: { canAllocate: () => false } });
    await broker.requestLease({ type: 'host', owner: 'waits' });
    const { url } = await mounted(broker, { stuckAfter: { milliseconds: 1 } });
    await until('the lease to wait a moment', async () => (await (await fetch(url)).text()).includes('class="age stuck"'));
    expect(await (await fetch(url)).text()).toMatch(/<tr data-type="host">.*<span class="age stuck">/s);
    await broker.close();
  });
});

describe('writing', () => {
  /** A logged-in session: its cookie and the CSRF token of its pages. */
  async function login(url: string, base = ''): Promise<{ cookie: string; csrf: string }> {
    const res = await fetch(`${url}${base}/login`, { method: 'POST', body: new URLSearchParams({ token: TOKEN }), headers: { origin: url }, redirect: 'manual' });
    expect(res.status).toBe(303);
    const setCookie = res.headers.get('set-cookie')!;
    expect(setCookie).toMatch(/^slipway_session=[\w-]{40,}; HttpOnly; SameSite=Strict; Path=/);
    const cookie = setCookie.split(';')[0]!;
    const page = await (await fetch(`${url}${base}/leases`, { headers: { cookie } })).text();
    return { cookie, csrf: /name="csrf" value="([^"]+)"/.exec(page)![1]! };
  }

  test('a write without the token, the CSRF token or a same-origin request is refused, and no command is written', async () => {
    const broker = await pool();
    const lease = await broker.acquire({ type: 'host', owner: 'alice' });
    const { url } = await mounted(broker, { token: TOKEN });
    const release = `${url}/leases/${lease.id}/release`;
    const before = await commandCount(broker);
    const session = await login(url);
    const bearerCsrf = /name="csrf" value="([^"]+)"/.exec(await (await fetch(`${url}/leases/${lease.id}`, { headers: BEARER })).text())![1]!;
    const refused: Array<[string, RequestInit, number]> = [
      ['no credentials', { headers: { origin: url }, body: new URLSearchParams({ csrf: session.csrf }) }, 401],
      ['a wrong bearer token', { headers: { origin: url, authorization: 'Bearer not-the-token-0123456' }, body: new URLSearchParams({ csrf: bearerCsrf }) }, 401],
      ['a made-up session', { headers: { origin: url, cookie: 'slipway_session=abc' }, body: new URLSearchParams({ csrf: session.csrf }) }, 401],
      ['bearer without CSRF', { headers: { ...BEARER } }, 403],
      ['bearer, a body over 16 KB', { headers: { ...BEARER }, body: `csrf=${bearerCsrf}&reason=${'x'.repeat(20_000)}` }, 413],
      ['bearer with another origin', { headers: { ...BEARER, origin: 'http://evil.example' }, body: new URLSearchParams({ csrf: bearerCsrf }) }, 403],
      ['session without CSRF', { headers: { cookie: session.cookie, origin: url } }, 403],
      ['session with the bearer CSRF', { headers: { cookie: session.cookie, origin: url }, body: new URLSearchParams({ csrf: bearerCsrf }) }, 403],
      ['session with no origin headers', { headers: { cookie: session.cookie }, body: new URLSearchParams({ csrf: session.csrf }) }, 403],
      ['session from another site', { headers: { cookie: session.cookie, origin: 'http://evil.example' }, body: new URLSearchParams({ csrf: session.csrf }) }, 403],
      ['session, Sec-Fetch-Site cross-site', { headers: { cookie: session.cookie, 'sec-fetch-site': 'cross-site' }, body: new URLSearchParams({ csrf: session.csrf }) }, 403],
      ['session, Referer of another site', { headers: { cookie: session.cookie, referer: 'http://evil.example/x' }, body: new URLSearchParams({ csrf: session.csrf }) }, 403],
    ];
    for (const [what, init, status] of refused) {
      const res = await fetch(release, { method: 'POST', redirect: 'manual', ...init });
      expect([what, res.status]).toEqual([what, status]);
    }
    expect(await commandCount(broker)).toBe(before);
    expect((await broker.leases.get(lease.id))!.status).toBe('active');

    const ok = await fetch(release, { method: 'POST', redirect: 'manual', headers: { cookie: session.cookie, origin: url, 'sec-fetch-site': 'same-origin' }, body: new URLSearchParams({ csrf: session.csrf }) });
    expect(ok.status).toBe(303);
    expect(ok.headers.get('location')).toBe(`/leases/${lease.id}`);
    await until('the lease to be destroyed', async () => (await broker.leases.get(lease.id))!.status === 'destroyed');
    expect((await broker.logs({ lease: lease.id })).find((e) => e.type === 'lease.released')?.data).toEqual({ reason: 'released from the dashboard', author: 'dashboard' });
    await broker.close();
  });

  test('a script with the bearer token and its CSRF token writes; resource buttons release, reclaim and break', async () => {
    const broker = await pool();
    const lease = await broker.acquire({ type: 'host' });
    const { url } = await mounted(broker, { token: TOKEN });
    const page = await (await fetch(`${url}/resources/${lease.resource.id}`, { headers: BEARER })).text();
    expect(page).toContain('data-command="release"');
    expect(page).toContain('data-command="reclaim"');
    expect(page).toContain('data-command="break"');
    const csrf = /name="csrf" value="([^"]+)"/.exec(page)![1]!;
    const post = (path: string, form: Record<string, string>) =>
      fetch(url + path, { method: 'POST', headers: { ...BEARER, accept: 'application/json' }, body: new URLSearchParams({ csrf, ...form }) });
    // Leased: reclaim leaves it alone; break breaks it and its lease, with the reason.
    expect((await post(`/resources/${lease.resource.id}/reclaim`, {})).status).toBe(200);
    const broke = await post(`/resources/${lease.resource.id}/break`, { reason: 'disk <full>' });
    expect([broke.status, await broke.json()]).toEqual([200, { ok: true }]);
    await until('the resource to be destroyed', async () => (await broker.resources.get(lease.resource.id))!.status === 'destroyed');
    expect((await broker.resources.get(lease.resource.id))!.brokenReason).toBe('disk <full>');
    expect((await broker.leases.get(lease.id))!.status).toMatch(/broken|destroyed/);
    // A command on something that is not there: 404, nothing written.
    expect((await post('/resources/res_none/release', {})).status).toBe(404);
    expect((await post('/leases/lease_none/release', {})).status).toBe(404);
    expect((await post('/leases/x/promote', {})).status).toBe(404);
    await broker.close();
  });

  test('read-only, or no token: no buttons, and every write is 403', async () => {
    const broker = await pool();
    const lease = await broker.acquire({ type: 'host' });
    const before = await commandCount(broker);
    for (const options of [{ token: TOKEN, readOnly: true }, {}]) {
      const { url } = await mounted(broker, options);
      const headers = 'token' in options ? BEARER : {};
      expect(await (await fetch(`${url}/leases/${lease.id}`, { headers })).text()).not.toContain('method="post"');
      const res = await fetch(`${url}/leases/${lease.id}/release`, { method: 'POST', headers, body: new URLSearchParams({ csrf: 'x' }) });
      expect(res.status).toBe(403);
    }
    expect(await commandCount(broker)).toBe(before);
    await lease.release();
    await broker.close();
  });

  test('login: a wrong token is 401; the cookie is HttpOnly, SameSite=Strict, on the base path; a cross-site login is refused; logout ends the session', async () => {
    const broker = await pool();
    const { url } = await mounted(broker, { token: TOKEN, basePath: '/ops/slipway' });
    expect((await fetch(`${url}/ops/slipway/login`)).status).toBe(200);
    expect((await fetch(`${url}/ops/slipway/login`, { method: 'POST', headers: { origin: url }, body: new URLSearchParams({ token: 'nope-nope-nope-nope' }) })).status).toBe(401);
    expect((await fetch(`${url}/ops/slipway/login`, { method: 'POST', headers: { origin: 'http://evil.example' }, body: new URLSearchParams({ token: TOKEN }) })).status).toBe(403);
    const res = await fetch(`${url}/ops/slipway/login`, { method: 'POST', headers: { origin: url }, body: new URLSearchParams({ token: TOKEN }), redirect: 'manual' });
    expect(res.headers.get('set-cookie')).toMatch(/; HttpOnly; SameSite=Strict; Path=\/ops\/slipway; Max-Age=\d+$/);
    const cookie = res.headers.get('set-cookie')!.split(';')[0]!;
    const page = await (await fetch(`${url}/ops/slipway/`, { headers: { cookie } })).text();
    expect(page).toContain('action="/ops/slipway/logout"');
    const csrf = /name="csrf" value="([^"]+)"/.exec(page)![1]!;
    await fetch(`${url}/ops/slipway/logout`, { method: 'POST', headers: { cookie, origin: url }, body: new URLSearchParams({ csrf }), redirect: 'manual' });
    expect((await fetch(`${url}/ops/slipway/`, { headers: { cookie }, redirect: 'manual' })).status).toBe(303);
    await broker.close();
  });
});

test('the XSS corpus in owners, attributes, log data and a broken reason is shown as text on every page', async () => {
  expect(XSS_PAYLOADS.length).toBeGreaterThanOrEqual(30);
  const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host' })] });
  const leases = [];
  for (const [i, payload] of XSS_PAYLOADS.entries()) {
    leases.push(await broker.requestLease({ type: 'host', owner: payload, attributes: { [payload]: payload, n: i } }));
  }
  const held = await broker.acquire({ type: 'host', owner: 'breaker' });
  await broker.breakResource(held.resource.id, XSS_PAYLOADS.join(' | '));
  await until('the resource to break', async () => (await broker.resources.get(held.resource.id))!.brokenReason !== null);
  const { url } = await mounted(broker, { token: TOKEN });
  const pages = ['/', '/leases', '/resources', `/resources/${held.resource.id}`, `/leases/${held.id}`, ...leases.map((l) => `/leases/${l.id}`)];
  const ownTags = new Set<string>();
  for (const path of pages) {
    const html = await (await fetch(url + path, { headers: BEARER })).text();
    for (const tag of tagsOf(html)) {
      // Every tag is the dashboard's: no event handler, no javascript: or data: URL, no script but its own file.
      expect({ path, tag, handler: /\son\w+\s*=/i.test(tag) }).toEqual({ path, tag, handler: false });
      expect({ path, tag, url: /(href|src|action)\s*=\s*"\s*(javascript|data):/i.test(tag) }).toEqual({ path, tag, url: false });
      if (/^<script/i.test(tag)) expect(tag).toBe(`<script src="/assets/dashboard.js" defer>`);
      ownTags.add(tag.replace(/\s.*$/s, '').replace(/>$/, ''));
    }
    for (const payload of XSS_PAYLOADS) {
      // (A payload of entities, &lt;script&gt;, is the escaped form of another: it may show as is.)
      if (/[<>"'`]/.test(payload)) expect({ path, payload, raw: html.includes(payload) }).toEqual({ path, payload, raw: false });
    }
  }
  // Each payload is on its lease's page as escaped text: as owner, attribute key and value, and in the logs.
  for (const [i, payload] of XSS_PAYLOADS.entries()) {
    const html = await (await fetch(`${url}/leases/${leases[i]!.id}`, { headers: BEARER })).text();
    expect(html).toContain(`<dd class="owner">${escapeHtml(payload)}</dd>`);
    // (jsonb keeps its own key order: the key and the value each, as JSON text.)
    expect(html).toContain(`${escapeHtml(JSON.stringify(payload))}: ${escapeHtml(JSON.stringify(payload))}`);
  }
  const resourcePage = await (await fetch(`${url}/resources/${held.resource.id}`, { headers: BEARER })).text();
  expect(resourcePage).toContain(`<dd class="reason">${escapeHtml(XSS_PAYLOADS.join(' | '))}</dd>`);
  // The check above saw the dashboard's own markup (a check that saw nothing would pass blindly).
  expect([...ownTags]).toEqual(expect.arrayContaining(['<table', '<form', '<a', '<pre', '<script']));
  for (const l of leases) await broker.release(l.id);
  await broker.close();
});

test('lists come by page of 50, filtered, with next and previous links', async () => {
  const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host', answers: { canAllocate: () => false } })] });
  const ids: string[] = [];
  for (let i = 0; i < 55; i++) ids.push((await broker.requestLease({ type: 'host', owner: i % 5 === 0 ? 'fifth' : 'other' })).id);
  const { url } = await mounted(broker);
  const idsOf = (html: string) => [...html.matchAll(/<tr data-lease="([^"]+)"/g)].map((m) => m[1]);
  const first = await (await fetch(`${url}/leases?type=host`)).text();
  expect(idsOf(first)).toEqual(ids.slice(0, 50));
  expect(first).toContain('href="/leases?type=host&amp;page=2" rel="next"');
  expect(first).not.toContain('rel="prev"');
  const second = await (await fetch(`${url}/leases?type=host&page=2`)).text();
  expect(idsOf(second)).toEqual(ids.slice(50));
  expect(second).not.toContain('rel="next"');
  expect(second).toContain('rel="prev"');
  expect(idsOf(await (await fetch(`${url}/leases?owner=fifth`)).text())).toEqual(ids.filter((_, i) => i % 5 === 0));
  expect(idsOf(await (await fetch(`${url}/leases?status=active`)).text())).toEqual([]);
  // A status that is none is dropped, not passed on; a page far past the end is empty.
  expect(idsOf(await (await fetch(`${url}/leases?status=bogus&page=2`)).text())).toEqual(ids.slice(50));
  expect(idsOf(await (await fetch(`${url}/leases?page=99`)).text())).toEqual([]);
  const resources = await (await fetch(`${url}/resources?blueprint=pool&status=active`)).text();
  expect(resources).toContain('No resource matches.');
  for (const id of ids) await broker.release(id);
  await broker.close();
});

describe('mounting', () => {
  test('under a base path in node:http: its links carry the path, and requests outside it are 404', async () => {
    const broker = await pool();
    const lease = await broker.acquire({ type: 'host' });
    const { url } = await mounted(broker, { basePath: '/ops/slipway' });
    const page = await (await fetch(`${url}/ops/slipway`)).text();
    expect(page).toContain('href="/ops/slipway/assets/dashboard.css"');
    expect(page).toContain('data-events="/ops/slipway/events"');
    expect(page).toContain('href="/ops/slipway/leases"');
    expect((await fetch(`${url}/ops/slipway/leases/${lease.id}`)).status).toBe(200);
    expect((await fetch(`${url}/leases/${lease.id}`)).status).toBe(404);
    expect((await fetch(`${url}/ops/slipwayx`)).status).toBe(404);
    await lease.release();
    await broker.close();
  });

  test('as express mounts it (req.url cut, req.originalUrl whole, next for the rest)', async () => {
    const broker = await pool();
    const dashboard = createDashboard(broker, { basePath: '/dash' });
    // What express's app.use('/dash', handler) does to a request before calling the handler.
    const server = await serve((req, res) => {
      const original = req.url!;
      const next = () => res.writeHead(200, { 'content-type': 'text/plain' }).end('the app');
      if (!original.startsWith('/dash')) return next();
      Object.assign(req, { originalUrl: original, url: original.slice('/dash'.length) || '/' });
      dashboard(req, res, next);
    });
    cleanups.push(async () => {
      await dashboard.close();
      await server.close();
    });
    const page = await (await fetch(`${server.url}/dash/resources`)).text();
    expect(page).toContain('<h1>Resources</h1>');
    expect(page).toContain('href="/dash/leases"');
    expect(await (await fetch(`${server.url}/other`)).text()).toBe('the app');
    await broker.close();
  });
});

/** Reads an event stream until `pattern` shows in it. */
async function streamUntil(url: string, headers: Record<string, string>, pattern: RegExp, act: () => Promise<unknown>): Promise<string> {
  const controller = new AbortController();
  const res = await fetch(url, { headers, signal: controller.signal });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
  const reader = res.body!.getReader();
  let text = '';
  const read = (async () => {
    while (!pattern.test(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the stream ended before ${pattern}: ${text}`);
      text += Buffer.from(value).toString('utf8');
    }
  })();
  // The stream's first bytes: it is open, and the browser is told to wait 5 s before reconnecting.
  await until('the stream to open', () => text.includes('retry: 5000'), 10_000).catch(() => undefined);
  await act();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`no ${pattern} in the stream: ${JSON.stringify(text)}`)), 15_000)));
  try {
    await Promise.race([read, timeout]);
  } finally {
    clearTimeout(timer);
    controller.abort();
    await read.catch(() => undefined);
  }
  return text;
}

describe('live updates', () => {
  test('a lease requested on the broker sends "changed" to the open streams; close() ends them', async () => {
    const broker = await pool({ answers: { canAllocate: () => false } });
    const { url, dashboard } = await mounted(broker);
    const text = await streamUntil(`${url}/events`, {}, /event: changed\ndata: \{\}\n\n/, () => broker.requestLease({ type: 'host', owner: 'live' }));
    expect(text.startsWith('retry: 5000\n\n')).toBe(true);

    const res = await fetch(`${url}/events`);
    const reader = res.body!.getReader();
    await reader.read();
    await dashboard.close();
    let done = false;
    while (!done) done = (await reader.read()).done;
    expect(done).toBe(true);
    expect((await fetch(`${url}/`)).status).toBe(503);
    await broker.close();
  });

  test('the sweep finds a change no event told of', async () => {
    // No workers: nothing moves unless the test moves it, and this broker announces nothing of what SQL does behind it.
    const broker = await realBroker({ workers: false, blueprints: [fakeBlueprint({ name: 'pool', type: 'host' })] });
    const lease = await broker.requestLease({ type: 'host' });
    const { url } = await mounted(broker, { sweepInterval: { seconds: 1 } });
    const db = internals.get(broker)!.db;
    // The sweep reads stats(): count its reads, to know when it has taken its fingerprint.
    let reads = 0;
    const stats = broker.stats.bind(broker);
    broker.stats = async () => {
      const result = await stats();
      reads++;
      return result;
    };
    const text = await streamUntil(`${url}/events`, {}, /event: changed/, async () => {
      // One sweep takes the fingerprint (waited for, bounded: a loaded machine may be late for a
      // fixed pause); then a change no event tells of (as from a process whose NOTIFY was lost).
      await until('the first sweep', () => reads > 0);
      await db.query(`UPDATE ${db.schema}.leases SET status = 'released' WHERE id = $1`, [lease.id]);
    });
    expect(text).toMatch(/^retry: 5000\n\n(: keepalive\n\n)*event: changed/);
    await broker.close();
  });
});

describeOnPostgres('live updates from another process (LISTEN)', () => {
  test('a lease made active by another broker on the schema reaches the stream through its NOTIFY', async () => {
    const broker = await pool();
    const schema = internals.get(broker)!.db.schema;
    // A dashboard as the CLI runs it: no workers; the changes come from the other process, and no sweep for 10 minutes.
    const viewer = track(await createBroker({ database: { url: tierUrl!, schema }, workers: false }));
    const { url } = await mounted(viewer, { sweepInterval: { minutes: 10 } });
    const lease = await streamUntil(`${url}/events`, {}, /event: changed/, () => broker.acquire({ type: 'host' })).then(() => broker.leases.list({ status: 'active' }));
    expect(lease).toHaveLength(1);
    await broker.release(lease[0]!.id);
    await viewer.close();
    await broker.close();
  });
});
