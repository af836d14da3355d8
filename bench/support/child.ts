import { spawn } from 'node:child_process';
import { progress } from './measure.js';

/**
 * Runs one job in a fresh `node --import tsx --expose-gc` process of `script` (which
 * answers through `serveJob`) and returns its answer. A workload runs there when it must
 * not share the bench process: its memory is then its own, and its speed is not that of a
 * process that has run every workload before it.
 */
export function runChild<R, J extends { label: string } = { label: string }>(script: string, job: J, timeoutMs = 8 * 60_000): Promise<R> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', '--expose-gc', script], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let settled = false;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      finish(() => reject(new Error(`${job.label}: the child process took more than ${timeoutMs} ms`)));
    }, timeoutMs);
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      fn();
    };
    child.on('message', (m: { progress?: string; result?: R; error?: string }) => {
      if (m.progress) progress(m.progress);
      if (m.result) finish(() => resolve(m.result!));
      if (m.error) finish(() => reject(new Error(`${job.label}: ${m.error}`)));
    });
    child.on('exit', (code) => finish(() => reject(new Error(`${job.label}: the child process exited (${code}) without an answer`))));
    child.send(job);
  });
}

/** The child's side of `runChild`: runs the job it receives, sends the answer or the error, and exits. */
export function serveJob<J, R>(run: (job: J) => Promise<R>): void {
  process.once('message', (job: J) => {
    run(job).then(
      (result) => process.send!({ result }, () => process.exit(0)),
      (error) => process.send!({ error: String(error?.stack ?? error) }, () => process.exit(1)),
    );
  });
}
