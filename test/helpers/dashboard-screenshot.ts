/**
 * Writes docs/dashboard.png, the README's picture of the pools page: a broker with some
 * realistic state (hosts all leased with builds waiting, working copies, a VM whose destroy
 * hangs and shows as stuck), rendered by headless chromium through playwright-core.
 *
 *   npx tsx test/helpers/dashboard-screenshot.ts [out.png]
 */
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { createBroker } from '../../lib/broker/index.js';
import { createDashboard } from '../../lib/dashboard/index.js';
import { fakeBlueprint } from '../../lib/testing/index.js';
import { serve } from './dashboard.js';

const out = process.argv[2] ?? fileURLToPath(new URL('../../docs/dashboard.png', import.meta.url));
const never = () => new Promise<void>(() => undefined);

const broker = await createBroker({
  blueprints: [
    fakeBlueprint({ name: 'ci-hosts', type: 'host', exclusive: true, limits: { maxResources: 3 } }),
    fakeBlueprint({ name: 'working-copies', type: 'working-copy', exclusive: true }),
    // A cloud VM pool whose delete hangs: its released VM sits in the deletion lane, stuck.
    fakeBlueprint({ name: 'vm-pool', type: 'vm', exclusive: true, gates: { destroyResource: never } }),
  ],
});
for (let i = 0; i < 3; i++) await broker.acquire({ type: 'host', owner: `build/${1840 + i}` });
for (let i = 0; i < 2; i++) await broker.acquire({ type: 'working-copy', owner: `build/${1840 + i}`, attributes: { repository: 'git@example.com:app.git', ref: 'main' } });
const vm = await broker.acquire({ type: 'vm', owner: 'release/7.2' });
await broker.acquire({ type: 'vm', owner: 'release/7.3' });
await broker.releaseResource(vm.resource.id, { reason: 'scale down', author: 'autoscaler' });
for (let i = 3; i < 6; i++) await broker.requestLease({ type: 'host', owner: `build/${1840 + i}`, priority: i === 5 ? 10 : 0 });

// Short thresholds so that the picture shows a stuck row without waiting ten minutes.
const dashboard = createDashboard(broker, { stuckAfter: { seconds: 3 } });
const server = await serve(dashboard);
await new Promise((r) => setTimeout(r, 4000));

const browser = await chromium.launch({ executablePath: process.env.SLIPWAY_CHROMIUM ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-gpu'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 860 }, colorScheme: 'light' });
await page.goto(`${server.url}/`);
await page.waitForSelector('#live-state.on');
await page.screenshot({ path: out, fullPage: true });
await browser.close();
await dashboard.close();
await server.close();
await broker.close({ grace: { milliseconds: 100 } });
console.log(`wrote ${out}`);
