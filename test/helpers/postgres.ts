import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const BIN = process.env.SLIPWAY_PG_BIN ?? '/usr/lib/postgresql/15/bin';

export interface ThrowawayPostgres {
  url: string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/** True when a server is given or one can be started here. */
export function postgresAvailable(): boolean {
  return Boolean(process.env.SLIPWAY_TEST_DATABASE_URL) || existsSync(join(BIN, 'initdb'));
}

/**
 * A throwaway cluster: initdb into a temp dir, run as the `postgres` user when we are
 * root, listening on loopback only. Or the server named by SLIPWAY_TEST_DATABASE_URL.
 */
export async function startPostgres(): Promise<ThrowawayPostgres> {
  if (process.env.SLIPWAY_TEST_DATABASE_URL) return { url: process.env.SLIPWAY_TEST_DATABASE_URL, stop: async () => undefined };
  const dir = mkdtempSync(join(tmpdir(), 'slipway-pg-'));
  chmodSync(dir, 0o777);
  const data = join(dir, 'data');
  // Postgres refuses to run as root: as root, run it as the `postgres` user.
  const user = process.getuid?.() === 0 ? { uid: Number(execFileSync('id', ['-u', 'postgres'])), gid: Number(execFileSync('id', ['-g', 'postgres'])) } : {};
  const run = (cmd: string, args: string[]) => execFileSync(join(BIN, cmd), args, { stdio: 'pipe', ...user });
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  const port = await freePort();
  const args = ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'max_connections=200'];
  const child: ChildProcess = spawn(join(BIN, 'postgres'), args, { stdio: 'ignore', ...user });
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      execFileSync(join(BIN, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port)], { stdio: 'pipe' });
      break;
    } catch {
      if (Date.now() > deadline) throw new Error('throwaway postgres did not start in 30 s');
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    url,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGINT'); // fast shutdown
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
