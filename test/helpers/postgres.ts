import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, chmodSync, constants, mkdtempSync, readdirSync, realpathSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';

/** What a throwaway cluster needs from one directory of server binaries. */
const NEEDED = ['initdb', 'postgres', 'pg_isready'];

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The directory holding `initdb` and its siblings, with symlinks followed (Debian links only some tools into PATH). */
function binDirOf(initdb: string): string | null {
  if (!isExecutable(initdb)) return null;
  const dir = dirname(realpathSync(initdb));
  return NEEDED.every((cmd) => isExecutable(join(dir, cmd))) ? dir : null;
}

let found: { dir: string | null } | undefined;

/**
 * Where the PostgreSQL server binaries are, or null: `SLIPWAY_PG_BIN` when set (and only
 * there), else the directory of an `initdb` on PATH, else the highest version under
 * `/usr/lib/postgresql/<version>/bin` (Debian and Ubuntu keep initdb off PATH).
 * Every helper that starts a cluster uses this one answer.
 */
export function postgresBin(): string | null {
  if (found) return found.dir;
  const candidates = (): string[] => {
    if (process.env.SLIPWAY_PG_BIN) return [join(process.env.SLIPWAY_PG_BIN, 'initdb')];
    const onPath = (process.env.PATH ?? '').split(delimiter).filter(Boolean).map((d) => join(d, 'initdb'));
    let versions: string[] = [];
    try {
      versions = readdirSync('/usr/lib/postgresql').filter((v) => /^\d+(\.\d+)*$/.test(v));
    } catch {
      // no Debian-style install
    }
    versions.sort((a, b) => b.localeCompare(a, 'en', { numeric: true }));
    return [...onPath, ...versions.map((v) => `/usr/lib/postgresql/${v}/bin/initdb`)];
  };
  for (const initdb of candidates()) {
    const dir = binDirOf(initdb);
    if (dir) return (found = { dir }).dir;
  }
  return (found = { dir: null }).dir;
}

function bin(cmd: string): string {
  const dir = postgresBin();
  if (!dir) throw new Error('no PostgreSQL server binaries: install postgresql, put initdb on PATH or set SLIPWAY_PG_BIN');
  return join(dir, cmd);
}

export interface ThrowawayPostgres {
  url: string;
  stop(): Promise<void>;
  /**
   * Stops the server (fast shutdown: every connection is cut), keeps it down for
   * `downMs`, then starts it again on the same port and data. Only for a cluster
   * started here (`own: true`). `whileDown` runs once the server has exited, before
   * the `downMs` wait: what it starts meets a server that is down.
   */
  restart(downMs?: number, whileDown?: () => void | Promise<void>): Promise<void>;
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
  return Boolean(process.env.SLIPWAY_TEST_DATABASE_URL) || canStartPostgres();
}

/** True when a cluster of our own can be started here (`startPostgres({ own: true })`, a test that restarts the server). */
export function canStartPostgres(): boolean {
  return postgresBin() !== null;
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
  const run = (cmd: string, args: string[]) => execFileSync(bin(cmd), args, { stdio: 'pipe', ...user });
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  const port = await freePort();
  const args = ['-D', data, '-p', String(port), '-k', dir, '-c', 'listen_addresses=127.0.0.1', '-c', `fsync=${options.fsync ? 'on' : 'off'}`, '-c', 'max_connections=200'];
  let child: ChildProcess;
  const serve = async () => {
    child = spawn(bin('postgres'), args, { stdio: 'ignore', ...user });
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        execFileSync(bin('pg_isready'), ['-h', '127.0.0.1', '-p', String(port)], { stdio: 'pipe' });
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
    async restart(downMs = 0, whileDown) {
      await halt();
      await whileDown?.();
      await new Promise((r) => setTimeout(r, downMs));
      await serve();
    },
  };
}
