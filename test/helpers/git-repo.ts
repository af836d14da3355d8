import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const env = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@t', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@t' };

/** A real git repository in a temp dir, for tests: commit files, make branches and refs. */
export class TestRepo {
  constructor(readonly path: string) {
    mkdirSync(path, { recursive: true });
    this.git('init', '-q', '-b', 'main');
  }

  get url(): string {
    return `file://${this.path}`;
  }

  git(...args: string[]): string {
    return execFileSync('git', args, { cwd: this.path, env, encoding: 'utf8' }).trim();
  }

  /** Writes `files` and commits them on the current branch; returns the commit. */
  commit(files: Record<string, string>, message = 'change'): string {
    for (const [name, content] of Object.entries(files)) {
      mkdirSync(join(this.path, name, '..'), { recursive: true });
      writeFileSync(join(this.path, name), content);
    }
    this.git('add', '-A');
    this.git('commit', '-q', '-m', message);
    return this.git('rev-parse', 'HEAD');
  }

  /** Commits `files` on top of `base` and points `ref` at the result, leaving the current branch alone. */
  refAt(ref: string, base: string, files: Record<string, string>): string {
    const branch = this.git('rev-parse', '--abbrev-ref', 'HEAD');
    this.git('checkout', '-q', '--detach', base);
    const commit = this.commit(files, `for ${ref}`);
    this.git('update-ref', ref, commit);
    this.git('checkout', '-q', branch);
    return commit;
  }
}
