/**
 * The README's code samples are files: each fenced block after a marker line
 * `<!-- sample: examples/readme/use.ts -->` holds exactly that file's content, and every
 * ```ts block has a marker. test/readme-samples.test.ts checks both and runs the files.
 *
 * After editing a sample file, copy it into the README:
 *
 *   npx tsx test/helpers/readme-samples.ts --write
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

export interface ReadmeSample {
  /** Repository-relative path named by the marker. */
  file: string;
  lang: string;
  /** The block's text, each line ending in a newline. */
  code: string;
  /** 1-based line of the opening fence, and the index range of the code in the README's lines. */
  line: number;
  from: number;
  to: number;
}

const MARKER = /^<!-- sample: (\S+) -->$/;
const FENCE = /^```(\S*)$/;

/** The marked samples of a README, and the line numbers of ```ts blocks without a marker. */
export function readmeSamples(readme: string): { samples: ReadmeSample[]; unmarked: number[]; errors: string[] } {
  const lines = readme.split('\n');
  const samples: ReadmeSample[] = [];
  const unmarked: number[] = [];
  const errors: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!);
    if (!open || open[1] === '') {
      if (MARKER.test(lines[i]!) && !FENCE.exec(lines[i + 1] ?? '')?.[1]) errors.push(`line ${i + 1}: a sample marker must be followed at once by a fenced block with a language`);
      continue;
    }
    let end = i + 1;
    while (end < lines.length && lines[end] !== '```') end++;
    if (end === lines.length) {
      errors.push(`line ${i + 1}: the block is never closed`);
      break;
    }
    const marker = MARKER.exec(lines[i - 1] ?? '');
    if (marker) {
      const code = lines.slice(i + 1, end).map((l) => `${l}\n`).join('');
      samples.push({ file: marker[1]!, lang: open[1]!, code, line: i + 1, from: i + 1, to: end });
    } else if (open[1] === 'ts' || open[1] === 'typescript') {
      unmarked.push(i + 1);
    }
    i = end;
  }
  return { samples, unmarked, errors };
}

/** The README with each marked block replaced by its file's current content. */
export function syncedReadme(readme: string): string {
  const lines = readme.split('\n');
  // From the last block up, so the earlier indexes stay valid.
  for (const sample of readmeSamples(readme).samples.reverse()) {
    const content = readFileSync(join(repoRoot, sample.file), 'utf8').replace(/\n$/, '');
    lines.splice(sample.from, sample.to - sample.from, ...content.split('\n'));
  }
  return lines.join('\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href && process.argv.includes('--write')) {
  const path = join(repoRoot, 'README.md');
  const before = readFileSync(path, 'utf8');
  const after = syncedReadme(before);
  writeFileSync(path, after);
  console.log(after === before ? 'README.md: every sample is in sync' : 'README.md: samples copied from their files');
}
