import { readFileSync } from 'node:fs';
import { constants, hostname, userInfo } from 'node:os';
import type { Command } from 'commander';
import { DateTime } from 'luxon';
import type { Broker, JsonObject, Lease, LeaseHandle, LeaseSpec, LogEntry } from '../../index.js';
import { loadConfig } from '../config.js';
import { addConnectionOptions, databaseFrom, openBroker, type ConnectionFlags } from '../connection.js';
import { parseCliDateTime, parseCliDuration } from '../durations.js';
import { CliFailure, UsageError } from '../errors.js';
import { json } from '../format.js';
import type { Io } from '../io.js';
import { library } from '../library.js';
import { Progress } from '../progress.js';
import { newLogEntries } from './shared.js';

interface LeaseFlags extends ConnectionFlags {
  config?: string;
  type: string;
  attributes?: string;
  ttl?: string;
  keepAlive?: boolean;
  until?: string;
  blueprint?: string[];
  owner?: string;
  timeout?: string;
  priority?: string;
  count?: string;
  json?: boolean;
}

/** `--attributes '{"x":1}'` or `--attributes @file.json`: a JSON object. */
function parseAttributes(text: string | undefined): JsonObject | undefined {
  if (text === undefined) return undefined;
  let source = text;
  if (text.startsWith('@')) {
    try {
      source = readFileSync(text.slice(1), 'utf8');
    } catch (error) {
      throw new UsageError(`--attributes: cannot read ${text.slice(1)}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
  }
  let value: unknown;
  try {
    value = JSON.parse(source);
  } catch (error) {
    throw new UsageError(`--attributes: not JSON (${(error as Error).message})`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new UsageError('--attributes: must be a JSON object, like {"repo":"app"}');
  return value as JsonObject;
}

function specFrom(flags: LeaseFlags): LeaseSpec {
  if (flags.ttl !== undefined && flags.until !== undefined) throw new UsageError('give --ttl or --until, not both');
  if (flags.keepAlive && flags.ttl === undefined) throw new UsageError('--keep-alive renews a ttl: give --ttl too');
  const priority = flags.priority === undefined ? undefined : Number(flags.priority);
  if (priority !== undefined && !Number.isInteger(priority)) throw new UsageError('--priority: a whole number');
  return {
    type: flags.type,
    attributes: parseAttributes(flags.attributes),
    owner: flags.owner ?? `${userInfo().username}@${hostname()}`,
    ...(flags.ttl !== undefined ? { ttl: parseCliDuration(flags.ttl, '--ttl') } : {}),
    ...(flags.keepAlive ? { keepAlive: true } : {}),
    ...(flags.until !== undefined ? { until: parseCliDateTime(flags.until, '--until', DateTime.utc()) } : {}),
    ...(flags.timeout !== undefined ? { timeout: parseCliDuration(flags.timeout, '--timeout') } : {}),
    ...(flags.blueprint?.length ? { blueprints: flags.blueprint } : {}),
    ...(priority !== undefined ? { priority } : {}),
  };
}

/** The signal a person sends: Ctrl-C (SIGINT) or a polite kill (SIGTERM). */
function onInterrupt(handler: (signal: NodeJS.Signals) => void): () => void {
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

const exitFor = (signal: NodeJS.Signals) => 128 + (constants.signals[signal] ?? 2);

function describeLease(lease: Lease) {
  return { id: lease.id, type: lease.type, status: lease.status, owner: lease.owner, expiresAt: lease.expiresAt, attributes: lease.attributes, resource: lease.resource };
}

/** Releases the lease and waits until it is destroyed; a second Ctrl-C leaves at once. */
async function releaseAndWait(io: Io, handle: { id: string; release(options?: { wait?: boolean }): Promise<void> }): Promise<void> {
  io.err(`releasing lease ${handle.id} and waiting for its destroy (Ctrl-C again leaves at once; the release goes on)`);
  const off = onInterrupt((signal) => process.exit(exitFor(signal)));
  try {
    await handle.release();
  } finally {
    off();
  }
  io.err(`lease ${handle.id} destroyed`);
}

export function registerLease(program: Command, io: Io): void {
  const command = program
    .command('lease')
    .description('acquire a lease, showing its progress; then hold it until Ctrl-C, or run a command on it (after --) and exit with its exit code');
  addConnectionOptions(command)
    .requiredOption('--type <type>', 'the resource type (host, working-copy, ...)')
    .option('--attributes <json>', 'a JSON object, or @file holding one')
    .option('--ttl <duration>', 'expire this long after the request (30m, 2h, PT5M)')
    .option('--until <iso>', 'expire at this time (ISO 8601)')
    .option('--keep-alive', 'renew the ttl while this command runs: killed, the lease expires a ttl later')
    .option('--blueprint <name>', 'only from this blueprint (repeat for several)', (value: string, previous: string[] = []) => [...previous, value])
    .option('--owner <owner>', 'who holds it (default: user@host)')
    .option('--priority <n>', 'higher goes first among waiting leases')
    .option('--timeout <duration>', 'give up (and release) if not active by then')
    .option('--count <n>', 'that many leases of the spec, all active or none: held until Ctrl-C')
    .option('--config <file>', 'the config module with the blueprints (default: ./slipway.config.js)')
    .option('--json', 'print the active lease as JSON; progress lines on stderr become JSON log entries')
    .argument('[command...]', 'after --: a command to run on the lease\'s command interface')
    .addHelpText(
      'after',
      '\nExamples:\n  $ slipway lease --type host --ttl 30m --data-dir ./slipway-data            # holds it until Ctrl-C\n  $ slipway lease --type host --ttl 30m --count 3 --database $URL           # three at once, all or none\n  $ slipway lease --type host --ttl 30m --database $URL -- make test         # exits with make\'s exit code\n',
    )
    .action(async (argv: string[], flags: LeaseFlags) => {
      const count = parseCount(flags.count, argv);
      const spec = specFrom(flags);
      const { config } = await loadConfig(flags.config);
      const { database: _database, ...options } = config;
      const database = databaseFrom(flags, config, false);
      // Workers as the config says: by default this process runs the hooks of its own lease; with
      // `workers: false` it only requests, and the workers of a `slipway worker` do the rest.
      const broker = await openBroker(database, { ...options, workers: options.workers ?? {}, gcInterval: options.gcInterval ?? { minutes: 10 } });
      try {
        process.exitCode = await acquireAndUse(io, broker, spec, count, argv, flags);
      } finally {
        await broker.close();
      }
    });
}

/** `--count N`: how many leases of the spec, all or none. */
function parseCount(text: string | undefined, argv: string[]): number {
  if (text === undefined) return 1;
  const count = Number(text);
  if (!Number.isInteger(count) || count < 1 || count > 100) throw new UsageError(`--count: a whole number from 1 to 100 (got ${JSON.stringify(text)})`);
  if (count > 1 && argv.length > 0) throw new UsageError('--count holds several leases until Ctrl-C; a command after -- runs on one lease: give one or the other');
  return count;
}

/**
 * Requests `count` leases of the spec and waits until all are active, showing their log
 * lines (prefixed with the lease id when there are several) under one progress line. All
 * or none: if one fails, is not active in time, or Ctrl-C comes, every one is released.
 */
async function acquireAndUse(io: Io, broker: Broker, spec: LeaseSpec, count: number, argv: string[], flags: LeaseFlags): Promise<number> {
  const { AbortError, LeaseTimeoutError } = await library();
  const handles: LeaseHandle[] = [];
  const active = new Set<string>();
  const statuses = new Map<string, string>();
  const progress = new Progress(io, () => (count === 1 ? `lease ${handles[0]?.id ?? ''}`.trim() : `${count} leases, ${active.size} active`));
  // Lines logged while a request itself runs arrive before its id is known: kept until then.
  const early: LogEntry[] = [];
  const ids = new Set<string>();
  const isNew = newLogEntries();
  const show = (entry: LogEntry) => {
    if (!isNew(entry)) return;
    if (entry.type === 'status.changed') {
      statuses.set(entry.lease!, String(entry.data.to));
      return progress.setStatus(count === 1 ? String(entry.data.to) : statusSummary(statuses));
    }
    const prefix = count === 1 ? '' : `${entry.lease}: `;
    progress.line(flags.json ? JSON.stringify(entry) : `${prefix}${entry.at.toUTC().toFormat('HH:mm:ss')} ${entry.message}`);
  };
  const offLog = broker.on('log', (entry) => {
    if (!entry.lease) return;
    if (handles.length < count) early.push(entry);
    else if (ids.has(entry.lease)) show(entry);
  });
  const waiting = new AbortController();
  let interrupted: NodeJS.Signals | undefined;
  const offWait = onInterrupt((signal) => {
    interrupted = signal;
    waiting.abort();
  });
  let leases: Lease[];
  try {
    progress.start();
    for (let i = 0; i < count && !interrupted; i++) {
      const handle = await broker.requestLease(spec);
      handles.push(handle);
      ids.add(handle.id);
      if (!io.interactive) io.err(`lease ${handle.id} requested: ${spec.type}${spec.blueprints ? ` from ${spec.blueprints.join(', ')}` : ''}`);
    }
    for (const entry of early.splice(0)) if (ids.has(entry.lease!)) show(entry);
    if (count === 1) progress.setStatus(await handles[0]!.status());
    const settled = await Promise.allSettled(
      handles.map(async (h) => {
        const lease = await h.whenActive({ signal: waiting.signal });
        active.add(h.id);
        return lease;
      }),
    );
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (interrupted || failed) {
      progress.stop();
      offWait();
      const error = failed?.reason;
      if (interrupted && (!failed || error instanceof AbortError)) {
        await releaseAll(io, handles);
        return exitFor(interrupted);
      }
      // All or none: the others go too, and the command waits until every one is gone.
      await releaseAll(io, handles);
      if (error instanceof LeaseTimeoutError) {
        throw new CliFailure(`lease ${error.leaseId} was not active within ${flags.timeout}; released${error.lastFailure ? `; the last allocation failed: ${error.lastFailure}` : ''}`, { cause: error });
      }
      throw error;
    }
    leases = settled.map((r) => (r as PromiseFulfilledResult<Lease>).value);
    // The lines of the commit that made a lease active can come after it is seen active: on
    // Postgres a re-read on another connection may answer before that commit's own, and the
    // lines a worker in another process wrote are never announced here. Read, they are shown
    // before the lease is said to be active (each line once). Progress only: a read that
    // fails leaves them out, and the leases go on to their use and release.
    for (const h of handles) for (const entry of await broker.logs({ lease: h.id }).catch(() => [])) show(entry);
  } finally {
    progress.stop();
    offLog();
    offWait();
  }

  for (const lease of leases) io.err(`lease ${lease.id} is active on resource ${lease.resource.id} (blueprint ${lease.resource.blueprint})`);
  if (argv.length === 0) return hold(io, leases, flags);
  return runOn(io, leases[0]!, argv);
}

/** "2 pending, 1 active": the leases by status, for the progress line of several. */
function statusSummary(statuses: Map<string, string>): string {
  const counts = new Map<string, number>();
  for (const status of statuses.values()) counts.set(status, (counts.get(status) ?? 0) + 1);
  return [...counts].map(([status, n]) => `${n} ${status}`).join(', ');
}

/** Releases every lease (a failed one too: its release only waits for its destroy) and waits until all are destroyed. */
async function releaseAll(io: Io, handles: LeaseHandle[]): Promise<void> {
  await Promise.all(handles.map((h) => releaseAndWait(io, h)));
}

/** Prints the leases and holds them until Ctrl-C (then releases them) or until one ends by itself. */
async function hold(io: Io, leases: Lease[], flags: LeaseFlags): Promise<number> {
  // --json: the lease as an object, or with --count the leases as an array.
  if (flags.json) io.out(json(leases.length === 1 ? describeLease(leases[0]!) : leases.map(describeLease)));
  else {
    for (const lease of leases) {
      io.out(`${lease.id} ${lease.type} on ${lease.resource.id} (${lease.resource.blueprint}), expires ${lease.expiresAt ? lease.expiresAt.toUTC().toISO() : 'never'}, attributes ${JSON.stringify(lease.attributes)}`);
    }
  }
  io.err(leases.length === 1 ? 'holding it: Ctrl-C releases it' : `holding ${leases.length} leases: Ctrl-C releases them`);
  const ended = await new Promise<NodeJS.Signals | Error>((resolve) => {
    const off = onInterrupt((signal) => {
      off();
      resolve(signal);
    });
    for (const lease of leases) {
      lease.signal.addEventListener('abort', () => {
        off();
        resolve(lease.signal.reason as Error);
      }, { once: true });
    }
  });
  if (ended instanceof Error) {
    io.err(`slipway: ${ended.message}`);
    // The others are released too: what was held together goes together.
    await Promise.all(leases.filter((l) => !l.signal.aborted).map((l) => releaseAndWait(io, l)));
    return 1;
  }
  await Promise.all(leases.map((l) => releaseAndWait(io, l)));
  return 0;
}

/** Runs argv on the lease's command interface, streaming its output, then releases the lease. */
async function runOn(io: Io, lease: Lease, argv: string[]): Promise<number> {
  const { AbortError } = await library();
  const stop = new AbortController();
  let interrupted: NodeJS.Signals | undefined;
  const off = onInterrupt((signal) => {
    interrupted = signal;
    stop.abort();
  });
  let exitCode: number;
  try {
    const command = lease.interface<{ run?: unknown }>('command');
    if (typeof command?.run !== 'function') throw new CliFailure(`blueprint ${lease.resource.blueprint} offers no command interface`);
    const result = await lease.interface('command').run(argv, {
      signal: stop.signal,
      onStdout: (chunk) => process.stdout.write(chunk),
      onStderr: (chunk) => process.stderr.write(chunk),
    });
    exitCode = result.exitCode ?? (result.signal ? exitFor(result.signal as NodeJS.Signals) : 1);
  } catch (error) {
    off();
    if (error instanceof AbortError && interrupted) {
      await releaseAndWait(io, lease);
      return exitFor(interrupted);
    }
    await lease.release().catch(() => undefined);
    throw error;
  }
  off();
  await releaseAndWait(io, lease);
  return exitCode;
}
