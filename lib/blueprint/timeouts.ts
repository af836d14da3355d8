import { Duration } from 'luxon';
import { ValidationError } from '../errors/validation-error.js';
import { parseDuration, type DurationInput } from '../time.js';

/** Every hook the broker calls on a blueprint, in lifecycle order. */
export const HOOKS = [
  'canEverAllocate',
  'canAllocate',
  'allocateResource',
  'activateResource',
  'canAcquireLease',
  'acquireLease',
  'activateLease',
  'releaseLease',
  'destroyLease',
  'destroyResource',
] as const;
export type HookName = (typeof HOOKS)[number];

/**
 * How long each hook may take before it counts as failed. `default` applies to every hook
 * not named. Each value must be longer than zero and at most {@link MAX_HOOK_TIMEOUT}.
 * @defaultValue 1 minute for `canEverAllocate`, `canAllocate` and `canAcquireLease`; 30 minutes for every other hook
 */
export type HookTimeouts = { default?: DurationInput } & { [H in HookName]?: DurationInput };
export type NormalizedTimeouts = Record<HookName, Duration>;

/** Questions answer fast; work (allocate, activate, destroy) may take a while. */
const QUESTIONS: ReadonlySet<HookName> = new Set(['canEverAllocate', 'canAllocate', 'canAcquireLease']);
const QUESTION_DEFAULT = Duration.fromObject({ minutes: 1 });
const WORK_DEFAULT = Duration.fromObject({ minutes: 30 });

/**
 * The longest timeout a hook may be given: 24 hours. A longer one is no bound at all, and
 * a huge one (1e17 ms) puts the deadline past the date range, where the timer re-arms
 * forever and never fires. Work that really takes longer polls with `RetryLater` instead.
 */
export const MAX_HOOK_TIMEOUT = Duration.fromObject({ hours: 24 });

/** Checks a blueprint's `timeouts` option and fills in the defaults. Throws a ValidationError naming the bad key. */
export function normalizeTimeouts(timeouts: unknown): NormalizedTimeouts {
  if (timeouts !== undefined && (timeouts === null || typeof timeouts !== 'object' || Array.isArray(timeouts))) {
    throw new ValidationError('timeouts', 'must be an object of durations by hook name (and `default`)');
  }
  const t = (timeouts ?? {}) as Record<string, unknown>;
  for (const key of Object.keys(t)) {
    if (key !== 'default' && !(HOOKS as readonly string[]).includes(key)) throw new ValidationError(`timeouts.${key}`, `is not a hook (one of default, ${HOOKS.join(', ')})`);
  }
  const parse = (key: string): Duration | undefined => {
    if (t[key] === undefined) return undefined;
    const d = parseDuration(t[key], `timeouts.${key}`);
    if (d.toMillis() < 1) throw new ValidationError(`timeouts.${key}`, 'must be longer than 0');
    if (d.toMillis() > MAX_HOOK_TIMEOUT.toMillis()) throw new ValidationError(`timeouts.${key}`, `must be at most 24 hours (got ${d.toISO()}); poll longer work with RetryLater`);
    return d;
  };
  const fallback = parse('default');
  return Object.fromEntries(HOOKS.map((h) => [h, parse(h) ?? fallback ?? (QUESTIONS.has(h) ? QUESTION_DEFAULT : WORK_DEFAULT)])) as NormalizedTimeouts;
}

/**
 * Checks the `timeouts` of a blueprint object handed to `createBroker` as it is: a hand-made
 * object (not from defineBlueprint) must not slip an unbounded timeout past normalizeTimeouts.
 * A missing hook falls back to the default.
 */
export function checkNormalizedTimeouts(timeouts: unknown, field: string): void {
  if (timeouts === undefined) return;
  if (timeouts === null || typeof timeouts !== 'object' || Array.isArray(timeouts)) throw new ValidationError(field, 'must be the timeouts of a blueprint made by defineBlueprint');
  for (const hook of HOOKS) {
    const d: unknown = (timeouts as Record<string, unknown>)[hook];
    if (d === undefined) continue;
    if (!Duration.isDuration(d) || !d.isValid || !(d.toMillis() >= 1 && d.toMillis() <= MAX_HOOK_TIMEOUT.toMillis())) {
      throw new ValidationError(`${field}.${hook}`, 'must be a luxon Duration longer than 0 and at most 24 hours (make blueprints with defineBlueprint)');
    }
  }
}
