import type { Blueprint } from '../../blueprint/contract.js';
import type { Broker } from '../../broker/index.js';
import { ageText, href, html, type Markup } from '../html.js';
import { commandButton, type PageContext } from '../layout.js';

/** The waiting leases listed by name on the pools page; the counts cover them all. */
const WAITING_SHOWN = 20;

/** "pending 3 min, released 2 h" with the ages past the threshold marked stuck. */
function oldest(ages: Partial<Record<string, number>>, ctx: PageContext): Markup {
  const parts = Object.entries(ages).filter((e): e is [string, number] => typeof e[1] === 'number');
  if (parts.length === 0) return html`<span class="none">–</span>`;
  return html`${parts.map(([state, ms], i) => html`${i ? ', ' : ''}<span class="age${ms >= ctx.stuckMs ? ' stuck' : ''}" data-state="${state}">${state} ${ageText(ms)}${ms >= ctx.stuckMs ? ' (stuck)' : ''}</span>`)}`;
}

/**
 * The limit on resources allocating at once in force now, from the blueprint's
 * `limits.allocationLimit(active)`; a blueprint this process was not given (the CLI
 * without `--config`) has limits only its own process knows.
 */
function allocationLimit(blueprint: Blueprint<any, any, any> | undefined, active: number): Markup {
  if (!blueprint) return html`<span class="none" title="this process was not given the blueprint: its limits are unknown here">unknown here</span>`;
  const limit = blueprint.limits.allocationLimit(active);
  const cap = blueprint.limits.maxResources;
  return html`<span title="resources allocating at once, at ${active} active">${limit} at once</span>${cap === null ? null : html`<br><span title="limits.maxResources: every resource not destroyed counts">max ${cap}</span>`}`;
}

/** Per blueprint, per type, and the first waiting leases: `broker.stats()` and one page of pending leases. */
export async function poolsPage(broker: Broker, blueprints: ReadonlyMap<string, Blueprint<any, any, any>>, ctx: PageContext): Promise<Markup> {
  const [stats, waiting] = await Promise.all([broker.stats(), broker.leases.list({ status: 'pending', limit: WAITING_SHOWN })]);
  const blueprintRows = Object.entries(stats.blueprints).map(
    ([name, b]) => html`<tr data-blueprint="${name}">
<td><a href="${href(ctx.base, ['resources'], { blueprint: name })}">${name}</a>${blueprints.get(name)?.enabled === false ? html` <span class="tag">disabled</span>` : null}${b.draining ? html` <span class="tag" title="broker.drainBlueprint: no new lease until resumed">draining</span>` : null}</td>
<td>${b.type}</td><td class="n">${b.live}</td><td class="n">${b.allocating}</td><td class="n">${b.resources.active}</td>
<td class="n">${b.idle}${b.warmTarget > 0 ? html` <span class="tag" title="limits.minIdle: the warm pool kept idle">warm ${b.warmTarget}</span>` : null}</td>
<td class="n">${b.deletionLane}</td><td class="n">${b.destroying}</td><td>${oldest(b.oldestAgeMs, ctx)}</td>
<td>${allocationLimit(blueprints.get(name), b.resources.active)}</td>
<td>${b.failures ? html`<span class="stuck" title="no new allocation before ${b.failures.retryAt}">${b.failures.streak} in a row: ${b.failures.lastError}</span>` : html`<span class="none">–</span>`}</td>
</tr>`,
  );
  const typeRows = Object.entries(stats.types).map(
    ([type, t]) => html`<tr data-type="${type}">
<td><a href="${href(ctx.base, ['leases'], { type })}">${type}</a></td>
<td class="n">${t.waiting}${t.waitingForAuthorization ? html` <span class="tag">${t.waitingForAuthorization} for authorization</span>` : null}</td>
<td>${t.oldestAgeMs.pending === undefined ? html`<span class="none">–</span>` : html`<span class="age${t.oldestAgeMs.pending >= ctx.stuckMs ? ' stuck' : ''}">${ageText(t.oldestAgeMs.pending)}</span>`}</td>
<td class="n">${t.leases.acquired}</td><td class="n">${t.leases.active}</td><td class="n">${t.live}</td><td class="n">${t.deletionLane}</td>
<td>${oldest(t.oldestAgeMs, ctx)}</td>
</tr>`,
  );
  const waitingRows = waiting.map((l) => {
    const ms = ctx.nowMs - l.createdAt.toMillis();
    return html`<tr data-lease="${l.id}"><td><a href="${href(ctx.base, ['leases', l.id])}">${l.id}</a></td><td>${l.type}</td><td class="owner">${l.owner ?? '–'}</td><td class="n">${l.priority}</td>
<td><span class="age${ms >= ctx.stuckMs ? ' stuck' : ''}">${ageText(ms)}</span></td><td>${commandButton(ctx, ['leases', l.id, 'release'], 'Release')}</td></tr>`;
  });
  return html`<section>
<h2>Resources by blueprint</h2>
${blueprintRows.length === 0 ? html`<p class="none">No blueprint has resources.</p>` : html`<table class="pools">
<thead><tr><th>Blueprint</th><th>Type</th><th title="pending + active: what counts as capacity">Live</th><th title="pending: being built">Allocating</th><th>Active</th><th title="active with no lease; the warm pool's target (limits.minIdle) beside it">Idle</th><th title="released + broken: on the way out, never capacity">Deletion lane</th><th title="deletion-lane resources whose destroy hook has been tried">Destroying</th><th title="the oldest resource in each transitional state">Oldest</th><th title="limits.allocationLimit(active) and limits.maxResources">Allocation limit</th><th>Failures</th></tr></thead>
<tbody>${blueprintRows}</tbody></table>`}
</section>
<section>
<h2>Leases by type</h2>
${typeRows.length === 0 ? html`<p class="none">No leases.</p>` : html`<table class="types">
<thead><tr><th>Type</th><th title="pending leases: the waiting queue">Waiting</th><th>Oldest wait</th><th>Acquired</th><th>Active</th><th>Live</th><th>Deletion lane</th><th>Oldest</th></tr></thead>
<tbody>${typeRows}</tbody></table>`}
</section>
<section>
<h2>Waiting now</h2>
${waitingRows.length === 0 ? html`<p class="none">No lease is waiting.</p>` : html`<table class="waiting">
<thead><tr><th>Lease</th><th>Type</th><th>Owner</th><th>Priority</th><th>Waiting for</th><th></th></tr></thead>
<tbody>${waitingRows}</tbody></table>${waiting.length === WAITING_SHOWN ? html`<p><a href="${href(ctx.base, ['leases'], { status: 'pending' })}">All waiting leases</a></p>` : null}`}
</section>
<p class="legend">Stuck: in a transitional state (allocating, waiting, released, broken, destroying) for ${ageText(ctx.stuckMs)} or longer.</p>`;
}
