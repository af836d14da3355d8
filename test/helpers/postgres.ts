import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const BIN = process.env.SLIPWAY_PG_BIN ?? '/usr/lib/postgresql/15/bin';

export interface ThrowawayPostgres {
  url: string;
  stop(): Promise<void>;
  /**
   * Stops the server (fast shutdown: every connection is cut), keeps it down for
   * `downMs`, then starts it again on the same port and data. Only for a cluster
   * started here (`own: true`).
   */
  restart(downMs?: number): Promise<void>;
}

export interface StartPostgresOptions {
  /**
   * Durable commits (the server's `fsync`). Off for tests, where speed matters and a
   * crash only loses a throwaway cluster; the benchmark turns it on. @defaultValue false
   */
  fsync?: boolean;
  /** Start a cluster of our own even when SLIPWAY_TEST_DATABASE_URL names a server (a test that restarts it). */
  own?: boolean;
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
export async function startPostgres(options: StartPostgresOptions = {}): Promise<ThrowawayPostgres> {
  if (process.env.SLIPWAY_TEST_DATABASE_URL && !options.own) {
    return {
      url: process.env.SLIPWAY_TEST_DATABASE_URL,
      stop: async () => undefined,
      restart: async () => {
        throw new Error('restart() needs a cluster of our own: startPostgres({ own: true })');
      },
    };
  }
  const dir = mkdtempSync(join(tmpdir(), 'slipway-pg-'));
  chmodSync(dir, 0o777);
  const data = join(dir, 'data');
  // Postgres refuses to run as root: as root, run it as the `postgres` user.
  const user = process.getuid?.() === 0 ? { uid: Number(execFileSync('id', ['-u', 'postgres'])), gid: Number(execFileSync('id', ['-g', 'postgres'])) } : {};
  const run = (cmd: string, args: string[]) => execFileSync(join(BIN, cmd), args, { stdio: 'pipe', ...user });
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  const port = await freePort();
  const args = ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', `fsync=${options.fsync ? 'on' : 'off'}`, '-c', 'max_connections=200'];
  let child: ChildProcess;
  const serve = async () => {
    child = spawn(join(BIN, 'postgres'), args, { stdio: 'ignore', ...user });
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
  };
  const halt = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGINT'); // fast shutdown
      await exited;
    }
  };
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  await serve();
  return {
    url,
    async stop() {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
    async restart(downMs = 0) {
      await halt();
      await new Promise((r) => setTimeout(r, downMs));
      await serve();
    },
  };
}
