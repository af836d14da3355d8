import { parseDuration, ValidationError, type CommandOptions } from '../lib/index.js';

/*
 * What the built-in host blueprints (localHosts, sshHosts) share of their `command`
 * interface: the checks of `run(argv, options)` before anything starts, and the wait for
 * the lease signal's verdict. Written against the public plugin contract only, as a
 * user's own host blueprint would be.
 */

/** After a timeout, an abort or the end of the lease, how long a process (group) has to exit on SIGTERM before it gets SIGKILL. */
export const KILL_GRACE_MS = 2_000;

/**
 * How long a command on a lease that looks torn down (its directory gone, its destroy
 * begun) waits for the lease signal to say why. The broker reads the lease when the
 * signal is first used, so the answer is one read away.
 */
const VERDICT_WAIT_MS = 2_000;

/** The lease signal's reason once it says the lease is not active, waiting a little for a verdict on its way; null if it does not say so. */
export async function verdict(signal: AbortSignal): Promise<unknown> {
  if (!signal.aborted) {
    await new Promise<void>((done) => {
      const stop = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', stop);
        done();
      };
      const timer = setTimeout(stop, VERDICT_WAIT_MS);
      signal.addEventListener('abort', stop, { once: true });
    });
  }
  return signal.aborted ? signal.reason : null;
}

export function checkArgv(argv: unknown): asserts argv is readonly string[] {
  if (!Array.isArray(argv) || argv.length === 0) throw new ValidationError('argv', 'must be a non-empty array of strings, like ["git", "status"]');
  argv.forEach((arg, i) => {
    if (typeof arg !== 'string') throw new ValidationError(`argv[${i}]`, `must be a string (got ${typeof arg})`);
    if (arg.includes('\0')) throw new ValidationError(`argv[${i}]`, 'must not contain a NUL byte');
  });
  if (argv[0] === '') throw new ValidationError('argv[0]', 'must name the program to run');
}

const OPTION_KEYS = ['cwd', 'env', 'timeout', 'signal', 'shell', 'onStdout', 'onStderr', 'stdin'];

/** Node runs a timer of more than 2^31 - 1 ms after 1 ms: a longer timeout would kill the process at once. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** What a host blueprint refuses beyond the common checks. */
export interface CommandOptionRules {
  /** The error for a variable name this host cannot set, or null when it can. */
  envName(name: string): ValidationError | null;
  /** Refuse a `cwd` with NUL or a line break (it travels in a remote shell line). */
  singleLineCwd?: boolean;
}

/** The options of `run()`, checked before anything starts, with the timeout in milliseconds. */
export function checkCommandOptions(options: unknown, rules: CommandOptionRules): CommandOptions & { timeoutMs?: number } {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw new ValidationError('options', 'must be an object');
  // A misspelt option (`timout`) would run the command without what it asked for.
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.includes(key)) throw new ValidationError(`options.${key}`, `is not a command option (known: ${OPTION_KEYS.join(', ')})`);
  }
  const o = options as CommandOptions;
  if (rules.singleLineCwd) {
    if (o.cwd !== undefined && (typeof o.cwd !== 'string' || o.cwd === '' || /[\u0000\n\r]/.test(o.cwd))) throw new ValidationError('options.cwd', 'must be a non-empty string without NUL or newlines');
  } else if (o.cwd !== undefined && (typeof o.cwd !== 'string' || o.cwd === '')) {
    throw new ValidationError('options.cwd', 'must be a non-empty string');
  }
  if (o.env !== undefined) {
    if (o.env === null || typeof o.env !== 'object' || Array.isArray(o.env)) throw new ValidationError('options.env', 'must be an object of strings by variable name, like { CI: "1" }');
    for (const [key, value] of Object.entries(o.env)) {
      const badName = rules.envName(key);
      if (badName) throw badName;
      if (value !== undefined && typeof value !== 'string') throw new ValidationError(`options.env.${key}`, `must be a string, or undefined to unset it (got ${typeof value})`);
      if (value?.includes('\0')) throw new ValidationError(`options.env.${key}`, 'must not contain a NUL character');
    }
  }
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new ValidationError('options.signal', 'must be an AbortSignal');
  if (o.shell !== undefined && typeof o.shell !== 'boolean') throw new ValidationError('options.shell', 'must be a boolean');
  if (o.onStdout !== undefined && typeof o.onStdout !== 'function') throw new ValidationError('options.onStdout', 'must be a function');
  if (o.onStderr !== undefined && typeof o.onStderr !== 'function') throw new ValidationError('options.onStderr', 'must be a function');
  if (o.stdin !== undefined && typeof o.stdin !== 'string') throw new ValidationError('options.stdin', 'must be a string');
  return { ...o, timeoutMs: o.timeout === undefined ? undefined : timeoutMs(o.timeout) };
}

/**
 * The timeout in milliseconds. It is wall time on purpose, not the broker's injectable
 * clock: it bounds a real process, which a test's manual clock would otherwise let run forever.
 */
function timeoutMs(value: unknown): number {
  const duration = parseDuration(value, 'options.timeout');
  const ms = duration.toMillis();
  if (ms <= 0) throw new ValidationError('options.timeout', `must be a positive duration (got ${duration.toISO()})`);
  if (ms > MAX_TIMEOUT_MS) throw new ValidationError('options.timeout', `must be at most ${MAX_TIMEOUT_MS} ms (about 24.8 days; got ${duration.toISO()})`);
  return ms;
}
