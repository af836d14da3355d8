import type { Sql } from '../db.js';

/** One schema migration: applied once, in order, under the migration lock. */
export interface Migration {
  id: number;
  name: string;
  up(sql: Sql, quotedSchema: string): Promise<void>;
}
