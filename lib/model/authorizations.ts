import type { DateTime } from 'luxon';
import { ValidationError } from '../errors/validation-error.js';
import { describeValue } from '../values.js';
import { assertText } from './spec.js';

/**
 * Authorizations as data: which owners may use a blueprint that requires authorization
 * (`requireAuthorization: true`). A row holds one owner pattern of one blueprint: an exact
 * owner (`build/42`), or a prefix ending in `/*` (`build/*`: every owner that starts with
 * `build/`). The most specific row that covers an owner decides for it: its exact row,
 * else the longest prefix. The database column is constrained to the same states.
 */
export const AUTHORIZATION_STATES = ['requested', 'authorized', 'declined'] as const;
export type AuthorizationState = (typeof AUTHORIZATION_STATES)[number];

/** One row of the authorizations table, as the public API hands it out. */
export interface AuthorizationRecord {
  blueprint: string;
  /** An exact owner, or a prefix ending in `/*`. */
  owner: string;
  state: AuthorizationState;
  createdAt: DateTime;
  /** When the state was last set, and by whom (`author` of the call; null for a request the allocator recorded). */
  changedAt: DateTime;
  changedBy: string | null;
}

/** Whether `pattern` is a prefix pattern (`build/*`) rather than an exact owner. */
export function isOwnerPrefix(pattern: string): boolean {
  return pattern.endsWith('/*');
}

/**
 * An owner pattern of an authorization call: a non-empty string, with `*` only as the last
 * character of a prefix (`build/*`). A `*` anywhere else would read as a glob that is not one.
 */
export function checkOwnerPattern(value: unknown, field = 'owner'): string {
  if (typeof value !== 'string' || value === '') throw new ValidationError(field, `must be a non-empty string: an owner, or a prefix ending in /* such as "build/*" (got ${describeValue(value)})`);
  assertText(value, field);
  const star = value.indexOf('*');
  if (star !== -1 && !(isOwnerPrefix(value) && star === value.length - 1 && value.length > 2)) {
    throw new ValidationError(field, `"${value}": * may only end a prefix, after a /, such as "build/*"`);
  }
  return value;
}

/** A state filter of `authorizations.list`. */
export function checkAuthorizationState(value: unknown, field = 'state'): AuthorizationState {
  if (typeof value !== 'string' || !(AUTHORIZATION_STATES as readonly string[]).includes(value)) {
    throw new ValidationError(field, `must be one of ${AUTHORIZATION_STATES.join(', ')} (got ${describeValue(value)})`);
  }
  return value as AuthorizationState;
}
