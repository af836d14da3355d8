/**
 * Runs the built `slipway` bin (dist/lib/cli/main.js) as a subprocess, as a user would,
 * and the connection flags of this run's tier: `--data-dir` of a temp directory on the
 * embedded tier, `--database` with a fresh schema on the postgres tier.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from './readme-samples.js';
import { freshSchema, tierUrl } from './tier.js';

export const BIN = join(repoRoot, 'dist/lib/cli/main.js');
export const CONFIG = join(repoRoot, 'test/fixtures/cli/slipway.config.js');

/**
 * Builds dist/ (the bin and the package the config fixture imports by name). Under
 * `npm test` the runner has built it once before the tiers start (SLIPWAY_TEST_DIST_BUILT):
 * the two tiers run at once, and a build here would empty dist/ under the other tier's bin.
 */
export async function buildBin(): Promise<void> {
  if (process.env.SLIPWAY_TEST_DIST_BUILT === '1') return;
  await promisify(execFile)('npm', ['run', 'build'], { cwd: repoRoot, timeout: 120_000 });
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** A database for the bin on this tier: its flags, and for an in-test broker its options. */
export function cliDatabase(label = ''): { flags: string[]; options: { url: string; schema: string } | { embedded: true; dataDir: string } } {
  if (tierUrl) {
    const schema = freshSchema(label);
    return { flags: ['--database', tierUrl, '--schema', schema], options: { url: tierUrl, schema } };
  }
  const dataDir = join(mkdtempSync(join(tmpdir(), 'slipway-cli-')), 'db');
  return { flags: ['--data-dir', dataDir], options: { embedded: true, dataDir } };
}

const BASE_ENV = { NO_COLOR: '1', SLIPWAY_DATABASE_URL: '' };

/** Runs the bin to its end. Never rejects: the exit code is part of the result. */
export function cli(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { cwd: options.cwd ?? repoRoot, env: { ...process.env, ...BASE_ENV, ...options.env }, timeout: options.timeoutMs ?? 60_000, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const e = error as (Error & { code?: number | string; signal?: NodeJS.Signals }) | null;
        resolve({ code: e ? (typeof e.code === 'number' ? e.code : null) : 0, signal: e?.signal ?? null, stdout, stderr });
      },
    );
  });
}

/** Runs the bin and parses its stdout as JSON; fails with its stderr when it did not exit 0. */
export async function cliJson<T = any>(args: string[], options?: Parameters<typeof cli>[1]): Promise<T> {
  const result = await cli([...args, '--json'], options);
  if (result.code !== 0) throw new Error(`slipway ${args.join(' ')} exited ${result.code}: ${result.stderr}`);
  return JSON.parse(result.stdout) as T;
}

/** A bin left running (worker, lease, logs --follow), with what it wrote so far. */
export class Running {
  readonly proc: ChildProcess;
  stdout = '';
  stderr = '';
  readonly exited: Promise<CliResult>;

  constructor(file: string, args: string[], env: NodeJS.ProcessEnv = {}) {
    this.proc = spawn(file, args, { cwd: repoRoot, env: { ...process.env, ...BASE_ENV, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    this.proc.stdout!.setEncoding('utf8').on('data', (chunk: string) => (this.stdout += chunk));
    this.proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => (this.stderr += chunk));
    this.exited = new Promise((resolve) => this.proc.on('close', (code, signal) => resolve({ code, signal, stdout: this.stdout, stderr: this.stderr })));
  }

  static bin(args: string[], env?: NodeJS.ProcessEnv): Running {
    return new Running(process.execPath, [BIN, ...args], env);
  }

  /**
   * Runs the bin on a pseudo-terminal through script(1). The command line starts with `exec`,
   * so no shell stays between the terminal and the CLI: dash (/bin/sh, script's shell when
   * SHELL is unset or /bin/sh) would otherwise wait on it and die of the terminal's SIGINT itself.
   */
  static onTerminal(args: string[], env?: NodeJS.ProcessEnv): Running {
    const quote = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
    const command = `exec ${[process.execPath, BIN, ...args].map(quote).join(' ')}`;
    return new Running('script', ['-qefc', command, '/dev/null'], env);
  }

  /** Waits until stdout + stderr match, or fails with both after `ms`. */
  async waitFor(pattern: RegExp, ms = 30_000): Promise<void> {
    const deadline = Date.now() + ms;
    while (!pattern.test(this.stdout + this.stderr)) {
      if (Date.now() > deadline || this.proc.exitCode !== null) throw new Error(`no ${pattern} within ${ms} ms (exit ${this.proc.exitCode}):\n--- stdout\n${this.stdout}\n--- stderr\n${this.stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  kill(): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill('SIGKILL');
  }
}

/** True when a stderr is exactly one line and holds no stack frame. */
export function oneCleanLine(stderr: string): boolean {
  return /^[^\n]+\n?$/.test(stderr) && !/\n\s+at |\bat .*\(.*:\d+:\d+\)/.test(stderr);
}
