import type { Command } from 'commander';
import type { ConnectionFlags } from '../connection.js';
import { UsageError } from '../errors.js';
import { json } from '../format.js';
import type { Io } from '../io.js';
import { library } from '../library.js';
import { subcommand, withBroker, type JsonFlag } from './shared.js';

const AUTHOR = 'slipway-cli';

type ReleaseFlags = ConnectionFlags & JsonFlag & { all?: boolean; reason?: string };

function report(io: Io, flags: JsonFlag, kind: string, ids: string[]): void {
  if (flags.json) return io.out(json({ released: ids }));
  if (ids.length === 0) return io.out(`no ${kind} to release`);
  for (const id of ids) io.out(`release of ${kind} ${id} requested`);
}

export function registerRelease(program: Command, io: Io): void {
  subcommand(program, 'release-lease', 'ask for leases to be released (their workers release and destroy them)', [
    'slipway release-lease lease_9b2f... --database $URL',
    'slipway release-lease --all --owner build-42 --database $URL',
  ])
    .argument('[ids...]', 'lease ids')
    .option('--all', 'every pending, acquired or active lease (of --owner, if given)')
    .option('--owner <owner>', 'with --all: only this owner\'s leases')
    .option('--reason <text>', 'recorded in the lease\'s log')
    .action(async (ids: string[], flags: ReleaseFlags & { owner?: string }) => {
      if (flags.all && ids.length > 0) throw new UsageError('give lease ids or --all, not both');
      if (!flags.all && ids.length === 0) throw new UsageError('give lease ids, or --all');
      if (flags.owner !== undefined && !flags.all) throw new UsageError('--owner goes with --all');
      const { LEASE_STATE_FLAGS, LEASE_STATUSES } = await library();
      const released = await withBroker(flags, async (broker) => {
        const targets = flags.all
          ? (await broker.leases.list({ status: LEASE_STATUSES.filter((s) => LEASE_STATE_FLAGS[s].releasable), owner: flags.owner })).map((l) => l.id)
          : ids;
        for (const id of targets) await broker.release(id, { author: AUTHOR, ...(flags.reason ? { reason: flags.reason } : {}) });
        return targets;
      });
      report(io, flags, 'lease', released);
    });

  subcommand(program, 'release-resource', 'ask for resources to be released (their leases are released first, then the resource is destroyed)', [
    'slipway release-resource res_41c0... --database $URL',
    'slipway release-resource --all --blueprint ci-hosts --database $URL',
  ])
    .argument('[ids...]', 'resource ids')
    .option('--all', 'every pending or active resource of --blueprint')
    .option('--blueprint <name>', 'with --all: the blueprint whose resources go (required)')
    .option('--reason <text>', 'recorded in the resource\'s log')
    .action(async (ids: string[], flags: ReleaseFlags & { blueprint?: string }) => {
      if (flags.all && ids.length > 0) throw new UsageError('give resource ids or --all --blueprint B, not both');
      if (!flags.all && ids.length === 0) throw new UsageError('give resource ids, or --all --blueprint B');
      if (flags.all && !flags.blueprint) throw new UsageError('--all needs --blueprint B: releasing every resource of every blueprint is not offered');
      if (flags.blueprint !== undefined && !flags.all) throw new UsageError('--blueprint goes with --all');
      const { RESOURCE_STATE_FLAGS, RESOURCE_STATUSES } = await library();
      const released = await withBroker(flags, async (broker) => {
        const targets = flags.all
          ? (await broker.resources.list({ status: RESOURCE_STATUSES.filter((s) => RESOURCE_STATE_FLAGS[s].releasable), blueprint: flags.blueprint })).map((r) => r.id)
          : ids;
        for (const id of targets) await broker.releaseResource(id, { author: AUTHOR, ...(flags.reason ? { reason: flags.reason } : {}) });
        return targets;
      });
      report(io, flags, 'resource', released);
    });
}
