/**
 * Numbers the parameters of a statement as it is written:
 * `` `WHERE id = ${p.add(id)}` `` reads as the SQL it becomes and never miscounts.
 */
export class Params {
  readonly values: unknown[] = [];

  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}
