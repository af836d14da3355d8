import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import type { Broker, BrokerOptions, LogEntry } from '../../index.js';
import { DEFAULT_CONFIG_FILES, loadConfig } from '../config.js';
import { addConnectionOptions, databaseFrom, openBroker, type ConnectionFlags } from '../connection.js';
import { UsageError } from '../errors.js';

type Blueprints = NonNullable<BrokerOptions['blueprints']>;

export interface JsonFlag {
  json?: boolean;
}

/**
 * Which log entries are new to a reader that shows each once: true for an entry not seen
 * yet, and again when its count grew (a repeated event bumps one row's count).
 */
export function newLogEntries(): (entry: LogEntry) => boolean {
  const seen = new Map<number, number>();
  return (entry) => {
    if (seen.get(entry.id) === entry.count) return false;
    seen.set(entry.id, entry.count);
    return true;
  };
}

/** A subcommand with the connection flags, `--json`, and an example under its help. */
export function subcommand(program: Command, name: string, description: string, examples: string[], options: { rendersLogs?: boolean } = {}): Command {
  const command = program.command(name).description(description);
  addConnectionOptions(command);
  if (options.rendersLogs) command.option('--config <file>', "a config module: its blueprints render the log lines of their own log types (default: ./slipway.config.js, if there)");
  command.option('--json', 'print JSON for machines (times in ISO 8601)');
  command.addHelpText('after', `\nExample${examples.length > 1 ? 's' : ''}:\n${examples.map((e) => `  $ ${e}`).join('\n')}\n`);
  return command;
}

/**
 * Runs `fn` on a broker that only reads and writes commands (no workers, no blueprints,
 * no migrations), and closes it after.
 */
export async function withBroker<T>(flags: ConnectionFlags, fn: (broker: Broker) => Promise<T>, blueprints: Blueprints = []): Promise<T> {
  const broker = await openBroker(databaseFrom(flags, undefined, true), { migrate: false, blueprints });
  try {
    return await fn(broker);
  } finally {
    await broker.close({ grace: 0 });
  }
}

/**
 * The blueprints of the config module, when there is one (`--config`, or ./slipway.config.js),
 * so that the log lines of their own log types are rendered as they wrote them. Without
 * workers, the broker never calls their hooks.
 */
export async function renderingBlueprints(flags: { config?: string }): Promise<Blueprints> {
  if (flags.config === undefined && !DEFAULT_CONFIG_FILES.some((name) => existsSync(resolve(name)))) return [];
  return (await loadConfig(flags.config)).config.blueprints ?? [];
}

/** `--status active,pending`: each checked against the known statuses; `all` is every one. */
export function parseStatuses<S extends string>(text: string | undefined, known: readonly S[], fallback: readonly S[]): S[] {
  if (text === undefined) return [...fallback];
  if (text === 'all') return [...known];
  const statuses = text.split(',').map((s) => s.trim()).filter(Boolean);
  for (const status of statuses) {
    if (!(known as readonly string[]).includes(status)) throw new UsageError(`--status: ${JSON.stringify(status)} is not a status (known: ${known.join(', ')}, all)`);
  }
  if (statuses.length === 0) throw new UsageError('--status: give at least one status');
  return statuses as S[];
}
