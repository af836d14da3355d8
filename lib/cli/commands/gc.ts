import type { Command } from 'commander';
import type { ConnectionFlags } from '../connection.js';
import { parseCliDuration } from '../durations.js';
import { json } from '../format.js';
import type { Io } from '../io.js';
import { subcommand, withBroker, type JsonFlag } from './shared.js';

export function registerGc(program: Command, io: Io): void {
  subcommand(program, 'gc', 'delete history now: destroyed leases and resources with their logs, consumed commands', ['slipway gc --older-than 2d --database $URL'])
    .option('--older-than <duration>', 'how old history must be to go (30m, 2h, 7d, PT5M)', '7d')
    .action(async (flags: ConnectionFlags & JsonFlag & { olderThan: string }) => {
      const olderThan = parseCliDuration(flags.olderThan, '--older-than');
      const result = await withBroker(flags, (broker) => broker.gc({ olderThan }));
      if (flags.json) return io.out(json(result));
      const parts = Object.entries(result).map(([kind, count]) => `${count} ${kind}`);
      io.out(`deleted ${parts.join(', ')} older than ${flags.olderThan}`);
    });
}
