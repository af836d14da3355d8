import * as builtins from '../blueprints/index.js';
import * as slipway from '../lib/index.js';
import { CommitOutcomeUnknownError, SlipwayError } from '../lib/index.js';

describe('errors a user can catch', () => {
  test('every exported error class is a SlipwayError (a stable code to switch on)', () => {
    const classes = [...Object.entries(slipway), ...Object.entries(builtins)].filter(([name, value]) => typeof value === 'function' && /(Error|RetryLater)$/.test(name));
    expect(classes.length).toBeGreaterThan(15);
    for (const [name, value] of classes) expect({ name, slipway: value === SlipwayError || (value as { prototype: unknown }).prototype instanceof SlipwayError }).toEqual({ name, slipway: true });
  });

  test('CommitOutcomeUnknownError: code COMMIT_OUTCOME_UNKNOWN, the lost connection as cause', () => {
    const lost = new Error('Connection terminated unexpectedly');
    const error = new CommitOutcomeUnknownError(lost);
    expect(error).toBeInstanceOf(SlipwayError);
    expect(error.code).toBe('COMMIT_OUTCOME_UNKNOWN');
    expect(error.name).toBe('CommitOutcomeUnknownError');
    expect(error.cause).toBe(lost);
  });
});
