import type { Command } from 'commander';
import type { ConnectionFlags } from '../connection.js';
import { json } from '../format.js';
import type { Io } from '../io.js';
import { subcommand, withBroker, type JsonFlag } from './shared.js';

const AUTHOR = 'slipway-cli';

export function registerObjectCommands(program: Command, io: Io): void {
  subcommand(program, 'reclaim', 'ask for an idle active resource to be released (one with leases is left alone)', ['slipway reclaim res_41c0... --database $URL'])
    .argument('<id>', 'resource id')
    .action(async (id: string, flags: ConnectionFlags & JsonFlag) => {
      await withBroker(flags, (broker) => broker.reclaimResource(id, { author: AUTHOR }));
      io.out(flags.json ? json({ reclaim: id }) : `reclaim of resource ${id} requested`);
    });

  subcommand(program, 'break', 'break a resource: its active leases break with the reason, then it is destroyed', [
    'slipway break res_41c0... --reason "disk failed" --database $URL',
  ])
    .argument('<id>', 'resource id')
    .requiredOption('--reason <text>', 'why: the broken leases report it')
    .action(async (id: string, flags: ConnectionFlags & JsonFlag & { reason: string }) => {
      await withBroker(flags, (broker) => broker.breakResource(id, flags.reason, { author: AUTHOR }));
      io.out(flags.json ? json({ break: id, reason: flags.reason }) : `break of resource ${id} requested: ${flags.reason}`);
    });
}
