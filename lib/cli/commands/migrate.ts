import type { Command } from 'commander';
import { databaseFrom, openBroker, type ConnectionFlags } from '../connection.js';
import type { Io } from '../io.js';
import { library } from '../library.js';
import { json } from '../format.js';
import { subcommand, type JsonFlag } from './shared.js';

/** `Slipway0004FailureStreaks1700000000004` → { id: 4, name: 'FailureStreaks' }. */
async function knownMigrations(): Promise<Array<{ id: number; name: string }>> {
  const { slipwayMigrations } = await import('../../typeorm.js');
  return slipwayMigrations().map((Migration) => {
    const match = /^Slipway(\d{4})([A-Za-z0-9]+?)\d{13}$/.exec(new Migration().name as string);
    return { id: Number(match?.[1] ?? 0), name: match?.[2] ?? '' };
  });
}

export function registerMigrate(program: Command, io: Io): void {
  subcommand(program, 'migrate', 'create the schema (or the data directory) and apply pending migrations; print the schema version', [
    'slipway migrate --database postgres://ci@db/ci --schema slipway',
    'slipway migrate --data-dir ./slipway-data',
  ]).action(async (flags: ConnectionFlags & JsonFlag) => {
    const database = databaseFrom(flags, undefined, false);
    const known = await knownMigrations();
    const { SchemaNotMigratedError } = await library();
    const version = Math.max(...known.map((m) => m.id));
    // What is missing, read without writing; then the same open with migrations applies it.
    let missing: number[] = [];
    try {
      const probe = await openBroker(database, { migrate: false });
      await probe.close({ grace: 0 });
    } catch (error) {
      if (!(error instanceof Error && error.cause instanceof SchemaNotMigratedError)) throw error;
      missing = error.cause.missing;
    }
    if (missing.length > 0) {
      const broker = await openBroker(database, { migrate: true });
      await broker.close({ grace: 0 });
    }
    const schema = 'url' in database ? (database.schema ?? 'slipway') : 'dataDir' in database ? database.dataDir : 'slipway';
    if (flags.json) {
      io.out(json({ schema, version, applied: missing }));
      return;
    }
    const name = known.find((m) => m.id === version)?.name;
    io.out(missing.length > 0 ? `applied migration${missing.length > 1 ? 's' : ''} ${missing.join(', ')} to ${schema}: now at version ${version} (${name})` : `${schema} is up to date: version ${version} (${name})`);
  });
}
