import { createHash, randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { Sql } from './db.js';
import { MIGRATIONS } from './migrations/index.js';
import { quoteIdent } from './sql/statements.js';

/**
 * The migrated, empty embedded database that every new embedded broker starts from, kept
 * on disk between processes. Making it (an initdb and every migration) costs about two
 * seconds on a 2-core machine; loading it well under one. Without the file, every process
 * pays the two seconds for its first broker, and so does every jest test file (jest gives
 * each file its own module registry, so nothing in memory survives from one to the next).
 *
 * Where: `SLIPWAY_TEMPLATE_CACHE` when set (a directory; `off` or `0` keeps nothing on
 * disk), else `$XDG_CACHE_HOME/slipway`, else `~/.cache/slipway`: a directory of this user
 * only, so no other user can plant a template.
 *
 * The file's name is a digest of everything its content follows from: PGlite's version,
 * the schema name, and the SQL text every migration runs (recorded, not guessed from the
 * code, so a migration that reads a constant is covered). A change to any of them names
 * another file. The file is written under a temporary name and renamed into place, so a
 * process killed mid-write leaves no torn template behind; one that cannot be read or
 * unpacked (gzip checks its length and CRC) is ignored and rewritten. The cache is an optimisation only: every error of
 * the disk is swallowed and the template is made in memory as before.
 */
export interface TemplateCache {
  /** The file that holds it. */
  readonly file: string;
  /** The cached template, uncompressed, or undefined. */
  read(): Blob | undefined;
  /** Keeps `template` (an uncompressed dump) for the next process. */
  write(template: Blob): Promise<void>;
}

const OFF = new Set(['off', '0', 'false', '']);

function cacheDirectory(): string | null {
  const configured = process.env.SLIPWAY_TEMPLATE_CACHE;
  if (configured !== undefined) return OFF.has(configured.trim().toLowerCase()) ? null : configured;
  const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
  return join(base, 'slipway');
}

/** The statements the migrations run on a new schema, in order, with their parameters. */
async function migrationScript(schema: string): Promise<string> {
  const statements: string[] = [];
  const recorder: Sql = {
    async query(text, params) {
      statements.push(JSON.stringify([text, params ?? []]));
      return [];
    },
    async execute(text, params) {
      statements.push(JSON.stringify([text, params ?? []]));
      return 0;
    },
  };
  for (const migration of MIGRATIONS) {
    statements.push(`-- ${migration.id} ${migration.name}`);
    await migration.up(recorder, quoteIdent(schema));
  }
  return statements.join('\n');
}

function pgliteVersion(): string {
  const manifest = new URL('../package.json', import.meta.resolve('@electric-sql/pglite'));
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
}

/** The cache of the template for `schema`, or null when it is turned off or cannot be named. */
export async function templateCache(schema: string): Promise<TemplateCache | null> {
  const dir = cacheDirectory();
  if (dir === null) return null;
  let file: string;
  try {
    const digest = createHash('sha256').update(`pglite ${pgliteVersion()}\nschema ${schema}\n${await migrationScript(schema)}`).digest('hex');
    file = join(dir, `template-${digest.slice(0, 40)}.tar.gz`);
  } catch {
    return null;
  }
  return {
    file,
    read() {
      try {
        const stat = lstatSync(file);
        // Only a plain file of this user's: not a link, not something another user put there.
        if (!stat.isFile() || (process.getuid && stat.uid !== process.getuid())) return undefined;
        return new Blob([gunzipSync(readFileSync(file))]);
      } catch {
        return undefined;
      }
    },
    async write(template) {
      const partial = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.partial`;
      try {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        writeFileSync(partial, gzipSync(Buffer.from(await template.arrayBuffer()), { level: 1 }), { mode: 0o600, flag: 'wx' });
        renameSync(partial, file);
      } catch {
        rmSync(partial, { force: true });
      }
    },
  };
}
