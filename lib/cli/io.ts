import { colourEnabled, paint, type Paint } from './format.js';

/** Where a command writes, and whether a person is watching. */
export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** Colours for stdout and stderr; plain off a terminal or under NO_COLOR. */
  paint: Paint;
  errPaint: Paint;
  /** stderr is a terminal: progress may redraw a spinner line there. */
  interactive: boolean;
}

export function processIo(): Io {
  return {
    out: (text) => process.stdout.write(text.endsWith('\n') ? text : `${text}\n`),
    err: (text) => process.stderr.write(text.endsWith('\n') ? text : `${text}\n`),
    paint: paint(colourEnabled(process.stdout)),
    errPaint: paint(colourEnabled(process.stderr)),
    interactive: Boolean(process.stderr.isTTY),
  };
}
