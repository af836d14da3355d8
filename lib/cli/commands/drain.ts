import { hostname, userInfo } from 'node:os';
import type { Command } from 'commander';
import type { DrainResult } from '../../index.js';
import type { ConnectionFlags } from '../connection.js';
import { CliFailure } from '../errors.js';
import { json } from '../format.js';
import type { Io } from '../io.js';
import { subcommand, withBroker, type JsonFlag } from './shared.js';

type Flags = ConnectionFlags & JsonFlag & { author?: string; force?: boolean };

/**
 * `slipway drain NAME` and `slipway resume NAME`: a blueprint's operational state, shared
 * by every broker of the database. The command line's broker has no blueprints, so a
 * misspelt name would drain nothing that exists: a name the database has never seen is
 * refused unless --force (draining a pool before its first resource is legitimate).
 */
export function registerDrain(program: Command, io: Io): void {
  const change = (name: 'drain' | 'resume', description: string, example: string) =>
    subcommand(program, name, description, [example])
      .argument('<blueprint>', 'blueprint name')
      .option('--author <name>', 'who does it, for the log (default: user@host)')
      .option('--force', 'accept a blueprint name this database has no resource of yet')
      .action(async (blueprint: string, flags: Flags) => {
        const author = flags.author ?? `${userInfo().username}@${hostname()}`;
        const result: DrainResult = await withBroker(flags, async (broker) => {
          if (!flags.force && !(blueprint in (await broker.stats()).blueprints)) {
            throw new CliFailure(`no resource of blueprint ${JSON.stringify(blueprint)} was ever recorded in this database: check the name, or give --force to ${name} it anyway`);
          }
          return name === 'drain' ? broker.drainBlueprint(blueprint, { author }) : broker.resumeBlueprint(blueprint, { author });
        });
        if (flags.json) return io.out(json(result));
        if (!result.changed) return io.out(`blueprint ${blueprint} was already ${result.draining ? 'draining' : 'serving leases (not draining)'}`);
        if (!result.draining) return io.out(`blueprint ${blueprint} resumed: it serves leases again`);
        const idle = result.idleResources.length;
        io.out(`blueprint ${blueprint} is draining: it serves no new lease; ${idle} idle resource${idle === 1 ? '' : 's'} will be released now, leased ones when their leases end (slipway stats shows what is left)`);
      });
  change('drain', 'stop a blueprint serving new leases, for every broker: idle resources are released now, leased ones when their leases end', 'slipway drain ci-hosts --database $URL');
  change('resume', 'end a drain: the blueprint serves leases again, and waiting leases go on at once', 'slipway resume ci-hosts --database $URL');
}
