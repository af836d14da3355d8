import { BLUEPRINT_NAME } from '../values.js';
import { Duration } from 'luxon';
import { ValidationError } from '../errors/validation-error.js';
import { optionalIntegerIn } from '../model/call-arguments.js';
import type { JsonObject } from '../model/spec.js';
import { parseDuration } from '../time.js';
import { normalizeTimeouts } from './timeouts.js';
import type { Blueprint, BlueprintImplementation, BlueprintLimits, BlueprintOptions, NormalizedLimits } from './contract.js';

export { BLUEPRINT_NAME };

const IMPLEMENTATION_KEYS = new Set([
  'type', 'description', 'validateConfig', 'idleExpiry', 'canEverAllocate', 'canAllocate', 'allocateResource', 'activateResource',
  'canAcquireLease', 'acquireLease', 'activateLease', 'releaseLease', 'destroyLease', 'destroyResource', 'interfaces', 'logTypes',
]);
const OPTIONAL_FUNCTIONS = [
  'validateConfig', 'canEverAllocate', 'canAllocate', 'activateResource', 'canAcquireLease', 'acquireLease', 'activateLease', 'releaseLease', 'destroyLease', 'destroyResource',
] as const;
const OPTION_KEYS = new Set(['name', 'config', 'limits', 'enabled', 'requireAuthorization', 'timeouts']);

export const defaultAllocationLimit = (activeCount: number) => Math.max(1, Math.ceil(0.25 * activeCount));

/**
 * Declares a blueprint implementation. Returns a factory that configures named
 * instances: `const hosts = defineBlueprint({...}); hosts({ name: 'ci', config })`.
 */
export function defineBlueprint<Config = unknown, ResourceAttrs extends JsonObject = JsonObject, LeaseAttrs extends JsonObject = JsonObject>(
  implementation: BlueprintImplementation<Config, ResourceAttrs, LeaseAttrs>,
): (options: BlueprintOptions<Config>) => Blueprint<Config, ResourceAttrs, LeaseAttrs> {
  if (!implementation || typeof implementation !== 'object' || Array.isArray(implementation)) throw new ValidationError('implementation', 'must be an object');
  for (const key of Object.keys(implementation)) {
    if (!IMPLEMENTATION_KEYS.has(key)) throw new ValidationError(`implementation.${key}`, `is not part of the blueprint contract (known: ${[...IMPLEMENTATION_KEYS].join(', ')})`);
  }
  if (typeof implementation.type !== 'string' || implementation.type.trim() === '') throw new ValidationError('implementation.type', 'must be a non-empty string');
  if (implementation.type.includes('\0')) throw new ValidationError('implementation.type', 'must not contain a NUL character');
  if (typeof implementation.allocateResource !== 'function') throw new ValidationError('implementation.allocateResource', 'must be a function');
  for (const hook of OPTIONAL_FUNCTIONS) {
    const value = (implementation as unknown as Record<string, unknown>)[hook];
    if (value !== undefined && typeof value !== 'function') throw new ValidationError(`implementation.${hook}`, `must be a function (got ${typeof value})`);
  }
  if (implementation.description !== undefined && typeof implementation.description !== 'string') throw new ValidationError('implementation.description', 'must be a string');
  for (const group of ['interfaces', 'logTypes'] as const) {
    const table: unknown = implementation[group];
    if (table === undefined) continue;
    if (table === null || typeof table !== 'object' || Array.isArray(table)) throw new ValidationError(`implementation.${group}`, 'must be an object of functions by name');
    for (const [name, fn] of Object.entries(table)) {
      if (typeof fn !== 'function') throw new ValidationError(`implementation.${group}.${name}`, `must be a function (got ${typeof fn})`);
    }
  }
  const idleExpiry = implementation.idleExpiry;
  if (idleExpiry !== undefined && typeof idleExpiry !== 'function') parseDuration(idleExpiry, 'implementation.idleExpiry');
  return (options) => {
    if (!options || typeof options !== 'object' || Array.isArray(options)) throw new ValidationError('blueprint', 'options must be an object with a name');
    for (const key of Object.keys(options)) {
      if (!OPTION_KEYS.has(key)) throw new ValidationError(`blueprint.${key}`, `is not a blueprint option (known: ${[...OPTION_KEYS].join(', ')})`);
    }
    if (typeof options.name !== 'string' || !BLUEPRINT_NAME.test(options.name)) {
      throw new ValidationError('blueprint.name', `must match ${BLUEPRINT_NAME} (got ${JSON.stringify(options.name)})`);
    }
    let config = options.config as Config;
    if (implementation.validateConfig) {
      try {
        config = implementation.validateConfig(options.config);
      } catch (error) {
        if (error instanceof ValidationError) throw error;
        const why = error instanceof Error ? error.message : String(error);
        throw new ValidationError('config', `rejected by blueprint ${JSON.stringify(options.name)}: ${why}`, { cause: error });
      }
    }
    if (options.enabled !== undefined && typeof options.enabled !== 'boolean') throw new ValidationError('blueprint.enabled', 'must be a boolean');
    if (options.requireAuthorization !== undefined && typeof options.requireAuthorization !== 'boolean') throw new ValidationError('blueprint.requireAuthorization', 'must be a boolean');
    const limits = normalizeLimits(options.limits, implementation, config);
    const timeouts = normalizeTimeouts(options.timeouts);
    return Object.freeze({ name: options.name, type: implementation.type, config, enabled: options.enabled ?? true, requireAuthorization: options.requireAuthorization ?? false, limits, timeouts, implementation });
  };
}

