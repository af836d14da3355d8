import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { tier } from './helpers/tier.js';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const describeEmbedded = tier === 'embedded' ? describe : describe.skip;

// The example opens its own embedded broker: one run, on the embedded tier.
describeEmbedded('examples/ci-burst.ts (npm run example:ci-burst)', () => {
  test('all five builds see their own commit, on one working copy, and the waits are printed', async () => {
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'examples/ci-burst.ts'], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c) => (stdout += c));
      child.stderr.on('data', (c) => (stderr += c));
      child.on('error', reject);
      child.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
    if (result.code !== 0) throw new Error(`exited with ${result.code}\n${result.stdout}\n${result.stderr}`);
    for (let build = 1; build <= 5; build++) {
      expect(result.stdout).toMatch(new RegExp(`build ${build} runs on \\w+ at [0-9a-f]{8}, sees BUILD=${build}`));
      expect(result.stdout).toMatch(new RegExp(`build ${build}: \\d+ ms`));
    }
    expect(result.stdout).toContain('all 5 builds saw their own commit, on 1 working copy');
  }, 120_000);
});
