/**
 * Named crash points: every step between "intent recorded" and "outcome recorded".
 * An internal hook for the crash tests only: nothing in the public API or the package
 * exports reaches it, and with no hook installed a crash point costs one comparison.
 * A test process installs a hook that SIGKILLs itself at one point, then a new broker
 * on the same data must converge.
 */
export const CRASH_POINTS = [
  // acquire: the lease row is committed, the caller has not got its handle yet
  'acquire.recorded',
  // allocate: the resource row and its capacity slot are committed, nothing built yet
  'allocate.recorded',
  'allocateResource.before',
  'allocateResource.after',
  // activate
  'activateResource.before',
  'activateResource.after',
  // acquire a resource for a lease
  'acquireLease.before',
  'acquireLease.after',
  // lease activation
  'activateLease.before',
  'activateLease.after',
  // command consumption: read but not consumed, consumed but the pass not yet on
  'command.read',
  'command.consumed',
  // release
  'releaseLease.before',
  'releaseLease.after',
  // destroy lease
  'destroyLease.before',
  'destroyLease.after',
  // the destroy's transaction where the hand-off is a statement of its own (after the holder's
  // inline release on a blueprint with no releaseLease or destroyLease; elsewhere the destroy's
  // statement hands the resource on itself): the lease destroyed, its capacity not yet handed
  // on (rolled back together)
  'destroy.beforeHandOff',
  // a blueprint with no releaseLease or destroyLease: the release command read, then the
  // lease released and destroyed with it in one statement, the pass not yet on
  'releaseAtOnce.before',
  'releaseAtOnce.after',
  // the holder's release run inline on a blueprint with no releaseLease or destroyLease: the
  // lease's work item claimed in its transaction, nothing written yet (rolled back)
  'releaseInline.claimed',
  // ... on a blueprint with releaseLease or destroyLease: claimed and released with the intent
  // to destroy in one statement, the claim held, the pass that runs the destroy phase not yet begun
  'releaseInline.released',
  // ... on a blueprint with neither: destroyed, and a waiting lease's work item claimed by
  // the hand-off in the same transaction (committed); the waiter's pass not yet begun
  'releaseInline.handedOff',
  // destroy resource
  'destroyResource.before',
  'destroyResource.after',
  // a lease's destroy handed its resource to a waiting lease and claimed the waiter's work
  // item for this worker (committed); the waiter's pass has not begun
  'handOff.claimed',
  // a pass decided its outcome; its work item is not yet updated
  'pass.decided',
] as const;

export type CrashPoint = (typeof CRASH_POINTS)[number];

let hook: ((point: CrashPoint) => void) | null = null;

/** Test-only: installs (or with `null` removes) the function called at every crash point. */
export function setCrashHook(fn: ((point: CrashPoint) => void) | null): void {
  hook = fn;
}

export function crashPoint(point: CrashPoint): void {
  if (hook) hook(point);
}

const HOOK_POINTS = new Set<string>(CRASH_POINTS);

/** The crash points around a blueprint hook, if it has any (`can…` questions have none). */
export function hookCrashPoint(hookName: string, when: 'before' | 'after'): void {
  if (!hook) return;
  const point = `${hookName}.${when}`;
  if (HOOK_POINTS.has(point)) hook(point as CrashPoint);
}
