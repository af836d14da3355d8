import type { CommandInterface } from '../../lib/index.js';
import { GitStepError } from './git-step-error.js';
import { ALLOWED_PROTOCOLS } from './validate.js';

/** The committer of squash merges: fixed, so that a merge's result depends on its inputs only. */
export const COMMITTER = { name: 'slipway', email: 'slipway@localhost' } as const;

/** No prompt, no system or user config, only the allowed transports (so `ext::` is refused by git itself as well). */
export const GIT_ENV = {
  GIT_ALLOW_PROTOCOL: ALLOWED_PROTOCOLS.join(':'),
  GIT_TERMINAL_PROMPT: '0',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_ASKPASS: '',
  SSH_ASKPASS: '',
};

/** Runs git through a host lease's `command` interface: argv only, never a shell. */
export class Git {
  constructor(
    private readonly command: CommandInterface,
    readonly signal?: AbortSignal,
  ) {}

  /** Runs `git <args>` in `cwd`; throws a GitStepError naming `phase` when it exits non-zero. */
  async run(phase: string, dir: string, cwd: string | undefined, args: string[]): Promise<string> {
    const result = await this.tryRun(cwd, args);
    if (result.exitCode !== 0) throw new GitStepError(phase, dir, result.exitCode, result.stderr);
    return result.stdout;
  }

  /** `rm -rf -- <path>` on the host: argv only. Something already gone is success. */
  async remove(path: string): Promise<void> {
    const result = await this.command.run(['rm', '-rf', '--', path], { shell: false });
    if (result.exitCode !== 0) throw new GitStepError('destroy', path, result.exitCode, result.stderr, `removing ${path} failed`);
  }

  /** Runs `git <args>` and returns its result, whatever the exit code. */
  tryRun(cwd: string | undefined, args: string[]) {
    return this.command.run(['git', ...args], { ...(cwd === undefined ? {} : { cwd }), env: GIT_ENV, shell: false, ...(this.signal ? { signal: this.signal } : {}) });
  }
}
