/** Base of every error slipway throws: a stable `code` to switch on, and the `cause`. */
export class SlipwayError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}
