import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { createBroker } from 'slipway';
import { localHosts } from 'slipway/blueprints';
import { slipwayMetrics } from 'slipway/metrics';

await using broker = await createBroker({ blueprints: [localHosts({ name: 'local', config: { slots: 2 } })] });
const registry = new Registry(); // or leave it out: prom-client's default registry
await using metrics = slipwayMetrics(broker, { registry });

const server = createServer((req, res) => {
  if (req.url !== '/metrics') return void res.writeHead(404).end();
  metrics.registry.metrics().then(
    (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
    (error: Error) => res.writeHead(500).end(error.message),
  );
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));

const lease = await broker.acquire({ type: 'host', owner: 'metrics-demo' });
const { port } = server.address() as AddressInfo;
const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
console.log(text.split('\n').filter((line) => /^slipway_(leases\{.*"active"|allocations_total|lease_wait_seconds_count)/.test(line)).join('\n'));
// slipway_leases{type="host",status="active"} 1
// slipway_lease_wait_seconds_count{type="host"} 1
// slipway_allocations_total{blueprint="local"} 1

await lease.release();
server.close();
