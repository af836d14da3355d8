/**
 * The seed scenario: a repository gets 5 commits at once, and 5 builds each lease a
 * working copy of their own commit. The working-copy pool starts with `maxResources: 1`,
 * so the builds take turns on one working copy: it is cloned once, and each lease gets a
 * clean checkout of its build's commit. Every build checks that it sees its own commit's
 * content; the timeline and each build's wait are printed.
 *
 *   npm run example:ci-burst
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createBroker } from 'slipway';
import { localHosts, workingCopies } from 'slipway/blueprints';

const scratch = mkdtempSync(join(tmpdir(), 'slipway-ci-burst-'));
const origin = join(scratch, 'origin');
const git = (...args: string[]) =>
  execFileSync('git', args, { cwd: origin, encoding: 'utf8', env: { ...process.env, GIT_AUTHOR_NAME: 'dev', GIT_AUTHOR_EMAIL: 'dev@example.com', GIT_COMMITTER_NAME: 'dev', GIT_COMMITTER_EMAIL: 'dev@example.com' } }).trim();

// 5 commits land at once.
execFileSync('git', ['init', '-q', '-b', 'main', origin]);
const commits: string[] = [];
for (let build = 1; build <= 5; build++) {
  writeFileSync(join(origin, 'BUILD'), `${build}\n`);
  git('add', 'BUILD');
  git('commit', '-q', '-m', `change ${build}`);
  commits.push(git('rev-parse', 'HEAD'));
}

const broker = await createBroker({
  blueprints: [
    localHosts({ name: 'local', config: { slots: 5, root: join(scratch, 'hosts') } }),
    workingCopies({ name: 'wc', config: { hosts: ['local'] }, limits: { maxResources: 1 } }),
  ],
});

const started = Date.now();
const elapsed = () => `+${String(Date.now() - started).padStart(5)} ms`;
const timeline: string[] = [];

try {
  const builds = commits.map(async (commit, i) => {
    const build = i + 1;
    const asked = Date.now();
    timeline.push(`${elapsed()}  build ${build} asks for ${commit.slice(0, 8)}`);
    await using lease = await broker.acquire({ type: 'working-copy', attributes: { repositories: { app: { url: `file://${origin}`, commit } } }, timeout: { minutes: 2 } });
    const waited = Date.now() - asked;
    const seen = (await lease.interface('command').run(['cat', 'BUILD'], { cwd: 'app' })).stdout.trim();
    if (seen !== String(build)) throw new Error(`build ${build} saw the content of build ${seen}`);
    timeline.push(`${elapsed()}  build ${build} runs on ${lease.resource.id.slice(-6)} at ${commit.slice(0, 8)}, sees BUILD=${seen}`);
    return { build, waited };
  });
  const results = await Promise.all(builds);
  console.log('timeline:');
  for (const line of timeline) console.log(`  ${line}`);
  console.log('wait per build:');
  for (const { build, waited } of results) console.log(`  build ${build}: ${waited} ms`);
  const resources = await broker.resources.list({ type: 'working-copy' });
  console.log(`all ${results.length} builds saw their own commit, on ${resources.length} working copy`);
} finally {
  await broker.close();
  rmSync(scratch, { recursive: true, force: true });
}
