/**
 * HTML built by one tagged template that escapes every value it is given: owners,
 * attributes, log data, reasons and blueprint names come from users, so nothing reaches
 * the page unescaped unless it is itself the output of `html` (a `Markup`).
 */

/** HTML that is already safe: made by `html`, never from a string a user gave. */
export class Markup {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/** Text for an element or a quoted attribute: the five HTML specials and the backtick escaped. */
export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"'`]/g, (c) => ENTITIES[c]!);
}

type Part = Markup | string | number | boolean | null | undefined | readonly Part[];

function render(value: Part): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof Markup) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  return escapeHtml(value);
}

/** `html\`<td>${owner}</td>\``: the values are escaped; arrays of Markup are joined. */
export function html(strings: TemplateStringsArray, ...values: Part[]): Markup {
  let out = strings[0]!;
  values.forEach((value, i) => (out += render(value) + strings[i + 1]!));
  return new Markup(out);
}

/** A link's href from path segments under the base path, each segment percent-encoded, and a query. */
export function href(base: string, path: string[], query: Record<string, string | number | undefined> = {}): string {
  const q = Object.entries(query).filter((e): e is [string, string | number] => e[1] !== undefined && e[1] !== '');
  const search = q.length ? `?${q.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`).join('&')}` : '';
  return `${base}/${path.map(encodeURIComponent).join('/')}${search}`;
}

/** "3 min", "2 h 5 min", "40 s": an age for a table cell. */
export function ageText(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}
