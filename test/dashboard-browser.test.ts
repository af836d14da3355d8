/**
 * The dashboard in a real browser: Debian's headless `chromium`, driven by playwright-core
 * (no browser download), against `createBroker` on the real clock with the dashboard in
 * node:http on 127.0.0.1. Where no chromium is installed, the file is skipped, and says why.
 */
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';
import type { Broker } from '../lib/broker/index.js';
import { createDashboard } from '../lib/dashboard/index.js';
import { fakeBlueprint } from '../lib/testing/index.js';
import { guardBrokers, realBroker } from './helpers/broker.js';
import { commandCount, serve, XSS_PAYLOADS } from './helpers/dashboard.js';

guardBrokers();

const executablePath = process.env.SLIPWAY_CHROMIUM ?? ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
if (!executablePath) console.warn('test/dashboard-browser.test.ts: skipped, as no chromium is installed (apt-get install chromium, or set SLIPWAY_CHROMIUM to its path)');
const describeBrowser = executablePath ? describe : describe.skip;

const TOKEN = 'browser-test-token-0123456789';
/** A payload that sets window.__xss if it ever runs, and opens a dialog besides. */
const PAYLOAD = '<img src=x onerror="window.__xss=1;alert(1)"></td><script>window.__xss=2</script>';

describeBrowser('the dashboard in headless chromium', () => {
  let browser: Browser;
  beforeAll(async () => {
    // As root (a CI container) chromium needs --no-sandbox.
    browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  }, 60_000);
  afterAll(async () => {
    await browser?.close();
  });

  async function setUp(): Promise<{ broker: Broker; url: string; page: Page; dialogs: string[]; stop(): Promise<void> }> {
    const broker = await realBroker({ blueprints: [fakeBlueprint({ name: 'pool', type: 'host', exclusive: true, limits: { maxResources: 1 } })] });
    const dashboard = createDashboard(broker, { token: TOKEN, basePath: '/slipway' });
    const server = await serve(dashboard);
    const context = await browser.newContext();
    const page = await context.newPage();
    const dialogs: string[] = [];
    page.on('dialog', (dialog) => {
      dialogs.push(dialog.message());
      void dialog.dismiss();
    });
    const stop = async () => {
      await context.close();
      await dashboard.close();
      await server.close();
      await broker.close();
    };
    return { broker, url: `${server.url}/slipway`, page, dialogs, stop };
  }

  test('log in; a waiting lease appears live; Release destroys it; a write without the token is refused; payloads render as text', async () => {
    const { broker, url, page, dialogs, stop } = await setUp();
    try {
      // The only resource is held: the next lease waits.
      const held = await broker.acquire({ type: 'host', owner: XSS_PAYLOADS[0], attributes: Object.fromEntries(XSS_PAYLOADS.slice(0, 10).map((p, i) => [`k${i}`, p])) });

      await page.goto(url);
      expect(new URL(page.url()).pathname).toBe('/slipway/login');
      await page.fill('input[name=token]', TOKEN);
      await Promise.all([page.waitForURL(`${url}/`), page.click('button[type=submit]')]);
      await page.waitForSelector('#live-state.on', { timeout: 15_000 });
      expect(await page.textContent('h2')).toBe('Resources by blueprint');
      // A mark on this document: it survives only if the page is never reloaded.
      await page.evaluate(() => ((globalThis as unknown as { __mark: number }).__mark = 42));

      const waiting = await broker.requestLease({ type: 'host', owner: PAYLOAD });
      const row = page.locator(`tr[data-lease="${waiting.id}"]`);
      await row.waitFor({ timeout: 15_000 });
      expect(await page.evaluate(() => (globalThis as unknown as { __mark?: number }).__mark)).toBe(42);
      // The owner is the payload, as text.
      expect(await row.locator('td.owner').textContent()).toBe(PAYLOAD);

      // A write without the token: refused, and nothing written.
      const before = await commandCount(broker);
      const csrf = await page.getAttribute(`tr[data-lease="${waiting.id}"] input[name=csrf]`, 'value');
      const anonymous = await fetch(`${url}/leases/${waiting.id}/release`, { method: 'POST', headers: { origin: new URL(url).origin }, body: new URLSearchParams({ csrf: csrf! }) });
      expect(anonymous.status).toBe(401);
      const crossSite = await page.context().request.post(`${url}/leases/${waiting.id}/release`, { form: { csrf: csrf! }, headers: { origin: 'http://evil.example' }, maxRedirects: 0 });
      expect(crossSite.status()).toBe(403);
      expect(await commandCount(broker)).toBe(before);
      expect((await broker.leases.get(waiting.id))!.status).toBe('pending');

      // Release from the pools page: the browser lands on the lease, which goes to destroyed live.
      await Promise.all([page.waitForURL(`${url}/leases/${waiting.id}`), row.locator('button[data-command=release]').click()]);
      await page.waitForSelector(`dl[data-lease="${waiting.id}"][data-status="destroyed"]`, { timeout: 20_000 }).catch(async (error: Error) => {
        const status = (await broker.leases.get(waiting.id))?.status;
        throw new Error(`${error.message}\nthe lease is ${status} in the database; the page shows:\n${await page.locator('main').innerHTML()}`);
      });
      expect(await page.textContent('dd.owner')).toBe(PAYLOAD);
      expect((await broker.logs({ lease: waiting.id })).some((e) => e.type === 'lease.released' && e.data.author === 'dashboard')).toBe(true);

      // The held lease's page: its owner and attributes (the corpus) are text.
      await page.goto(`${url}/leases/${held.id}`);
      expect(await page.textContent('dd.owner')).toBe(XSS_PAYLOADS[0]);
      const attributes = JSON.parse((await page.textContent('pre.attributes'))!);
      expect(attributes).toEqual(Object.fromEntries(XSS_PAYLOADS.slice(0, 10).map((p, i) => [`k${i}`, p])));
      await page.goto(`${url}/leases?type=host`);
      expect(await page.locator('td.owner').allTextContents()).toEqual([XSS_PAYLOADS[0], PAYLOAD]);

      expect(await page.evaluate(() => (globalThis as unknown as { __xss?: number }).__xss)).toBeUndefined();
      expect(dialogs).toEqual([]);
      await held.release();
    } finally {
      await stop();
    }
  }, 120_000);
});
