import type { Broker } from '../../broker/index.js';
import type { LogEntry } from '../../logs/log-types.js';
import type { LeaseRecord, ResourceRecord } from '../../model/lease.js';
import { LEASE_STATE_FLAGS, RESOURCE_STATE_FLAGS } from '../../model/states.js';
import { ageText, href, html, type Markup } from '../html.js';
import { commandButton, statusCell, type PageContext } from '../layout.js';

/** The newest log entries shown on an object's page (repeats are one entry with a count). */
const LOGS_SHOWN = 200;
/** The leases on, or taken by, one resource listed on its page. */
const RELATED_SHOWN = 50;

/** The status each log type marks the start of: the timeline is read from the logs. */
const STATUS_OF: Record<string, string> = {
  'lease.queued': 'pending',
  'lease.requeued': 'pending',
  'lease.acquired': 'acquired',
  'lease.activated': 'active',
  'lease.released': 'released',
  'lease.expired': 'released',
  'lease.timeout': 'released',
  'lease.broken': 'broken',
  'lease.destroyed': 'destroyed',
  'resource.allocating': 'pending',
  'resource.activated': 'active',
  'resource.released': 'released',
  'resource.reclaimed': 'released',
  'resource.broken': 'broken',
  'resource.destroyed': 'destroyed',
};

function timeline(logs: LogEntry[]): Markup {
  // A transition is logged twice (its status.changed and its typed entry): a run of one status is one step.
  const steps: Array<{ to: string; at: string | null; message: string }> = [];
  for (const e of logs) {
    const to = e.type === 'status.changed' ? String((e.data as { to?: unknown }).to) : STATUS_OF[e.type];
    if (to && steps.at(-1)?.to !== to) steps.push({ to, at: e.at.toISO(), message: e.message });
  }
  if (steps.length === 0) return html`<p class="none">No status change logged yet.</p>`;
  return html`<ol class="timeline">${steps.map((s) => html`<li><span class="status status-${s.to}">${s.to}</span> <time>${s.at}</time> <span class="message">${s.message}</span></li>`)}</ol>`;
}

function logTable(logs: LogEntry[]): Markup {
  const shown = logs.slice(-LOGS_SHOWN);
  return html`${logs.length > shown.length ? html`<p class="none">The newest ${shown.length} of ${logs.length} entries.</p>` : null}
${shown.length === 0 ? html`<p class="none">No log entries.</p>` : html`<table class="logs"><thead><tr><th>At</th><th>Last</th><th title="how many times it was logged in a row">Count</th><th>Type</th><th>Message</th></tr></thead>
<tbody>${shown.map((e) => html`<tr><td><time>${e.at.toISO()}</time></td><td>${e.count > 1 ? e.lastAt.toISO() : ''}</td><td class="n">${e.count > 1 ? `×${e.count}` : ''}</td><td>${e.type}</td>
<td class="message">${e.message}<details><summary>data</summary><pre>${JSON.stringify(e.data, null, 2)}</pre></details></td></tr>`)}</tbody></table>`}`;
}

const link = (ctx: PageContext, kind: 'leases' | 'resources', id: string | null) => (id ? html`<a href="${href(ctx.base, [kind, id])}">${id}</a>` : html`<span class="none">–</span>`);

function leaseRows(ctx: PageContext, leases: LeaseRecord[]): Markup {
  if (leases.length === 0) return html`<p class="none">None.</p>`;
  return html`<table class="leases"><thead><tr><th>Lease</th><th>Type</th><th>Owner</th><th>Status</th></tr></thead>
<tbody>${leases.map((l) => html`<tr data-lease="${l.id}"><td>${link(ctx, 'leases', l.id)}</td><td>${l.type}</td><td class="owner">${l.owner ?? '–'}</td><td>${statusCell(l.status, ctx.nowMs - l.statusChangedAt.toMillis(), l.status !== 'active' && l.status !== 'destroyed', ctx)}</td></tr>`)}</tbody></table>`;
}

