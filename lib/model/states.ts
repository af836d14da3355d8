/**
 * Lifecycles as data. The transition tables below are the only legal status changes;
 * every status write in the store is a compare-and-set checked against them, and the
 * database columns are constrained to the same sets (see the initial migration).
 */

export const LEASE_STATUSES = ['pending', 'acquired', 'active', 'released', 'broken', 'destroyed'] as const;
export type LeaseStatus = (typeof LEASE_STATUSES)[number];

export const RESOURCE_STATUSES = ['pending', 'active', 'released', 'broken', 'destroyed'] as const;
export type ResourceStatus = (typeof RESOURCE_STATUSES)[number];

export const LEASE_TRANSITIONS: Readonly<Record<LeaseStatus, readonly LeaseStatus[]>> = {
  pending: ['acquired', 'broken', 'released'],
  acquired: ['active', 'pending', 'broken', 'released'],
  active: ['released', 'broken'],
  released: ['destroyed'],
  broken: ['destroyed'],
  destroyed: [],
};

export const RESOURCE_TRANSITIONS: Readonly<Record<ResourceStatus, readonly ResourceStatus[]>> = {
  pending: ['active', 'broken', 'released'],
  active: ['released', 'broken'],
  released: ['destroyed'],
  broken: ['destroyed'],
  destroyed: [],
};

/** Per-state flags, shared by the engine and `stats()`. */
export const LEASE_STATE_FLAGS: Readonly<Record<LeaseStatus, { live: boolean; releasable: boolean; deletionLane: boolean }>> = {
  pending: { live: true, releasable: true, deletionLane: false },
  acquired: { live: true, releasable: true, deletionLane: false },
  active: { live: true, releasable: true, deletionLane: false },
  released: { live: false, releasable: false, deletionLane: true },
  broken: { live: false, releasable: false, deletionLane: true },
  destroyed: { live: false, releasable: false, deletionLane: false },
};

export const RESOURCE_STATE_FLAGS: Readonly<Record<ResourceStatus, { live: boolean; releasable: boolean; deletionLane: boolean }>> = {
  pending: { live: true, releasable: true, deletionLane: false },
  active: { live: true, releasable: true, deletionLane: false },
  released: { live: false, releasable: false, deletionLane: true },
  broken: { live: false, releasable: false, deletionLane: true },
  destroyed: { live: false, releasable: false, deletionLane: false },
};

export type ObjectKind = 'lease' | 'resource';

export function isLegalTransition(kind: ObjectKind, from: string, to: string): boolean {
  const table: Record<string, readonly string[]> = kind === 'lease' ? LEASE_TRANSITIONS : RESOURCE_TRANSITIONS;
  return table[from]?.includes(to) ?? false;
}

