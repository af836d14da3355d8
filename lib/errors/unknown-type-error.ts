import { ValidationError } from './validation-error.js';

/** A lease asked for a type that no registered blueprint serves. */
export class UnknownTypeError extends ValidationError {
  readonly type: string;
  constructor(type: string, known: string[]) {
    super('spec.type', `no blueprint serves type "${type}" (known types: ${known.length ? known.join(', ') : 'none'})`, { code: 'UNKNOWN_TYPE' });
    this.type = type;
  }
}
