import type { Blueprint } from '../blueprint/contract.js';
import type { LeaseRow } from '../store/store.js';
import type { Runtime } from './runtime.js';

/** How the candidate blueprints of a lease stand on its authorizing owner. */
export interface AuthorizationVerdict {
  /** Those the lease may use, in the allocator's order: they require no authorization, or authorized the owner. */
  allowed: Blueprint<any, any, any>[];
  /** Those that require authorization and have not decided for the owner yet (requested). */
  waiting: string[];
  /** Those that declined the owner, or that can never authorize the lease (it has no owner). */
  declined: string[];
}

/**
 * Sorts a lease's candidates by the authorization of its authorizing owner (its own owner,
 * or for a child lease the owner its parent resource was built for). A snapshot read:
 * the transaction that acquires or allocates checks again (`Store.authorizationGate`).
 * A blueprint with no row for the owner gets a `requested` one, as Drydock records a
 * request, so that an operator sees who waits and can authorize it.
 */
export async function sortByAuthorization(rt: Runtime, lease: LeaseRow, candidates: Blueprint<any, any, any>[]): Promise<AuthorizationVerdict> {
  const { store } = rt;
  const required = candidates.filter((b) => b.requireAuthorization).map((b) => b.name);
  if (required.length === 0) return { allowed: candidates, waiting: [], declined: [] };
  const owner = lease.authorizingOwner;
  if (owner === null) return { allowed: candidates.filter((b) => !b.requireAuthorization), waiting: [], declined: required };
  const states = await store.authorizationStates(required, owner);
  const missing = required.filter((name) => !states.has(name));
  if (missing.length > 0) {
    await store.unit(async (u) => {
      for (const blueprint of missing) {
        const { created } = await store.requestAuthorization(u, blueprint, owner, null);
        if (created) await store.log(u, { type: 'authorization.requested', data: { blueprint, owner, lease: lease.id, author: null }, blueprint, lease: lease.id });
      }
    });
  }
  const state = (name: string) => states.get(name)?.state ?? 'requested';
  return {
    allowed: candidates.filter((b) => !b.requireAuthorization || state(b.name) === 'authorized'),
    waiting: required.filter((name) => state(name) === 'requested'),
    declined: required.filter((name) => state(name) === 'declined'),
  };
}

/** "owner build/42", or for a child lease "owner build/42 (inherited from resource res_1)". */
export function ownerText(lease: LeaseRow): string {
  const inherited = lease.parentResourceId ? ` (inherited from resource ${lease.parentResourceId})` : '';
  return lease.authorizingOwner === null ? `the lease has no owner to authorize${inherited}` : `owner ${lease.authorizingOwner}${inherited}`;
}

const plural = (list: string[]) => `blueprint${list.length === 1 ? '' : 's'} ${list.join(', ')}`;

/** Why a lease no blueprint will ever authorize breaks. */
export function declinedReason(lease: LeaseRow, declined: string[]): string {
  if (lease.authorizingOwner === null) return `${ownerText(lease)}, and ${plural(declined)} require${declined.length === 1 ? 's' : ''} authorization`;
  return `${ownerText(lease)} is declined on ${plural(declined)}`;
}

/** The reasons a waiting lease gives for the candidates it may not use. */
export function authorizationReasons(lease: LeaseRow, verdict: AuthorizationVerdict): string[] {
  const reasons: string[] = [];
  if (verdict.waiting.length > 0) reasons.push(`${ownerText(lease)} is not authorized on ${plural(verdict.waiting)} yet`);
  if (verdict.declined.length > 0) reasons.push(lease.authorizingOwner === null ? `${ownerText(lease)} for ${plural(verdict.declined)}` : `${ownerText(lease)} is declined on ${plural(verdict.declined)}`);
  return reasons;
}
