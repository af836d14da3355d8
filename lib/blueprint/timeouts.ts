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

/** How long each hook may take before it counts as failed. `default` applies to every hook not named. */
export type HookTimeouts = { default?: DurationInput } & { [H in HookName]?: DurationInput };
export type NormalizedTimeouts = Record<HookName, Duration>;

/** Questions answer fast; work (allocate, activate, destroy) may take a while. */
const QUESTIONS: ReadonlySet<HookName> = new Set(['canEverAllocate', 'canAllocate', 'canAcquireLease']);
const QUESTION_DEFAULT = Duration.fromObject({ minutes: 1 });
const WORK_DEFAULT = Duration.fromObject({ minutes: 30 });

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
    return d;
  };
  const fallback = parse('default');
  return Object.fromEntries(HOOKS.map((h) => [h, parse(h) ?? fallback ?? (QUESTIONS.has(h) ? QUESTION_DEFAULT : WORK_DEFAULT)])) as NormalizedTimeouts;
}
