import type { Broker, LeaseQuery, ResourceQuery } from './types.js';
import type { BrokerContext } from './context.js';
import { ValidationError } from '../errors/validation-error.js';
import { renderLog, type LogEntry } from '../logs/log-types.js';
import { checkFilter, checkText } from '../model/call-arguments.js';
import type { LeaseRecord, ResourceRecord } from '../model/lease.js';
import { LEASE_STATUSES, RESOURCE_STATUSES } from '../model/states.js';
import type { LeaseRow, ResourceRow } from '../store/store.js';
import { fromDb } from '../time.js';
import { describeValue } from '../values.js';
import type { Blueprint } from '../blueprint/contract.js';

const statusFilter = (value: string | string[] | undefined, known: readonly string[], field: string) => {
  if (value === undefined) return null;
  const list = Array.isArray(value) ? value : [value];
  for (const s of list) if (!known.includes(s)) throw new ValidationError(field, `unknown status "${s}" (one of ${known.join(', ')})`);
  return list;
};

const publicLease = (r: LeaseRow): LeaseRecord => ({
  id: r.id, type: r.type, status: r.status, attributes: r.attributes, owner: r.owner, priority: r.priority, resourceId: r.resourceId,
  parentResourceId: r.parentResourceId, expiresAt: r.expiresAt, createdAt: r.createdAt, statusChangedAt: r.statusChangedAt, brokenReason: r.brokenReason,
});
const publicResource = (r: ResourceRow): ResourceRecord => ({
  id: r.id, type: r.type, blueprint: r.blueprint, status: r.status, attributes: r.attributes, createdAt: r.createdAt, statusChangedAt: r.statusChangedAt, brokenReason: r.brokenReason,
});

const renderers = (blueprints: Map<string, Blueprint<any, any, any>>, blueprint: string | null) => (blueprint ? blueprints.get(blueprint)?.implementation.logTypes : undefined);
/** A log row as the API hands it out, rendered by its blueprint's log types. */
export const toLogEntry = (blueprints: Map<string, Blueprint<any, any, any>>, r: Record<string, any>): LogEntry => ({
  id: Number(r.id),
  type: r.type,
  at: fromDb(r.at)!,
  lastAt: fromDb(r.last_at)!,
  count: Number(r.count),
  blueprint: r.blueprint ?? null,
  resource: r.resource_id ?? null,
  lease: r.lease_id ?? null,
  data: r.data ?? {},
  message: renderLog(r.type, r.data ?? {}, renderers(blueprints, r.blueprint ?? null)),
});

/** `limit` and `offset` of a list: whole numbers, checked here so that SQL never sees a bad one. */
const pageOf = (q: { limit?: unknown; offset?: unknown }): { limit?: number; offset?: number } => {
  const { limit, offset } = q;
  if (limit !== undefined && !(Number.isInteger(limit) && (limit as number) >= 1 && (limit as number) <= 10_000)) {
    throw new ValidationError('limit', `must be a whole number from 1 to 10000 (got ${describeValue(limit)})`);
  }
  if (offset !== undefined && !(Number.isInteger(offset) && (offset as number) >= 0 && (offset as number) <= Number.MAX_SAFE_INTEGER)) {
    throw new ValidationError('offset', `must be a whole number, 0 or more (got ${describeValue(offset)})`);
  }
  return { limit: limit as number | undefined, offset: offset as number | undefined };
};

/** The broker's reads: leases, resources and logs. Filters are checked before anything is read. */
export function readCalls(ctx: BrokerContext, live: <T>(call: () => Promise<T>) => Promise<T>): Pick<Broker, 'leases' | 'resources' | 'logs'> {
  const { store } = ctx;
  return {
    leases: {
      get: (id) =>
        live(async () => {
          checkText(id, 'id');
          const row = await store.lease(id);
          return row ? publicLease(row) : null;
        }),
      list: (query) => live(async () => {
        const q = checkFilter(query, { call: 'leases.list', field: 'query' }, ['type', 'owner', 'resource', 'parentResource'], ['status', 'limit', 'offset']) as LeaseQuery;
        const statuses = statusFilter(q.status, LEASE_STATUSES, 'status');
        return (await store.listLeases({ ...q, ...pageOf(q), statuses })).map(publicLease);
      }),
    },
    resources: {
      get: (id) =>
        live(async () => {
          checkText(id, 'id');
          const row = await store.resource(id);
          return row ? publicResource(row) : null;
        }),
      list: (query) => live(async () => {
        const q = checkFilter(query, { call: 'resources.list', field: 'query' }, ['type', 'blueprint'], ['status', 'limit', 'offset']) as ResourceQuery;
        const statuses = statusFilter(q.status, RESOURCE_STATUSES, 'status');
        return (await store.listResources({ ...q, ...pageOf(q), statuses })).map(publicResource);
      }),
    },
    logs: (options) => live(async () => {
      const filter = checkFilter(options, { call: 'logs', field: 'filter' }, ['lease', 'resource', 'blueprint', 'type']);
      return (await store.listLogs(filter)).map((r) => toLogEntry(ctx.settings.blueprints, r));
    }),
  };
}
