import { readFileSync } from 'node:fs';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { internals, type Broker } from '../../lib/broker/index.js';

/** The XSS corpus: payloads the dashboard must show as text. */
export const XSS_PAYLOADS: string[] = JSON.parse(readFileSync(new URL('../fixtures/dashboard/xss.json', import.meta.url), 'utf8')).payloads;

/** A node:http server on 127.0.0.1, on a port of its own; `close()` ends its connections too. */
export async function serve(handler: RequestListener): Promise<{ server: Server; url: string; close(): Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    server,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** How many commands were ever written on the broker's database: a refused write adds none. */
export async function commandCount(broker: Broker): Promise<number> {
  const db = internals.get(broker)!.db;
  const [row] = await db.query(`SELECT count(*)::int AS n FROM ${db.schema}.commands`);
  return Number(row.n);
}

