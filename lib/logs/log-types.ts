import type { DateTime } from 'luxon';
import type { JsonObject } from '../model/spec.js';

/** Every log type the library writes, with the shape of its data. */
export interface LogDataByType {
  'lease.queued': { type: string; owner: string | null; priority: number };
  'lease.acquired': { resource: string; blueprint: string };
  'lease.activated': { resource: string };
  'lease.waiting-for-resources': { reasons: string[]; blueprints: string[] };
  /** `inheritedFrom`: a child lease's parent resource, whose authorizing owner it inherits. */
  'lease.waiting-for-authorization': { owner: string; inheritedFrom: string | null; blueprints: string[]; declined: string[] };
  'lease.allocation-failure': { blueprint: string; reason: string; attempt: number; retryAt: string | null };
  'lease.reclaim': { resource: string; blueprint: string };
  'lease.released': { reason: string; author: string | null };
  'lease.expired': { at: string };
  'lease.extended': { from: string | null; to: string; author: string | null };
  'lease.timeout': { timeout: string };
  'lease.broken': { reason: string };
  'lease.requeued': { resource: string; reason: string };
  'lease.destroyed': Record<string, never>;
  'lease.slot-lock-failure': { keys: string[]; resource: string };
  'resource.allocating': { lease: string | null; warm?: boolean };
  'resource.allocated': Record<string, never>;
  'resource.activated': Record<string, never>;
  'resource.released': { reason: string; author: string | null };
  'resource.reclaimed': { lease: string | null };
  'resource.broken': { reason: string };
  'resource.destroyed': Record<string, never>;
  'resource.resume': { phase: string; attempt: number };
  'resource.slot-lock-failure': { keys: string[]; phase: string; retryAt: string | null };
  'hook.failure': { hook: string; error: string; code: string | null; retry: boolean; attempt?: number; retryAt?: string | null };
  'hook.retry-later': { hook: string; reason: string; retryAt: string };
  'command.rejected': { command: string; reason: string };
  'authorization.requested': { blueprint: string; owner: string; lease: string | null; author: string | null };
  'authorization.authorized': { blueprint: string; owner: string; from: string | null; author: string | null };
  'authorization.declined': { blueprint: string; owner: string; from: string | null; author: string | null };
  'blueprint.draining': { blueprint: string; idle: number; author: string | null };
  'blueprint.resumed': { blueprint: string; author: string | null };
  'status.changed': { kind: 'lease' | 'resource'; from: string; to: string };
  'blueprint.note': { message: string };
}

export type LogType = keyof LogDataByType;

const plural = (word: string, list: string[]) => `${word}${list.length === 1 ? '' : 's'} ${list.join(', ')}`;

/** ` by alice (was requested)`: who changed an authorization, and from what. */
function changedBy(d: { author: string | null; from: string | null }): string {
  return `${d.author ? ` by ${d.author}` : ''}${d.from ? ` (was ${d.from})` : ''}`;
}

/** ` by ci (job cancelled)`: who released it and why; `released`, the reason of a release that gave none, says nothing more. */
function releasedBy(d: { reason: string; author: string | null }): string {
  return `${d.author ? ` by ${d.author}` : ''}${d.reason && d.reason !== 'released' ? ` (${d.reason})` : ''}`;
}

