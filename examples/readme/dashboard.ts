import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';
import { createDashboard } from 'slipway/dashboard';

await using broker = await createBroker({ blueprints: [localHosts({ name: 'local', config: { slots: 2 } })] });
const token = process.env.SLIPWAY_DASHBOARD_TOKEN ?? randomBytes(24).toString('hex');
// With a token: every page needs it, and the release, reclaim and break buttons appear.
await using dashboard = createDashboard(broker, { basePath: '/slipway', token });

const server = createServer((req, res) => {
  if (req.url?.startsWith('/slipway')) return dashboard(req, res);
  res.writeHead(404).end();
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve)); // 0: any free port
const { port } = server.address() as AddressInfo;
console.log(`dashboard: http://127.0.0.1:${port}/slipway/ (log in with the token)`);

const lease = await broker.acquire({ type: 'host', owner: 'dashboard-demo' });
// What a script sees with the token as a bearer token: the pools page.
const page = await (await fetch(`http://127.0.0.1:${port}/slipway/`, { headers: { authorization: `Bearer ${token}` } })).text();
console.log(page.match(/<tr data-blueprint="local">[\s\S]*?<\/tr>/)?.[0].replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim());
// local host 1 0 1 0 0 – 1 at once max 1 –

await lease.release();
server.close();
