import { SlipwayError } from '../../lib/index.js';
import { redact } from './validate.js';

/** How many lines of stderr an error quotes. */
const STDERR_LINES = 8;

/** A git step of a working copy failed: names the phase, the exit code and the end of stderr, with credentials redacted. */
export class GitStepError extends SlipwayError {
  constructor(
    readonly phase: string,
    readonly dir: string,
    readonly exitCode: number | null,
    stderr: string,
    summary?: string,
  ) {
    const tail = redact(stderr).trimEnd().split('\n').slice(-STDERR_LINES).join('\n');
    super('WORKING_COPY_GIT_FAILED', `${summary ?? `git ${phase} of ${dir} failed`} (exit code ${exitCode ?? 'none'})${tail ? `: ${tail}` : ''}`);
  }
}