function normalizeLimits<Config>(limits: BlueprintLimits | undefined, implementation: BlueprintImplementation<Config, any, any>, config: Config): NormalizedLimits {
  if (limits !== undefined && (limits === null || typeof limits !== 'object' || Array.isArray(limits))) throw new ValidationError('limits', 'must be an object');
  const l = limits ?? {};
  const known = new Set(['maxResources', 'maxLeasesPerResource', 'allocationLimit', 'supplemental', 'reclaimIdleAfter', 'idleExpiry', 'maxResourceAge', 'maxLeasesPerResourceLifetime', 'destroyOnRelease', 'minIdle']);
  for (const key of Object.keys(l)) if (!known.has(key)) throw new ValidationError(`limits.${key}`, 'is not a known limit');
  optionalIntegerIn(l.maxResources, 'limits.maxResources', 1, 100_000);
  optionalIntegerIn(l.maxLeasesPerResource, 'limits.maxLeasesPerResource', 1, 100_000);
  if (l.allocationLimit !== undefined && typeof l.allocationLimit !== 'function') throw new ValidationError('limits.allocationLimit', 'must be a function (activeCount) => number');
  if (l.supplemental !== undefined && typeof l.supplemental !== 'boolean') throw new ValidationError('limits.supplemental', 'must be a boolean');
  optionalIntegerIn(l.maxLeasesPerResourceLifetime, 'limits.maxLeasesPerResourceLifetime', 1, 1_000_000_000);
  if (l.destroyOnRelease !== undefined && typeof l.destroyOnRelease !== 'boolean') throw new ValidationError('limits.destroyOnRelease', 'must be a boolean');
  if (l.destroyOnRelease && l.maxLeasesPerResourceLifetime !== undefined && l.maxLeasesPerResourceLifetime !== 1) {
    throw new ValidationError('limits.maxLeasesPerResourceLifetime', `must be 1 or left out with destroyOnRelease, which serves one lease per resource (got ${l.maxLeasesPerResourceLifetime})`);
  }
  optionalIntegerIn(l.minIdle, 'limits.minIdle', 0, 100_000);
  if (l.minIdle !== undefined && l.maxResources !== undefined && l.minIdle > l.maxResources) {
    throw new ValidationError('limits.minIdle', `must not exceed limits.maxResources (${l.minIdle} > ${l.maxResources}): the warm pool never builds past the cap`);
  }
  const maxResourceAge = l.maxResourceAge === undefined ? null : parseDuration(l.maxResourceAge, 'limits.maxResourceAge');
  if (maxResourceAge !== null && !(maxResourceAge.toMillis() > 0)) throw new ValidationError('limits.maxResourceAge', `must be longer than zero (got ${maxResourceAge.toISO()})`);
  const allocationLimit = l.allocationLimit ?? defaultAllocationLimit;
  const fromImplementation = typeof implementation.idleExpiry === 'function' ? implementation.idleExpiry(config) : implementation.idleExpiry;
  return {
    maxResources: l.maxResources ?? null,
    maxLeasesPerResource: l.maxLeasesPerResource ?? null,
    allocationLimit: (active) => {
      const value = allocationLimit(active);
      // A user function that returns nonsense must not disable the rate limit.
      return Number.isFinite(value) ? Math.max(1, Math.floor(value)) : 1;
    },
    supplemental: l.supplemental ?? false,
    reclaimIdleAfter: l.reclaimIdleAfter === undefined ? Duration.fromMillis(0) : parseDuration(l.reclaimIdleAfter, 'limits.reclaimIdleAfter'),
    idleExpiry:
      l.idleExpiry !== undefined
        ? parseDuration(l.idleExpiry, 'limits.idleExpiry')
        : fromImplementation === undefined
          ? null
          : parseDuration(fromImplementation, 'implementation.idleExpiry'),
    maxResourceAge,
    maxLeasesPerResourceLifetime: l.destroyOnRelease ? 1 : (l.maxLeasesPerResourceLifetime ?? null),
    destroyOnRelease: l.destroyOnRelease ?? false,
    minIdle: l.minIdle ?? 0,
  };
}
