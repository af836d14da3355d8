/**
 * The code under test in ci-job.test.ts: one CI job, as a CI controller runs it on a
 * leased host. It knows nothing of tests: the broker and its blueprint are the seam.
 */
import type { Broker } from 'slipway';

export interface Job {
  id: string;
  repository: string;
  commit: string;
}

export async function runJob(broker: Broker, job: Job): Promise<'passed' | 'failed'> {
  await using lease = await broker.acquire({ type: 'host', owner: job.id, ttl: { minutes: 30 } });
  const command = lease.interface('command');
  const clone = await command.run(['git', 'clone', '--quiet', job.repository, 'src']);
  if (clone.exitCode !== 0) throw new Error(`${job.id}: git clone failed: ${clone.stderr}`);
  await command.run(['git', 'checkout', '--quiet', job.commit], { cwd: 'src' });
  const test = await command.run(['npm', 'test'], { cwd: 'src', env: { CI: '1' } });
  return test.exitCode === 0 ? 'passed' : 'failed';
}
