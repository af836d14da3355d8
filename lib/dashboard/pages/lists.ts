import type { Broker } from '../../broker/index.js';
import { LEASE_STATUSES, RESOURCE_STATE_FLAGS, RESOURCE_STATUSES, type LeaseStatus, type ResourceStatus } from '../../model/states.js';
import { ageText, href, html, type Markup } from '../html.js';
import { statusCell, type PageContext } from '../layout.js';

/** Rows per page of a list. */
export const PAGE_SIZE = 50;
/** Pages past this are refused: OFFSET reads the rows it skips, and nobody pages this far by hand. */
const MAX_PAGE = 2000;

/** The filters of a list page, from its query string; unknown values are dropped, not passed on. */
export interface ListFilters {
  status?: string;
  type?: string;
  owner?: string;
  blueprint?: string;
  page: number;
}

export function filtersOf(query: URLSearchParams, keys: ReadonlyArray<'status' | 'type' | 'owner' | 'blueprint'>, statuses: readonly string[]): ListFilters {
  const text = (key: string) => {
    const value = query.get(key)?.trim();
    return value && value.length <= 1000 && !value.includes('\0') ? value : undefined;
  };
  const f: ListFilters = { page: Math.min(MAX_PAGE, Math.max(1, Number.parseInt(query.get('page') ?? '1', 10) || 1)) };
  for (const key of keys) f[key] = text(key);
  if (f.status !== undefined && !statuses.includes(f.status)) f.status = undefined;
  return f;
}

function filterForm(ctx: PageContext, path: string, f: ListFilters, statuses: readonly string[], fields: ReadonlyArray<'type' | 'owner' | 'blueprint'>): Markup {
  return html`<form method="get" action="${ctx.base}/${path}" class="filters">
<label>Status <select name="status"><option value="">any</option>${statuses.map((s) => html`<option${s === f.status ? html` selected` : null}>${s}</option>`)}</select></label>
${fields.map((name) => html`<label>${name} <input name="${name}" value="${f[name] ?? ''}"></label>`)}
<button type="submit">Filter</button>
</form>`;
}

/** "Newer/older" links; a next page exists when the read of PAGE_SIZE + 1 rows got the extra one. */
function pager(ctx: PageContext, path: string, f: ListFilters, more: boolean): Markup {
  const link = (page: number) => href(ctx.base, [path], { status: f.status, type: f.type, owner: f.owner, blueprint: f.blueprint, page: page > 1 ? page : undefined });
  return html`<nav class="pager">${f.page > 1 ? html`<a href="${link(f.page - 1)}" rel="prev">← Previous</a>` : null} <span>page ${f.page}</span> ${more ? html`<a href="${link(f.page + 1)}" rel="next">Next →</a>` : null}</nav>`;
}

export function leaseFilters(ctx: PageContext, f: ListFilters): Markup {
  return filterForm(ctx, 'leases', f, LEASE_STATUSES, ['type', 'owner']);
}

export function resourceFilters(ctx: PageContext, f: ListFilters): Markup {
  return filterForm(ctx, 'resources', f, RESOURCE_STATUSES, ['type', 'blueprint']);
}

/** One page of leases, oldest request first, read with LIMIT/OFFSET. */
export async function leasesPage(broker: Broker, ctx: PageContext, f: ListFilters): Promise<Markup> {
  const rows = await broker.leases.list({ status: f.status as LeaseStatus | undefined, type: f.type, owner: f.owner, limit: PAGE_SIZE + 1, offset: (f.page - 1) * PAGE_SIZE });
  const shown = rows.slice(0, PAGE_SIZE);
  return html`${shown.length === 0 ? html`<p class="none">No lease matches.</p>` : html`<table class="leases">
<thead><tr><th>Lease</th><th>Type</th><th>Owner</th><th>Status</th><th>For</th><th>Resource</th><th>Requested</th><th>Expires</th></tr></thead>
<tbody>${shown.map((l) => {
    const age = ctx.nowMs - l.statusChangedAt.toMillis();
    const transitional = l.status !== 'active' && l.status !== 'destroyed';
    return html`<tr data-lease="${l.id}"><td><a href="${href(ctx.base, ['leases', l.id])}">${l.id}</a></td><td>${l.type}</td><td class="owner">${l.owner ?? '–'}</td>
<td>${statusCell(l.status, age, transitional, ctx)}</td><td>${ageText(age)}</td>
<td>${l.resourceId ? html`<a href="${href(ctx.base, ['resources', l.resourceId])}">${l.resourceId}</a>` : '–'}</td><td>${l.createdAt.toISO()}</td><td>${l.expiresAt?.toISO() ?? '–'}</td></tr>`;
  })}</tbody></table>`}
${pager(ctx, 'leases', f, rows.length > PAGE_SIZE)}`;
}

/** One page of resources, oldest first, read with LIMIT/OFFSET. */
export async function resourcesPage(broker: Broker, ctx: PageContext, f: ListFilters): Promise<Markup> {
  const rows = await broker.resources.list({ status: f.status as ResourceStatus | undefined, type: f.type, blueprint: f.blueprint, limit: PAGE_SIZE + 1, offset: (f.page - 1) * PAGE_SIZE });
  const shown = rows.slice(0, PAGE_SIZE);
  return html`${shown.length === 0 ? html`<p class="none">No resource matches.</p>` : html`<table class="resources">
<thead><tr><th>Resource</th><th>Blueprint</th><th>Type</th><th>Status</th><th>For</th><th>Created</th><th>Broken because</th></tr></thead>
<tbody>${shown.map((r) => {
    const age = ctx.nowMs - r.statusChangedAt.toMillis();
    const transitional = RESOURCE_STATE_FLAGS[r.status].deletionLane || r.status === 'pending';
    return html`<tr data-resource="${r.id}"><td><a href="${href(ctx.base, ['resources', r.id])}">${r.id}</a></td><td>${r.blueprint}</td><td>${r.type}</td>
<td>${statusCell(r.status, age, transitional, ctx)}</td><td>${ageText(age)}</td><td>${r.createdAt.toISO()}</td><td class="reason">${r.brokenReason ?? ''}</td></tr>`;
  })}</tbody></table>`}
${pager(ctx, 'resources', f, rows.length > PAGE_SIZE)}`;
}
