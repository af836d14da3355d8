import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { registerAuthorizations } from './commands/authorizations.js';
import { registerDrain } from './commands/drain.js';
import { registerDashboard } from './commands/dashboard.js';
import { registerGc } from './commands/gc.js';
import { registerLease } from './commands/lease.js';
import { registerLists } from './commands/lists.js';
import { registerLogs } from './commands/logs.js';
import { registerMigrate } from './commands/migrate.js';
import { registerObjectCommands } from './commands/object-commands.js';
import { registerRelease } from './commands/release.js';
import { registerShow } from './commands/show.js';
import { registerStats } from './commands/stats.js';
import { registerWorker } from './commands/worker.js';
import { describeError, EXIT } from './errors.js';
import { processIo, type Io } from './io.js';

/** The version of the package this file ships in (dist/lib/cli or lib/cli: the first package.json up). */
function packageVersion(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'slipway') return pkg.version ?? '0.0.0';
    }
  }
  return '0.0.0';
}

export function buildProgram(io: Io): Command {
  const program = new Command('slipway')
    .description('Operate a slipway broker from a shell: leases, resources, logs, workers.')
    .version(packageVersion(), '-V, --version')
    .option('--debug', 'print the stack trace of an error')
    .showSuggestionAfterError(true)
    .exitOverride()
    .configureOutput({
      writeOut: (text) => io.out(text),
      writeErr: (text) => io.err(text),
      // Commander's own errors (unknown flag, missing argument) in one line, as ours.
      outputError: (text, write) => write(`slipway: ${text.replace(/^error: /, '').replace(/\s*\n\s*/g, ' ').trim()}\n`),
    });
  for (const register of [registerMigrate, registerWorker, registerLease, registerRelease, registerObjectCommands, registerLists, registerShow, registerLogs, registerStats, registerAuthorizations, registerDrain, registerGc, registerDashboard]) {
    register(program, io);
  }
  // Subcommands inherit the settings above (exitOverride, output) when created through .command().
  return program;
}

/** Runs the command line and resolves to the exit code; never throws. */
export async function main(argv: string[], io: Io = processIo()): Promise<number> {
  const program = buildProgram(io);
  const debug = argv.includes('--debug');
  if (argv.length === 0) {
    io.err(program.helpInformation());
    return EXIT.usage;
  }
  try {
    await program.parseAsync(argv, { from: 'user' });
    // A command that ends with its own code (lease -- argv: the command's) sets process.exitCode.
    return typeof process.exitCode === 'number' ? process.exitCode : EXIT.ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and --version are exit 0; every parse error is a usage error.
      return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    const { line, exitCode } = await describeError(error);
    io.err(`slipway: ${line}`);
    if (debug && error instanceof Error && error.stack) io.err(error.stack);
    return exitCode;
  }
}
