import { SlipwayError } from '../../lib/index.js';

/**
 * A command could not be started at all: the executable is missing (`COMMAND_NOT_FOUND`),
 * not executable (`COMMAND_NOT_EXECUTABLE`), or spawning failed otherwise
 * (`COMMAND_SPAWN_FAILED`). A command that starts and exits non-zero is not an error.
 */
export class CommandStartError extends SlipwayError {
  /** `argv[0]` as given. */
  readonly command: string;
  /** The system error code (`ENOENT`, `EACCES`, ...), if there was one. */
  readonly errno: string | null;

  constructor(command: string, cause: unknown) {
    const errno = (cause as NodeJS.ErrnoException | undefined)?.code ?? null;
    const where = command.includes('/') ? 'does not exist' : 'was not found on PATH';
    const [code, what] =
      errno === 'ENOENT'
        ? ['COMMAND_NOT_FOUND', `${where}`]
        : errno === 'EACCES'
          ? ['COMMAND_NOT_EXECUTABLE', 'is not executable']
          : ['COMMAND_SPAWN_FAILED', `could not be started: ${cause instanceof Error ? cause.message : String(cause)}`];
    super(code, `command ${JSON.stringify(command)} ${what}${errno ? ` (${errno})` : ''}`, { cause });
    this.command = command;
    this.errno = errno;
  }
}
