/**
 * The ideal drain time of a burst: a broker with zero overhead that obeys the same
 * rules as slipway: at most `maxResources` resources; resources still allocating never
 * exceed `allocationLimit(active)` (the library's default, max(1, ceil(25% × active)));
 * a waiting lease drives at most one allocation; a resource takes `activationMs` to
 * build; a free active resource goes to the next waiting lease at once; a lease holds
 * its resource for `holdMs`.
 */
export interface IdealBurst {
  drainMs: number;
  /** When the last of the resources became active. */
  rampMs: number;
  resources: number;
}

export function idealBurst(opts: { leases: number; maxResources: number; activationMs: number; holdMs: number; allocationLimit: (active: number) => number }): IdealBurst {
  const { leases, maxResources, activationMs, holdMs, allocationLimit } = opts;
  const building: number[] = []; // ready times
  const freeAt: number[] = []; // one per active resource
  let waiting = leases;
  let t = 0;
  let lastFinish = 0;
  let rampMs = 0;
  for (let guard = 0; guard < 10_000_000; guard++) {
    for (let i = building.length - 1; i >= 0; i--) {
      if (building[i] <= t) {
        freeAt.push(building[i]);
        rampMs = Math.max(rampMs, building[i]);
        building.splice(i, 1);
      }
    }
    for (let i = 0; i < freeAt.length && waiting > 0; i++) {
      while (freeAt[i] <= t && waiting > 0) {
        freeAt[i] = t + holdMs;
        lastFinish = Math.max(lastFinish, freeAt[i]);
        waiting--;
      }
    }
    // Demand a free resource could not meet drives allocations, within both limits.
    while (waiting > building.length && freeAt.length + building.length < maxResources && building.length < allocationLimit(freeAt.length)) {
      building.push(t + activationMs);
    }
    if (waiting === 0) break;
    const next = Math.min(...building, ...freeAt.filter((f) => f > t));
    if (!Number.isFinite(next)) throw new Error('idealBurst: no progress possible');
    t = next;
  }
  return { drainMs: lastFinish, rampMs, resources: freeAt.length + building.length };
}
