import type { Command } from 'commander';
import { DateTime } from 'luxon';
import type { LogEntry } from '../../index.js';
import type { ConnectionFlags } from '../connection.js';
import { CliFailure } from '../errors.js';
import { json, relativeTime, type Paint } from '../format.js';
import type { Io } from '../io.js';
import { statusText } from './lists.js';
import { renderingBlueprints, subcommand, withBroker, type JsonFlag } from './shared.js';

/** `2030-01-01 12:00:03  Lease is active on resource res_1.` (×3 when one entry stands for several). */
export function logLine(entry: LogEntry, p: Paint, withObject: boolean): string {
  const at = entry.at.toUTC().toFormat("yyyy-LL-dd HH:mm:ss'Z'");
  const object = withObject ? ` ${p.dim(entry.lease ?? entry.resource ?? entry.blueprint ?? '-')}` : '';
  const count = entry.count > 1 ? p.dim(` (×${entry.count}, last ${entry.lastAt.toUTC().toFormat('HH:mm:ss')})`) : '';
  const message = entry.type === 'hook.failure' || entry.type.endsWith('.broken') ? p.red(entry.message) : entry.message;
  return `${p.dim(at)}${object}  ${message}${count}`;
}

/** The status changes among an object's logs, oldest first. */
function timeline(logs: LogEntry[]): Array<{ at: DateTime; from: string; to: string }> {
  return logs.filter((l) => l.type === 'status.changed').map((l) => ({ at: l.at, from: String(l.data.from), to: String(l.data.to) }));
}

export function registerShow(program: Command, io: Io): void {
  subcommand(program, 'show', 'one lease or resource: attributes, status timeline, child leases, logs', ['slipway show lease_9b2f... --data-dir ./slipway-data'], { rendersLogs: true })
    .argument('<id>', 'a lease id or a resource id')
    .action(async (id: string, flags: ConnectionFlags & JsonFlag & { config?: string }) => {
      const found = await withBroker(flags, async (broker) => {
        const lease = await broker.leases.get(id);
        if (lease) {
          const logs = await broker.logs({ lease: id });
          const resource = lease.resourceId ? await broker.resources.get(lease.resourceId) : null;
          // A lease's children are those its resource took for itself (a working copy's host lease).
          const children = lease.resourceId ? (await broker.leases.list({})).filter((l) => l.parentResourceId === lease.resourceId) : [];
          return { kind: 'lease' as const, lease, resource, children, logs };
        }
        const resource = await broker.resources.get(id);
        if (!resource) return null;
        const logs = await broker.logs({ resource: id });
        const all = await broker.leases.list({});
        return { kind: 'resource' as const, resource, leases: all.filter((l) => l.resourceId === id), children: all.filter((l) => l.parentResourceId === id), logs };
      }, await renderingBlueprints(flags));
      if (!found) throw new CliFailure(`no lease or resource has the id ${id}`);
      if (flags.json) return io.out(json({ ...found, timeline: timeline(found.logs) }));

      const p = io.paint;
      const now = DateTime.utc();
      const lines: string[] = [];
      const field = (name: string, value: string) => lines.push(`${p.bold(`${name}:`.padEnd(12))}${value}`);
      if (found.kind === 'lease') {
        const { lease, resource } = found;
        field('lease', `${lease.id} (${lease.type})`);
        field('status', `${statusText(lease.status, p)} since ${relativeTime(lease.statusChangedAt, now)}${lease.brokenReason ? `: ${lease.brokenReason}` : ''}`);
        field('owner', lease.owner ?? '-');
        field('resource', resource ? `${resource.id} (${resource.blueprint}, ${resource.status})` : (lease.resourceId ?? 'none yet'));
        if (lease.parentResourceId) field('taken by', `resource ${lease.parentResourceId}`);
        field('created', `${relativeTime(lease.createdAt, now)} (${lease.createdAt.toUTC().toISO()})`);
        field('expires', lease.expiresAt ? `${relativeTime(lease.expiresAt, now)} (${lease.expiresAt.toUTC().toISO()})` : 'never');
        field('attributes', JSON.stringify(lease.attributes));
      } else {
        const { resource, leases } = found;
        field('resource', `${resource.id} (${resource.type}, blueprint ${resource.blueprint})`);
        field('status', `${statusText(resource.status, p)} since ${relativeTime(resource.statusChangedAt, now)}${resource.brokenReason ? `: ${resource.brokenReason}` : ''}`);
        field('created', `${relativeTime(resource.createdAt, now)} (${resource.createdAt.toUTC().toISO()})`);
        field('attributes', JSON.stringify(resource.attributes));
        const live = leases.filter((l) => l.status !== 'destroyed');
        field('leases', live.length ? live.map((l) => `${l.id} (${l.status}, ${l.owner ?? 'no owner'})`).join(', ') : 'none');
      }
      field('children', found.children.length ? found.children.map((l) => `${l.id} (${l.type}, ${l.status})`).join(', ') : 'none');
      lines.push('', p.bold('timeline:'));
      const created = found.kind === 'lease' ? found.lease.createdAt : found.resource.createdAt;
      lines.push(`  ${created.toUTC().toFormat("yyyy-LL-dd HH:mm:ss'Z'")}  created`);
      for (const step of timeline(found.logs)) lines.push(`  ${step.at.toUTC().toFormat("yyyy-LL-dd HH:mm:ss'Z'")}  ${step.from} → ${statusText(step.to, p)}`);
      lines.push('', p.bold('logs:'));
      for (const entry of found.logs.filter((l) => l.type !== 'status.changed')) lines.push(`  ${logLine(entry, p, false)}`);
      io.out(lines.join('\n'));
    });
}