/** A lease: its fields and attributes, its resource and parent, its timeline and logs; null when there is none. */
export async function leasePage(broker: Broker, ctx: PageContext, id: string): Promise<Markup | null> {
  const lease = await broker.leases.get(id);
  if (!lease) return null;
  const logs = await broker.logs({ lease: id });
  const age = ctx.nowMs - lease.statusChangedAt.toMillis();
  return html`<dl class="fields" data-lease="${lease.id}" data-status="${lease.status}">
<dt>Lease</dt><dd>${lease.id}</dd>
<dt>Status</dt><dd>${statusCell(lease.status, age, lease.status !== 'active' && lease.status !== 'destroyed', ctx)} for ${ageText(age)} ${LEASE_STATE_FLAGS[lease.status].releasable ? commandButton(ctx, ['leases', lease.id, 'release'], 'Release') : null}</dd>
<dt>Type</dt><dd>${lease.type}</dd>
<dt>Owner</dt><dd class="owner">${lease.owner ?? '–'}</dd>
<dt>Priority</dt><dd>${lease.priority}</dd>
<dt>Resource</dt><dd>${link(ctx, 'resources', lease.resourceId)}</dd>
<dt>Parent resource</dt><dd>${link(ctx, 'resources', lease.parentResourceId)}</dd>
<dt>Requested</dt><dd>${lease.createdAt.toISO()}</dd>
<dt>Expires</dt><dd>${lease.expiresAt?.toISO() ?? '–'}</dd>
${lease.brokenReason ? html`<dt>Broken because</dt><dd class="reason">${lease.brokenReason}</dd>` : null}
</dl>
<h2>Attributes</h2><pre class="attributes">${JSON.stringify(lease.attributes, null, 2)}</pre>
<h2>Timeline</h2>${timeline(logs)}
<h2>Logs</h2>${logTable(logs)}`;
}

/** A resource: its fields and attributes, its leases and child leases, its timeline and logs; null when there is none. */
export async function resourcePage(broker: Broker, ctx: PageContext, id: string): Promise<Markup | null> {
  const resource: ResourceRecord | null = await broker.resources.get(id);
  if (!resource) return null;
  const [logs, leases, children] = await Promise.all([
    broker.logs({ resource: id }),
    broker.leases.list({ resource: id, limit: RELATED_SHOWN }),
    broker.leases.list({ parentResource: id, limit: RELATED_SHOWN }),
  ]);
  const age = ctx.nowMs - resource.statusChangedAt.toMillis();
  const commandable = RESOURCE_STATE_FLAGS[resource.status].releasable;
  const reason = html`<input name="reason" placeholder="why it is broken" required maxlength="1000">`;
  return html`<dl class="fields" data-resource="${resource.id}" data-status="${resource.status}">
<dt>Resource</dt><dd>${resource.id}</dd>
<dt>Status</dt><dd>${statusCell(resource.status, age, resource.status !== 'active' && resource.status !== 'destroyed', ctx)} for ${ageText(age)}</dd>
<dt>Blueprint</dt><dd>${resource.blueprint}</dd>
<dt>Type</dt><dd>${resource.type}</dd>
<dt>Created</dt><dd>${resource.createdAt.toISO()}</dd>
${resource.brokenReason ? html`<dt>Broken because</dt><dd class="reason">${resource.brokenReason}</dd>` : null}
</dl>
${commandable && ctx.canWrite ? html`<div class="commands">${commandButton(ctx, ['resources', resource.id, 'release'], 'Release')} ${commandButton(ctx, ['resources', resource.id, 'reclaim'], 'Reclaim if idle')} ${commandButton(ctx, ['resources', resource.id, 'break'], 'Break', reason)}</div>` : null}
<h2>Attributes</h2><pre class="attributes">${JSON.stringify(resource.attributes, null, 2)}</pre>
<h2>Leases on it</h2>${leaseRows(ctx, leases)}
<h2>Child leases it took</h2>${leaseRows(ctx, children)}
<h2>Timeline</h2>${timeline(logs)}
<h2>Logs</h2>${logTable(logs)}`;
}
