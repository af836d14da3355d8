import type { DateTime } from 'luxon';
import type { Blueprint } from '../blueprint/contract.js';
import type { Retirement } from '../store/store.js';

/** What a resource needs of its row to tell whether it is retired. */
interface Aging {
  leasesServed: number;
  /** Of an active resource: when it became active. */
  statusChangedAt: DateTime;
  blueprintDraining: boolean;
}

/**
 * The recycling limits of `blueprint` as of `now`, for the statements that take a
 * resource: they refuse one past them (and one of a draining blueprint).
 */
export function retirementOf(blueprint: Blueprint<any, any, any>, now: DateTime): Retirement {
  const { maxLeasesPerResourceLifetime, maxResourceAge } = blueprint.limits;
  return { maxServed: maxLeasesPerResourceLifetime, bornAfter: maxResourceAge ? now.minus(maxResourceAge) : null };
}

/** Whether the blueprint has a recycling limit (`maxLeasesPerResourceLifetime`, `maxResourceAge`). */
export function recycles(blueprint: Blueprint<any, any, any>): boolean {
  return blueprint.limits.maxLeasesPerResourceLifetime !== null || blueprint.limits.maxResourceAge !== null;
}

/**
 * Why an active resource takes no new lease and goes once its leases are gone: the
 * reason its release logs. Null while it may serve.
 */
export function retiredBecause(blueprint: Blueprint<any, any, any>, resource: Aging, now: DateTime): string | null {
  const { maxLeasesPerResourceLifetime: maxServed, maxResourceAge, destroyOnRelease } = blueprint.limits;
  if (resource.blueprintDraining) return `blueprint ${blueprint.name} is draining`;
  if (maxServed !== null && resource.leasesServed >= maxServed) {
    if (destroyOnRelease) return 'served its lease (destroyOnRelease)';
    return `recycled: served ${resource.leasesServed} lease${resource.leasesServed === 1 ? '' : 's'} (maxLeasesPerResourceLifetime ${maxServed})`;
  }
  if (maxResourceAge !== null && retiresAt(blueprint, resource)! <= now) return `recycled: active for longer than ${maxResourceAge.toISO()} (maxResourceAge)`;
  return null;
}

/** When the resource becomes too old to serve (`maxResourceAge`), or null without that limit. */
export function retiresAt(blueprint: Blueprint<any, any, any>, resource: Pick<Aging, 'statusChangedAt'>): DateTime | null {
  const age = blueprint.limits.maxResourceAge;
  return age ? resource.statusChangedAt.plus(age) : null;
}
