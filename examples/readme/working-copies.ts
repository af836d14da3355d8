import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBroker } from 'slipway';
import { localHosts, workingCopies } from 'slipway/blueprints';

// A repository to build (yours would be https:// or ssh://).
const origin = mkdtempSync(join(tmpdir(), 'origin-'));
const git = (...args: string[]) => execFileSync('git', ['-C', origin, '-c', 'user.name=dev', '-c', 'user.email=dev@example.com', ...args], { encoding: 'utf8' }).trim();
git('init', '-q', '-b', 'main');
writeFileSync(join(origin, 'README'), 'hello\n');
git('add', 'README');
git('commit', '-q', '-m', 'first');
const commit = git('rev-parse', 'HEAD');

await using broker = await createBroker({
  blueprints: [
    localHosts({ name: 'local', config: { slots: 4 } }),
    workingCopies({ name: 'wc', config: { hosts: ['local'] }, limits: { maxResources: 2 } }),
  ],
});

await using lease = await broker.acquire({
  type: 'working-copy',
  attributes: { repositories: { app: { url: `file://${origin}`, commit } } },
  timeout: { minutes: 1 },
});

const { stdout } = await lease.interface('command').run(['cat', 'README'], { cwd: 'app' });
console.log(`app is at ${commit.slice(0, 8)} in ${lease.interface('filesystem').path}: ${stdout.trim()}`);
