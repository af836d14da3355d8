import { library } from './library.js';

/** A mistake in how the command was called: exit code 2, as for an unknown flag. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** A failure the command reports in its own words: exit code 1. */
export class CliFailure extends Error {
  override readonly name = 'CliFailure';
}

export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

/** The one line a person reads for an error, and the exit code it gets. */
export async function describeError(error: unknown): Promise<{ line: string; exitCode: number }> {
  const message = error instanceof Error ? error.message : String(error);
  // One line, always: a multi-line message (a driver's, a hook's) is folded.
  const line = message.replace(/\s*\n\s*/g, ' ').trim() || String(error);
  if (error instanceof UsageError) return { line, exitCode: EXIT.usage };
  if (error instanceof CliFailure) return { line, exitCode: EXIT.failure };
  const { SlipwayError, ValidationError } = await library();
  // The library's ValidationError names an argument the user gave (an owner, a ttl).
  if (error instanceof ValidationError) return { line, exitCode: EXIT.usage };
  if (error instanceof SlipwayError) return { line, exitCode: EXIT.failure };
  // A system error (EACCES, ENOSPC, ...) names its code, unless its message already does.
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^E[A-Z]+$/.test(code) && !line.includes(code)) return { line: `${line} (${code})`, exitCode: EXIT.failure };
  return { line, exitCode: EXIT.failure };
}