const renderers: { [T in LogType]: (data: LogDataByType[T]) => string } = {
  'lease.queued': (d) => `Lease queued for type "${d.type}"${d.owner ? ` by ${d.owner}` : ''}${d.priority ? ` at priority ${d.priority}` : ''}.`,
  'lease.acquired': (d) => `Lease acquired on resource ${d.resource} (blueprint ${d.blueprint}).`,
  'lease.activated': (d) => `Lease is active on resource ${d.resource}.`,
  'lease.waiting-for-resources': (d) => `Waiting for resources from ${d.blueprints.join(', ') || 'no blueprint'}: ${d.reasons.join('; ')}.`,
  'lease.waiting-for-authorization': (d) =>
    `Waiting for authorization of owner ${d.owner}${d.inheritedFrom ? ` (inherited from resource ${d.inheritedFrom})` : ''} on ${plural('blueprint', d.blueprints)}${d.declined.length ? ` (declined on ${d.declined.join(', ')})` : ''}.`,
  'lease.allocation-failure': (d) => `Allocation ${d.attempt ?? ''} through ${d.blueprint} failed: ${d.reason}${d.retryAt ? `; next allocation not before ${d.retryAt}` : '; giving up'}.`,
  'lease.reclaim': (d) => `Reclaiming idle resource ${d.resource} of ${d.blueprint} to make room.`,
  'lease.released': (d) => `Lease released${releasedBy(d)}.`,
  'lease.expired': (d) => `Lease expired at ${d.at}.`,
  'lease.extended': (d) => `Lease now expires at ${d.to}${d.author ? ` (extended by ${d.author})` : ''}.`,
  'lease.timeout': (d) => `Lease was not active within ${d.timeout}; released.`,
  'lease.broken': (d) => `Lease broke: ${d.reason}.`,
  'lease.requeued': (d) => `Resource ${d.resource} will not serve this lease (${d.reason}); allocating again.`,
  'lease.destroyed': () => 'Lease destroyed.',
  'lease.slot-lock-failure': (d) => `Slot locks ${d.keys.join(', ')} on resource ${d.resource} are held by another object; will retry.`,
  'resource.allocating': (d) => `Allocating a new resource${d.lease ? ` for lease ${d.lease}` : d.warm ? ' for the warm pool (minIdle)' : ''}.`,
  'resource.allocated': () => 'Resource allocated.',
  'resource.activated': () => 'Resource is active.',
  'resource.released': (d) => `Resource released${releasedBy(d)}.`,
  'resource.reclaimed': (d) => `Idle resource reclaimed${d.lease ? ` for lease ${d.lease}` : ''}.`,
  'resource.broken': (d) => `Resource broke: ${d.reason}.`,
  'resource.destroyed': () => 'Resource destroyed.',
  'resource.resume': (d) => `Resuming interrupted ${d.phase} (attempt ${d.attempt}).`,
  'resource.slot-lock-failure': (d) =>
    `Slot locks ${d.keys.join(', ')} asked for by ${d.phase} are held by another object; ${d.retryAt ? `will retry at ${d.retryAt}` : 'no lease waits for this resource: releasing it'}.`,
  'hook.failure': (d) =>
    `Hook ${d.hook} failed: ${d.error}${d.code ? ` [${d.code}]` : ''}` + (d.retry ? `; retry ${d.attempt ?? ''} at ${d.retryAt}.` : '.'),
  'hook.retry-later': (d) => `Hook ${d.hook} asked to retry later (${d.reason}); next try at ${d.retryAt}.`,
  'command.rejected': (d) => `Command ${d.command} rejected: ${d.reason}.`,
  'authorization.requested': (d) => `Authorization of owner ${d.owner} on blueprint ${d.blueprint} requested${d.lease ? ` for lease ${d.lease}` : ''}${d.author ? ` by ${d.author}` : ''}.`,
  'authorization.authorized': (d) => `Owner ${d.owner} authorized on blueprint ${d.blueprint}${changedBy(d)}.`,
  'authorization.declined': (d) => `Owner ${d.owner} declined on blueprint ${d.blueprint}${changedBy(d)}.`,
  'blueprint.draining': (d) =>
    `Blueprint ${d.blueprint} drains${d.author ? ` (by ${d.author})` : ''}: it serves no new lease; ${d.idle} idle resource${d.idle === 1 ? '' : 's'} to release now, leased ones when their leases end.`,
  'blueprint.resumed': (d) => `Blueprint ${d.blueprint} resumed${d.author ? ` by ${d.author}` : ''}: it serves leases again.`,
  'status.changed': (d) => `${d.kind} status ${d.from} → ${d.to}.`,
  'blueprint.note': (d) => d.message,
};

/** A stored log entry. `count` > 1 when one entry stands for a repeated event (one wait is one row). */
export interface LogEntry {
  id: number;
  type: string;
  at: DateTime;
  lastAt: DateTime;
  count: number;
  blueprint: string | null;
  resource: string | null;
  lease: string | null;
  data: JsonObject;
  message: string;
}

export function renderLog(type: string, data: JsonObject, blueprintRenderers?: Record<string, (data: JsonObject) => string>): string {
  const own = blueprintRenderers?.[type];
  try {
    if (own) return own(data);
    const builtIn = (renderers as unknown as Record<string, (d: JsonObject) => string>)[type];
    if (builtIn) return builtIn(data);
  } catch {
    // A renderer that throws must not hide the entry.
  }
  return `${type} ${JSON.stringify(data)}`;
}

export const LOG_TYPES = Object.keys(renderers) as LogType[];
