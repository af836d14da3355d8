import { SlipwayError } from './slipway-error.js';

/**
 * Another broker has the embedded database's `dataDir` open, in this process or another
 * one (PGlite is one session: two openers would silently lose each other's writes). Nothing
 * was written. Close that broker first, or share a PostgreSQL server (`database.url`)
 * between processes instead.
 */
export class DataDirLockedError extends SlipwayError {
  readonly dataDir: string;
  /** The process that holds the directory. */
  readonly pid: number;
  /** The host that process runs on. */
  readonly hostname: string;
  constructor(dataDir: string, pid: number, hostname: string) {
    super(
      'DATA_DIR_LOCKED',
      `database.dataDir ${dataDir} is open in process ${pid} on ${hostname}; an embedded database has one broker at a time (close that one first, or share a database.url instead)`,
    );
    this.dataDir = dataDir;
    this.pid = pid;
    this.hostname = hostname;
  }
}
