import type { Migration } from './migration.js';
import { initial } from './0001-initial.js';
import { gcIndexes } from './0002-gc-indexes.js';
import { hotPath } from './0003-hot-path.js';
import { failureStreaks } from './0004-failure-streaks.js';
import { leaseRenewal } from './0005-lease-renewal.js';
import { authorizations } from './0006-authorizations.js';
import { poolPolicies } from './0007-pool-policies.js';

/** One schema change. `up` receives the quoted schema name to qualify its tables with. */
export type { Migration } from './migration.js';

/** Append-only and explicit: no globs (they break under ESM), never edit a shipped entry. */
export const MIGRATIONS: readonly Migration[] = [initial, gcIndexes, hotPath, failureStreaks, leaseRenewal, authorizations, poolPolicies];
