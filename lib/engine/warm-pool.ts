import type { Blueprint } from '../blueprint/contract.js';
import type { Unit } from '../store/store.js';
import { HookError } from '../errors/hook-error.js';
import { hookFailureLog } from './hooks.js';
import { retirementOf } from './retirement.js';
import type { Runtime } from './runtime.js';

/** The blueprints of this broker that keep a warm pool (`limits.minIdle`). */
export function warmPools(rt: Runtime): Blueprint<any, any, any>[] {
  return [...rt.blueprints.values()].filter((b) => b.enabled && b.limits.minIdle > 0);
}

/**
 * Tops up the warm pool of each blueprint with `minIdle`: builds new resources, reserved
 * for no lease, until the idle and warming ones reach `minIdle`, within the allocation
 * limit and `maxResources` (warming is allocation too). One short, hook-free transaction
 * per blueprint under its allocation lock, the lock every allocation takes, so that two
 * brokers never both build the same missing resource. A draining blueprint, or one
 * backing off after failed builds, builds none. Returns how many resources it began.
 */
export async function topUpWarmPools(rt: Runtime): Promise<number> {
  let began = 0;
  for (const blueprint of warmPools(rt)) began += await topUp(rt, blueprint);
  return began;
}

async function topUp(rt: Runtime, blueprint: Blueprint<any, any, any>): Promise<number> {
  const { store } = rt;
  const { minIdle, maxResources } = blueprint.limits;
  let policyError: HookError | null = null;
  const began = await store.unit(async (u) => {
    const counts = await store.lockAllocations(u, blueprint.name);
    if (counts.draining || (counts.failure && counts.failure.retryAt > u.now)) return 0;
    const spare = await store.spareResources(u, blueprint.name, retirementOf(blueprint, u.now));
    let limit: number;
    try {
      limit = blueprint.limits.allocationLimit(counts.active);
    } catch (thrown) {
      policyError = new HookError(blueprint.name, 'limits.allocationLimit', thrown);
      return 0;
    }
    let missing = minIdle - spare.idle - spare.warming;
    let allocating = counts.allocating;
    let n = 0;
    for (; missing > 0 && allocating < limit; missing--, allocating++, n++) {
      const id = store.newId('res');
      if (maxResources !== null && !(await store.takeCapacitySlot(u, blueprint.name, maxResources, id))) break;
      await store.insertPendingResource(u, { id, type: blueprint.type, blueprint: blueprint.name, reservedFor: null, authorizingOwner: null });
      await store.log(u, { type: 'resource.allocating', data: { lease: null, warm: true }, resource: id, blueprint: blueprint.name });
    }
    return n;
  });
  // A policy function of the blueprint threw: its failure, as in the allocator (the streak backs it off).
  if (policyError) {
    const error: HookError = policyError;
    await store.unit(async (u) => {
      await store.log(u, hookFailureLog(error, {}));
      await store.blueprintFailed(u, blueprint.name, error.message, rt.backoff);
    });
  }
  return began;
}

/**
 * Whether an idle resource of `blueprint` may expire now without its warm pool going
 * below `minIdle`: decided in `unit`, under the blueprint's allocation lock.
 */
export async function mayExpireIdle(rt: Runtime, unit: Unit, blueprint: Blueprint<any, any, any>): Promise<boolean> {
  if (blueprint.limits.minIdle === 0) return true;
  await rt.store.lockAllocations(unit, blueprint.name);
  const { idle } = await rt.store.spareResources(unit, blueprint.name, retirementOf(blueprint, unit.now));
  return idle > blueprint.limits.minIdle;
}
