import type { Command } from 'commander';
import type { LeaseEvent, ResourceEvent } from '../../index.js';
import { loadConfig } from '../config.js';
import { addConnectionOptions, databaseFrom, openBroker, type ConnectionFlags } from '../connection.js';
import { parseCliDuration } from '../durations.js';
import { UsageError } from '../errors.js';
import type { Io } from '../io.js';
import { statusText } from './lists.js';

type WorkerFlags = ConnectionFlags & { config?: string; json?: boolean; grace?: string; concurrency?: string };

/** Resolves with the first of the signals. */
export function firstSignal(signals: NodeJS.Signals[]): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const handlers = signals.map((signal) => {
      const handler = () => {
        signals.forEach((s, i) => process.off(s, handlers[i]!));
        resolve(signal);
      };
      process.on(signal, handler);
      return handler;
    });
  });
}

export function registerWorker(program: Command, io: Io): void {
  const command = program
    .command('worker')
    .description('run workers for the blueprints of --config until SIGINT or SIGTERM; the first signal drains within the grace period, a second stops at once');
  addConnectionOptions(command)
    .option('--config <file>', 'the config module: export default { blueprints, ...createBroker options } (default: ./slipway.config.js)')
    .option('--concurrency <n>', 'hooks that run at once (default: the config\'s workers.concurrency, else 4)')
    .option('--grace <duration>', 'how long the first signal waits for hooks in flight (default: the config\'s closeGrace, else 10s)')
    .option('--json', 'print one JSON line per transition')
    .addHelpText('after', '\nExample:\n  $ slipway worker --config slipway.config.js --database $URL\n  2030-01-01T12:00:00.000Z lease lease_9b2f... pending → acquired\n')
    .action(async (flags: WorkerFlags) => {
      const { config } = await loadConfig(flags.config);
      const { database: _database, ...options } = config;
      const database = databaseFrom(flags, config, false);
      const concurrency = flags.concurrency === undefined ? undefined : Number(flags.concurrency);
      if (concurrency !== undefined && !(Number.isInteger(concurrency) && concurrency >= 1)) throw new UsageError('--concurrency: a whole number of at least 1');
      const grace = flags.grace === undefined ? (options.closeGrace ?? { seconds: 10 }) : parseCliDuration(flags.grace, '--grace');
      const broker = await openBroker(database, {
        ...options,
        workers: concurrency ? { concurrency } : (options.workers || {}),
        gcInterval: options.gcInterval ?? { minutes: 10 },
      });
      const p = io.paint;
      const print = (kind: 'lease' | 'resource') => (event: LeaseEvent | ResourceEvent) => {
        const at = new Date().toISOString();
        if (flags.json) io.out(JSON.stringify({ at, kind, id: event.id, from: event.from, to: event.to }));
        else io.out(`${p.dim(at)} ${kind} ${event.id} ${event.from ? `${event.from} → ` : 'new, '}${statusText(event.to, p)}`);
      };
      broker.on('lease', print('lease'));
      broker.on('resource', print('resource'));
      const names = (options.blueprints ?? []).map((b) => b.name).join(', ');
      io.err(`slipway worker: blueprints ${names}; SIGINT or SIGTERM drains, a second one stops at once`);

      const signal = await firstSignal(['SIGINT', 'SIGTERM']);
      io.err(`${signal}: draining, waiting for hooks in flight (a second signal stops at once)`);
      const again = (second: NodeJS.Signals) => {
        io.err(`${second}: stopping at once`);
        process.exit(second === 'SIGINT' ? 130 : 143);
      };
      process.once('SIGINT', again);
      process.once('SIGTERM', again);
      await broker.close({ grace });
      io.err('slipway worker: stopped');
    });
}
