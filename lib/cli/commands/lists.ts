import type { Command } from 'commander';
import { DateTime } from 'luxon';
import type { LeaseRecord, LeaseStatus, ResourceStatus } from '../../index.js';
import type { ConnectionFlags } from '../connection.js';
import { json, relativeTime, table, type Paint } from '../format.js';
import type { Io } from '../io.js';
import { library } from '../library.js';
import { parseStatuses, subcommand, withBroker, type JsonFlag } from './shared.js';

// Written out for --help, which answers without loading the library; test/cli.test.ts checks them against it.
const LEASE_STATUS_HELP = 'pending, acquired, active, released, broken, destroyed';
const RESOURCE_STATUS_HELP = 'pending, active, released, broken, destroyed';

/** Green when in use, yellow on the way in or out, red when broken. */
export function statusText(status: string, p: Paint): string {
  if (status === 'active') return p.green(status);
  if (status === 'broken') return p.red(status);
  if (status === 'destroyed') return p.dim(status);
  return p.yellow(status);
}

export function registerLists(program: Command, io: Io): void {
  subcommand(program, 'leases', 'list leases (all but destroyed ones unless --status says otherwise), newest first', [
    'slipway leases --data-dir ./slipway-data --status active --owner build-42',
  ])
    .option('--status <statuses>', `comma-separated (${LEASE_STATUS_HELP}) or all`)
    .option('--type <type>', 'only this resource type')
    .option('--owner <owner>', 'only this owner')
    .action(async (flags: ConnectionFlags & JsonFlag & { status?: string; type?: string; owner?: string }) => {
      const { LEASE_STATE_FLAGS, LEASE_STATUSES } = await library();
      const status = parseStatuses<LeaseStatus>(flags.status, LEASE_STATUSES, LEASE_STATUSES.filter((s) => s !== 'destroyed'));
      const leases = await withBroker(flags, (broker) => broker.leases.list({ status, type: flags.type, owner: flags.owner }));
      leases.sort((a, b) => b.createdAt.toMillis() - a.createdAt.toMillis());
      if (flags.json) return io.out(json(leases));
      if (leases.length === 0) return io.out('no leases');
      const now = DateTime.utc();
      const p = io.paint;
      io.out(
        table(
          ['ID', 'TYPE', 'STATUS', 'OWNER', 'RESOURCE', 'CREATED', 'IN STATUS SINCE', 'EXPIRES'],
          leases.map((l) => [l.id, l.type, statusText(l.status, p), l.owner ?? '-', l.resourceId ?? '-', relativeTime(l.createdAt, now), relativeTime(l.statusChangedAt, now), !LEASE_STATE_FLAGS[l.status].live ? '-' : l.expiresAt ? relativeTime(l.expiresAt, now) : 'never']),
          p,
        ),
      );
    });

  subcommand(program, 'resources', 'list resources (all but destroyed ones unless --status says otherwise) with the owners of their leases', [
    'slipway resources --data-dir ./slipway-data --blueprint ci-hosts',
  ])
    .option('--status <statuses>', `comma-separated (${RESOURCE_STATUS_HELP}) or all`)
    .option('--blueprint <name>', 'only this blueprint')
    .option('--type <type>', 'only this resource type')
    .action(async (flags: ConnectionFlags & JsonFlag & { status?: string; blueprint?: string; type?: string }) => {
      const { LEASE_STATE_FLAGS, LEASE_STATUSES, RESOURCE_STATUSES } = await library();
      const status = parseStatuses<ResourceStatus>(flags.status, RESOURCE_STATUSES, RESOURCE_STATUSES.filter((s) => s !== 'destroyed'));
      const { resources, leases } = await withBroker(flags, async (broker) => ({
        resources: await broker.resources.list({ status, blueprint: flags.blueprint, type: flags.type }),
        leases: await broker.leases.list({ status: LEASE_STATUSES.filter((s) => LEASE_STATE_FLAGS[s].live) }),
      }));
      resources.sort((a, b) => b.createdAt.toMillis() - a.createdAt.toMillis());
      const byResource = new Map<string, LeaseRecord[]>();
      for (const lease of leases) if (lease.resourceId) byResource.set(lease.resourceId, [...(byResource.get(lease.resourceId) ?? []), lease]);
      if (flags.json) return io.out(json(resources.map((r) => ({ ...r, leases: (byResource.get(r.id) ?? []).map((l) => ({ id: l.id, status: l.status, owner: l.owner })) }))));
      if (resources.length === 0) return io.out('no resources');
      const now = DateTime.utc();
      const p = io.paint;
      io.out(
        table(
          ['ID', 'TYPE', 'BLUEPRINT', 'STATUS', 'LEASES', 'OWNERS', 'CREATED', 'IN STATUS SINCE'],
          resources.map((r) => {
            const on = byResource.get(r.id) ?? [];
            const owners = [...new Set(on.map((l) => l.owner ?? '-'))].join(', ');
            return [r.id, r.type, r.blueprint, statusText(r.status, p), String(on.length), owners || '-', relativeTime(r.createdAt, now), relativeTime(r.statusChangedAt, now)];
          }),
          p,
        ),
      );
    });
}
