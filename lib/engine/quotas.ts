import { quotaMatches, type Quota } from '../model/quotas.js';
import type { Unit } from '../store/store.js';
import type { Runtime } from './runtime.js';

/** The broker's quotas that count a lease of this type and owner, in lock order (by key). */
export function quotasFor(rt: Runtime, lease: { type: string; owner: string | null }): Quota[] {
  return rt.quotas.filter((q) => quotaMatches(q, lease));
}

/**
 * Under the locks of `quotas` (held until `unit` ends; taken in key order, so two units
 * never wait on each other crosswise): the first quota that has no room for one more
 * lease, or null. The acquisition in the same unit then keeps the quota, whatever the
 * other brokers do: each of their acquisitions it counts waits for the lock.
 */
export async function quotaGate(rt: Runtime, unit: Unit, quotas: Quota[]): Promise<Quota | null> {
  for (const quota of quotas) {
    if ((await rt.store.quotaCount(quota, unit)) >= quota.maxLeases) return quota;
  }
  return null;
}

/** A plain read, for the allocator's choice to wait (the gate decides): the first quota that is full now, with its count. */
export async function fullQuota(rt: Runtime, quotas: Quota[]): Promise<{ quota: Quota; count: number } | null> {
  for (const quota of quotas) {
    const count = await rt.store.quotaCount(quota);
    if (count >= quota.maxLeases) return { quota, count };
  }
  return null;
}

/** Why a lease waits for a quota, as its wait log row says it. */
export function overQuotaReason(quota: Quota, count?: number): string {
  return `over quota ${quota.label}: ${count ?? quota.maxLeases} of ${quota.maxLeases} lease${quota.maxLeases === 1 ? '' : 's'} hold a resource`;
}
