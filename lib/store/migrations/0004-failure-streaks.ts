import type { Migration } from './migration.js';

/**
 * What lets a failing blueprint back off instead of rebuilding resources in a loop:
 * - `blueprint_failures`: per blueprint, how many builds failed in a row (a hook or a
 *   policy function threw), the last error, and until when no new allocation starts;
 *   deleted when one of its resources activates;
 * - `leases.allocation_failures`, `leases.last_failure` and `leases.allocate_after`: per
 *   lease, the allocations it drove that failed in a row, the last error (it breaks after
 *   the broker's `maxAllocationFailures`; a timeout reports the error), and until when it
 *   starts no new allocation;
 * - `resources.build_failed`: the resource broke because a build hook failed (not by a
 *   command), which is what counts as a failed allocation for the lease that drove it;
 * - `leases.end_cause`: why the lease's own worker released it, when the clock did
 *   (`expired`, `timeout`), so that a waiter reports the right error.
 */
export const failureStreaks: Migration = {
  id: 4,
  name: 'failure-streaks',
  async up(sql, s) {
    await sql.query(`
      CREATE TABLE ${s}.blueprint_failures (
        blueprint text PRIMARY KEY,
        streak integer NOT NULL CHECK (streak > 0),
        last_error text NOT NULL,
        last_failure_at timestamptz NOT NULL,
        retry_at timestamptz NOT NULL
      );
      ALTER TABLE ${s}.leases ADD COLUMN allocation_failures integer NOT NULL DEFAULT 0 CHECK (allocation_failures >= 0);
      ALTER TABLE ${s}.leases ADD COLUMN last_failure text;
      ALTER TABLE ${s}.leases ADD COLUMN allocate_after timestamptz;
      ALTER TABLE ${s}.leases ADD COLUMN end_cause text CHECK (end_cause IN ('expired', 'timeout'));
      ALTER TABLE ${s}.resources ADD COLUMN build_failed boolean NOT NULL DEFAULT false;
    `);
  },
};
