import { DateTime } from 'luxon';

/** Colour only on a terminal, and never when NO_COLOR is set to anything (https://no-color.org). */
export function colourEnabled(stream: NodeJS.WriteStream): boolean {
  const noColor = process.env.NO_COLOR;
  return Boolean(stream.isTTY) && (noColor === undefined || noColor === '');
}

export interface Paint {
  red(text: string): string;
  yellow(text: string): string;
  green(text: string): string;
  dim(text: string): string;
  bold(text: string): string;
}

const sgr = (open: number, close: number) => (text: string) => `\x1b[${open}m${text}\x1b[${close}m`;

export function paint(enabled: boolean): Paint {
  if (!enabled) {
    const plain = (text: string) => text;
    return { red: plain, yellow: plain, green: plain, dim: plain, bold: plain };
  }
  return { red: sgr(31, 39), yellow: sgr(33, 39), green: sgr(32, 39), dim: sgr(2, 22), bold: sgr(1, 22) };
}

/** "3 min ago", "in 2 h", "just now": for a person, in tables. `--json` prints ISO instead. */
export function relativeTime(at: DateTime | null, now: DateTime = DateTime.utc()): string {
  if (!at) return '-';
  const ms = now.toMillis() - at.toMillis();
  const span = ageText(Math.abs(ms));
  if (span === null) return 'just now';
  return ms >= 0 ? `${span} ago` : `in ${span}`;
}

/** "45 s", "3 min", "5 h", "2 d"; null under a second. */
export function ageText(ms: number): string | null {
  if (ms < 1_000) return null;
  if (ms < 60_000) return `${Math.floor(ms / 1_000)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min`;
  if (ms < 48 * 3_600_000) return `${Math.floor(ms / 3_600_000)} h`;
  return `${Math.floor(ms / 86_400_000)} d`;
}

/** A duration in milliseconds as a person reads it: "0 s" for under a second. */
export function durationText(ms: number): string {
  return ageText(ms) ?? `${Math.max(0, Math.round(ms))} ms`;
}

const ANSI = /\x1b\[[0-9;]*m/g;
const width = (text: string) => [...text.replace(ANSI, '')].length;

/** A plain text table: a header row and left-aligned columns two spaces apart. */
export function table(header: string[], rows: string[][], p: Paint): string {
  const widths = header.map((h, i) => Math.max(width(h), ...rows.map((r) => width(r[i] ?? ''))));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell + ' '.repeat(widths[i]! - width(cell))))
      .join('  ')
      .trimEnd();
  return [p.bold(line(header)), ...rows.map(line)].join('\n');
}

/** JSON for `--json`: DateTimes become ISO strings through their toJSON. */
export function json(value: unknown): string {
  return JSON.stringify(value, null, 2);
}
