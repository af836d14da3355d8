import type { DurationInput } from '../time.js';

/** The interfaces every blueprint may offer; a blueprint can add its own names. */
export interface CommandOptions {
  /** Working directory; by default the lease's own directory. */
  cwd?: string;
  env?: Record<string, string | undefined>;
  /** Kills the process after this long. */
  timeout?: DurationInput;
  signal?: AbortSignal;
  /** Run through `/bin/sh -c` (argv is then joined). Off by default: argv goes straight to execFile. */
  shell?: boolean;
  onStdout?: (chunk: string) => void;
  onStderr?: (chunk: string) => void;
  stdin?: string;
}

export interface CommandResult {
  exitCode: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

export interface CommandInterface {
  run(argv: readonly string[], options?: CommandOptions): Promise<CommandResult>;
}

export interface FilesystemInterface {
  /** The absolute path this lease may use. */
  path: string;
}

export interface StandardInterfaces {
  command: CommandInterface;
  filesystem: FilesystemInterface;
}
