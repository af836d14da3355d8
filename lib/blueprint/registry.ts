import { ValidationError } from '../errors/validation-error.js';
import type { Blueprint } from './contract.js';
import { checkNormalizedTimeouts } from './timeouts.js';

/** Checks the broker's `blueprints` option: real blueprints, unique names. */
export function defineBlueprintCheck(list: unknown): Map<string, Blueprint<any, any, any>> {
  const map = new Map<string, Blueprint<any, any, any>>();
  if (list === undefined) return map;
  if (!Array.isArray(list)) throw new ValidationError('blueprints', 'must be an array of blueprints');
  // An index loop, not forEach(): forEach() skips the holes of a sparse array.
  for (let i = 0; i < list.length; i++) {
    const b = list[i];
    if (!b || typeof b !== 'object' || typeof b.name !== 'string' || !b.implementation || !b.limits) {
      throw new ValidationError(`blueprints[${i}]`, 'is not a blueprint (make one with a factory from defineBlueprint)');
    }
    checkNormalizedTimeouts(b.timeouts, `blueprints[${i}].timeouts`);
    if (map.has(b.name)) throw new ValidationError(`blueprints[${i}].name`, `two blueprints are named "${b.name}"`);
    map.set(b.name, b);
  }
  return map;
}
