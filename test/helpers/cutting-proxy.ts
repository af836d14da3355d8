import { createServer, connect, type Socket } from 'node:net';

/**
 * A loopback TCP proxy in front of a Postgres server that can cut connections the way a
 * server restart does, seen from the client: `cutOpenConnections()` marks every connection
 * open now, and each of them is closed, unanswered, as soon as the client next sends on it.
 * Idle pooled connections look alive until they are used, and each write on one is lost
 * with its outcome unknown. Connections opened afterwards pass through.
 */
export interface CuttingProxy {
  /** A URL like `target` with the proxy's host and port. */
  url: string;
  cutOpenConnections(): number;
  /** How many connections were cut so far. */
  cut(): number;
  close(): Promise<void>;
}

export async function startCuttingProxy(target: string): Promise<CuttingProxy> {
  const to = new URL(target);
  const open = new Set<{ client: Socket; server: Socket; doomed: boolean }>();
  let cutCount = 0;
  const proxy = createServer((client) => {
    const server = connect(Number(to.port || 5432), to.hostname);
    const pair = { client, server, doomed: false };
    open.add(pair);
    const drop = () => {
      open.delete(pair);
      client.destroy();
      server.destroy();
    };
    client.on('data', (chunk) => {
      if (pair.doomed) {
        cutCount++;
        return drop();
      }
      server.write(chunk);
    });
    server.on('data', (chunk) => client.write(chunk));
    client.on('close', drop).on('error', drop);
    server.on('close', drop).on('error', drop);
  });
  await new Promise<void>((resolve, reject) => proxy.once('error', reject).listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((proxy.address() as { port: number }).port);
  return {
    url: url.toString(),
    cutOpenConnections() {
      for (const pair of open) pair.doomed = true;
      return open.size;
    },
    cut: () => cutCount,
    async close() {
      for (const pair of open) {
        pair.client.destroy();
        pair.server.destroy();
      }
      await new Promise<void>((resolve) => proxy.close(() => resolve()));
    },
  };
}
