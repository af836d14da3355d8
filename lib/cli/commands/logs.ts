import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import type { Broker, LogEntry } from '../../index.js';
import { databaseFrom, openBroker, type ConnectionFlags } from '../connection.js';
import { parseCliDuration } from '../durations.js';
import { UsageError } from '../errors.js';
import { json } from '../format.js';
import type { Io } from '../io.js';
import { logLine } from './show.js';
import { newLogEntries, renderingBlueprints, subcommand, type JsonFlag } from './shared.js';

type LogsFlags = ConnectionFlags & JsonFlag & { config?: string; lease?: string; resource?: string; blueprint?: string; type?: string; follow?: boolean; interval: string };

export function registerLogs(program: Command, io: Io): void {
  subcommand(program, 'logs', 'print log lines, oldest first (with --json, one JSON object per line); --follow keeps printing new ones until Ctrl-C', [
    'slipway logs --lease lease_9b2f... --data-dir ./slipway-data',
    'slipway logs --blueprint ci-hosts --follow --database $URL',
  ], { rendersLogs: true })
    .option('--lease <id>', 'only this lease\'s lines')
    .option('--resource <id>', 'only this resource\'s lines')
    .option('--blueprint <name>', 'only this blueprint\'s lines')
    .option('--type <logType>', 'only this log type (lease.acquired, hook.failure, ...)')
    .option('--follow', 'keep printing new lines (needs --database: another process writes them); they are read again every --interval')
    .option('--interval <duration>', 'with --follow: how often new lines are read (the library announces new log lines only inside the process that wrote them)', '1s')
    .action(async (flags: LogsFlags) => {
      if ([flags.lease, flags.resource, flags.blueprint].filter((v) => v !== undefined).length > 1) throw new UsageError('give at most one of --lease, --resource, --blueprint');
      const interval = parseCliDuration(flags.interval, '--interval');
      if (interval.toMillis() < 100) throw new UsageError('--interval: at least 100ms');
      const database = databaseFrom(flags, undefined, true);
      if (flags.follow && !('url' in database)) {
        throw new UsageError('--follow needs --database: an embedded --data-dir is open in one process at a time, so no other process can write lines to follow');
      }
      const filter = { lease: flags.lease, resource: flags.resource, blueprint: flags.blueprint, type: flags.type };
      const print = (entry: LogEntry) => io.out(flags.json ? JSON.stringify(entry) : logLine(entry, io.paint, !flags.lease && !flags.resource));
      const broker = await openBroker(database, { migrate: false, blueprints: await renderingBlueprints(flags) });
      try {
        const isNew = newLogEntries();
        const printNew = async (b: Broker) => {
          for (const entry of await b.logs(filter)) if (isNew(entry)) print(entry);
        };
        await printNew(broker);
        if (!flags.follow) return;
        const stop = new AbortController();
        const onSignal = () => stop.abort();
        process.once('SIGINT', onSignal);
        process.once('SIGTERM', onSignal);
        try {
          while (!stop.signal.aborted) {
            await sleep(interval.toMillis(), undefined, { signal: stop.signal }).catch(() => undefined);
            if (!stop.signal.aborted) await printNew(broker);
          }
        } finally {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
        }
      } finally {
        await broker.close({ grace: 0 });
      }
    });
}
