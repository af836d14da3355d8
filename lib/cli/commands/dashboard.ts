import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Command } from 'commander';
import { loadConfig } from '../config.js';
import { addConnectionOptions, databaseFrom, openBroker, type ConnectionFlags } from '../connection.js';
import { parseCliDuration } from '../durations.js';
import { CliFailure, UsageError } from '../errors.js';
import type { Io } from '../io.js';
import { renderingBlueprints } from './shared.js';
import { firstSignal } from './worker.js';

type DashboardFlags = ConnectionFlags & {
  port: string;
  host: string;
  basePath?: string;
  tokenFile?: string;
  readOnly?: boolean;
  config?: string;
  stuckAfter: string;
  allowRemoteWithoutToken?: boolean;
};

/** 127.0.0.0/8, ::1 and localhost: reachable from this machine only. */
export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127(\.\d{1,3}){3}$/.test(host);
}

/** The token: from --token-file, else $SLIPWAY_DASHBOARD_TOKEN; a file's trailing newline is not part of it. */
function tokenFrom(flags: DashboardFlags): string | undefined {
  if (flags.tokenFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(flags.tokenFile, 'utf8');
    } catch (error) {
      throw new CliFailure(`--token-file: cannot read ${flags.tokenFile}: ${(error as Error).message}`, { cause: error });
    }
    const token = text.replace(/\r?\n$/, '');
    if (token === '') throw new UsageError(`--token-file: ${flags.tokenFile} is empty`);
    return token;
  }
  return process.env.SLIPWAY_DASHBOARD_TOKEN || undefined;
}

export function registerDashboard(program: Command, io: Io): void {
  const command = program
    .command('dashboard')
    .description(
      'serve the web dashboard until SIGINT or SIGTERM: pools, leases, resources and logs, live. Its buttons (with a token) write release, reclaim and break commands; the workers of your app carry them out, as this process runs none',
    );
  addConnectionOptions(command)
    .option('--port <n>', 'the TCP port (0: any free one)', '4100')
    .option('--host <address>', 'the address to listen on; loopback unless you say otherwise', '127.0.0.1')
    .option('--base-path <path>', 'serve under this path (/slipway), as behind a proxy')
    .option('--token-file <file>', 'a file holding the token (default: $SLIPWAY_DASHBOARD_TOKEN); with one, every page needs it and the buttons appear')
    .option('--read-only', 'no buttons, and every write refused, even with the token')
    .option('--config <file>', 'a config module: its blueprints show their allocation limits and render their own log lines (default: ./slipway.config.js, if there)')
    .option('--stuck-after <duration>', 'an object in a transitional state longer than this is highlighted', '10m')
    .option('--allow-remote-without-token', 'listen on a non-loopback --host with no token: anyone who reaches the port reads every lease')
    .addHelpText(
      'after',
      '\nExamples:\n  $ slipway dashboard --database $URL\n  http://127.0.0.1:4100/\n  $ SLIPWAY_DASHBOARD_TOKEN=$(cat ~/.slipway-token) slipway dashboard --port 4100 --host 0.0.0.0 --database $URL\n',
    )
    .action(async (flags: DashboardFlags) => {
      const port = Number(flags.port);
      if (!(Number.isInteger(port) && port >= 0 && port <= 65535)) throw new UsageError(`--port: ${JSON.stringify(flags.port)} is not a port (0 to 65535)`);
      const stuckAfter = parseCliDuration(flags.stuckAfter, '--stuck-after');
      const token = tokenFrom(flags);
      if (!token && !isLoopback(flags.host) && !flags.allowRemoteWithoutToken) {
        throw new UsageError(`--host ${flags.host} is reachable from other machines: give a token (--token-file or $SLIPWAY_DASHBOARD_TOKEN), or --allow-remote-without-token to serve it open`);
      }
      const config = flags.config !== undefined ? (await loadConfig(flags.config)).config : undefined;
      const blueprints = config?.blueprints ?? (await renderingBlueprints(flags));
      const { createDashboard } = await import('../../dashboard/index.js');
      const broker = await openBroker(databaseFrom(flags, config, true), { migrate: false, blueprints });
      let dashboard;
      try {
        dashboard = createDashboard(broker, { token, readOnly: flags.readOnly ?? false, basePath: flags.basePath ?? '', stuckAfter });
      } catch (error) {
        await broker.close({ grace: 0 });
        throw error;
      }
      const server = createServer(dashboard);
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(port, flags.host, resolve);
        });
      } catch (error) {
        await dashboard.close();
        await broker.close({ grace: 0 });
        throw new CliFailure(`cannot listen on ${flags.host}:${port}: ${(error as Error).message}`, { cause: error });
      }
      const address = server.address() as AddressInfo;
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      io.out(`http://${host}:${address.port}${flags.basePath ?? ''}/`);
      io.err(`slipway dashboard: ${token ? (flags.readOnly ? 'token required, read-only' : 'token required, buttons on') : 'no token: open to anyone who reaches it, read-only'}; Ctrl-C stops`);

      const signal = await firstSignal(['SIGINT', 'SIGTERM']);
      io.err(`${signal}: stopping`);
      await dashboard.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await broker.close({ grace: 0 });
      io.err('slipway dashboard: stopped');
    });
}
