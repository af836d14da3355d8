import { ValidationError } from '../errors/validation-error.js';
import { describeValue, isPlainObject } from '../values.js';
import { checkOwnerPattern, isOwnerPrefix } from './authorizations.js';
import { checkIntegerIn } from './call-arguments.js';
import { assertText } from './spec.js';

/** A quota as `createBroker({ quotas })` takes it. */
export interface QuotaOptions {
  /** Only leases of this requested type count (and are held back). */
  type?: string;
  /** Only leases of this owner, or of every owner a prefix ending in `/*` covers (`tenant-a/*`). */
  owner?: string;
  /** At most this many matching leases hold a resource at once (acquired, active, or on their way out). */
  maxLeases: number;
}

/**
 * A quota, checked: at most `maxLeases` leases that match it hold a resource at once,
 * across every blueprint and every broker that has it. `key` names it in the database
 * (its lock), so brokers with the same quota share it; `label` names it in logs.
 */
export interface Quota {
  type: string | null;
  owner: string | null;
  maxLeases: number;
  key: string;
  label: string;
}

const QUOTA_KEYS = new Set(['type', 'owner', 'maxLeases']);

/** `createBroker({ quotas })`, checked: each names the field it finds wrong. */
export function checkQuotas(value: unknown): Quota[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new ValidationError('quotas', `must be an array of { type?, owner?, maxLeases } (got ${describeValue(value)})`);
  const quotas = value.map((q, i): Quota => {
    const field = `quotas[${i}]`;
    if (!isPlainObject(q)) throw new ValidationError(field, `must be { type?, owner?, maxLeases } (got ${describeValue(q)})`);
    for (const key of Object.keys(q)) if (!QUOTA_KEYS.has(key)) throw new ValidationError(`${field}.${key}`, 'is not a quota option (known: type, owner, maxLeases)');
    const { type, owner, maxLeases } = q as Partial<QuotaOptions>;
    if (type === undefined && owner === undefined) throw new ValidationError(field, 'needs a match key: type, owner, or both (a quota on every lease is maxResources of each blueprint)');
    if (type !== undefined) {
      if (typeof type !== 'string' || type === '') throw new ValidationError(`${field}.type`, `must be a non-empty string (got ${describeValue(type)})`);
      assertText(type, `${field}.type`);
    }
    if (owner !== undefined) checkOwnerPattern(owner, `${field}.owner`);
    checkIntegerIn(maxLeases, `${field}.maxLeases`, 1, 1_000_000);
    const label = [type !== undefined ? `type ${type}` : null, owner !== undefined ? `owner ${owner}` : null].filter(Boolean).join(', ');
    return { type: type ?? null, owner: owner ?? null, maxLeases: maxLeases!, key: JSON.stringify([type ?? null, owner ?? null]), label };
  });
  const seen = new Map<string, number>();
  quotas.forEach((q, i) => {
    const first = seen.get(q.key);
    if (first !== undefined) throw new ValidationError(`quotas[${i}]`, `matches the same leases as quotas[${first}] (${q.label}): give one quota per match`);
    seen.set(q.key, i);
  });
  return quotas;
}

/** Whether a lease of `type` and `owner` counts toward the quota. */
export function quotaMatches(quota: Quota, lease: { type: string; owner: string | null }): boolean {
  if (quota.type !== null && quota.type !== lease.type) return false;
  if (quota.owner === null) return true;
  if (lease.owner === null) return false;
  return isOwnerPrefix(quota.owner) ? lease.owner.startsWith(quota.owner.slice(0, -1)) : lease.owner === quota.owner;
}
