import type { Command } from 'commander';
import { DateTime } from 'luxon';
import type { ConnectionFlags } from '../connection.js';
import { parseCliDateTime, parseCliDuration } from '../durations.js';
import { UsageError } from '../errors.js';
import { json, relativeTime } from '../format.js';
import type { Io } from '../io.js';
import { library } from '../library.js';
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

  subcommand(program, 'update-lease', "renew a lease: move its expiry to a ttl from now, or to a time; the lease's worker applies it", [
    'slipway update-lease lease_9b2f... --ttl 2h --database $URL',
    'slipway update-lease lease_9b2f... --until 2030-01-01T18:00:00Z --database $URL',
  ])
    .argument('<id>', 'lease id')
    .option('--ttl <duration>', 'expire this long from now (30m, 2h, PT5M)')
    .option('--until <iso>', 'expire at this time (ISO 8601)')
    .option('--wait <duration>', 'how long to wait for a worker to apply it', '10s')
    .action(async (id: string, flags: ConnectionFlags & JsonFlag & { ttl?: string; until?: string; wait: string }) => {
      if ((flags.ttl === undefined) === (flags.until === undefined)) throw new UsageError('give --ttl or --until, one of them');
      const wait = parseCliDuration(flags.wait, '--wait');
      const until = flags.ttl !== undefined ? DateTime.utc().plus(parseCliDuration(flags.ttl, '--ttl')) : parseCliDateTime(flags.until!, '--until', DateTime.utc());
      const { BrokerClosedError } = await library();
      const applied = await withBroker(flags, async (broker) => {
        // The renewal is written at once; a worker (of any process on the database) applies it.
        // Not applied within --wait, it stays written: the lease's next worker pass applies it.
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), wait.toMillis())));
        const renewal = broker.extendLease(id, { until }, { author: AUTHOR }).then(() => true as const);
        renewal.catch(() => undefined);
        try {
          return await Promise.race([renewal, late]);
        } finally {
          clearTimeout(timer);
        }
      }).catch((error) => {
        // The wait cut short by the close: the renewal was written.
        if (error instanceof BrokerClosedError) return false;
        throw error;
      });
      const at = until.toUTC().toISO();
      if (flags.json) return io.out(json({ lease: id, expiresAt: at, applied }));
      io.out(
        applied
          ? `lease ${id} now expires at ${at} (${flags.ttl !== undefined ? `${flags.ttl} from now` : relativeTime(until)})`
          : `renewal of lease ${id} to ${at} requested; no worker applied it within ${flags.wait} (is a \`slipway worker\` running?)`,
      );
    });
}
