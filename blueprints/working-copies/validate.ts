import { ValidationError } from '../../lib/index.js';

// Control characters (NUL, newline, ESC, DEL ...) are refused in every value: git, logs and terminals read them.
const CONTROL = /[\u0000-\u001f\u007f]/;

/** A checkout directory: one path segment under the working copy's root, never `..`, never an option, never hidden. */
export function checkDirectory(field: string, dir: string): void {
  if (dir === '' || dir.length > 100) throw new ValidationError(field, 'must be 1 to 100 characters');
  if (CONTROL.test(dir)) throw new ValidationError(field, 'must not contain control characters');
  if (dir.includes('..')) throw new ValidationError(field, `${JSON.stringify(dir)} must not contain ".."`);
  if (dir.startsWith('-') || dir.startsWith('.')) throw new ValidationError(field, `${JSON.stringify(dir)} must not begin with "-" or "."`);
  if (!/^[A-Za-z0-9_][A-Za-z0-9._-]*$/.test(dir)) throw new ValidationError(field, `${JSON.stringify(dir)} must be one path segment of letters, digits, ".", "_" and "-"`);
}

/**
 * A full ref name, by the rules of `git check-ref-format` (see its manual), plus: it never
 * begins with `-`. `prefix` is `refs/` for refs, nothing for a branch (checked as `refs/heads/<branch>`).
 */
export function checkRefName(field: string, name: string, kind: 'ref' | 'branch'): void {
  const bad = (why: string) => {
    throw new ValidationError(field, `${JSON.stringify(name)} is not a valid ${kind} name: ${why}`);
  };
  if (name === '' || name.length > 255) bad('it must be 1 to 255 characters');
  if (name.startsWith('-')) bad('it begins with "-"');
  if (CONTROL.test(name)) bad('it contains a control character');
  if (/[ ~^:?*[\\]/.test(name)) bad('it contains a space or one of ~ ^ : ? * [ \\');
  if (name.includes('..')) bad('it contains ".."');
  if (name.includes('@{')) bad('it contains "@{"');
  if (name === '@') bad('it is "@"');
  if (name.startsWith('/') || name.endsWith('/') || name.includes('//')) bad('it has an empty path component');
  if (name.endsWith('.')) bad('it ends with "."');
  for (const component of name.split('/')) {
    if (component.startsWith('.')) bad('a component begins with "."');
    if (component.endsWith('.lock')) bad('a component ends with ".lock"');
  }
  if (kind === 'ref' && !name.startsWith('refs/')) bad('a ref is a full name under "refs/"');
  if (kind === 'branch' && name.startsWith('refs/')) bad('a branch is a short name (main), not a ref');
}

/** A commit: an abbreviated or full object name, hex only. */
export function checkCommit(field: string, commit: string): void {
  if (!/^[0-9a-fA-F]{4,64}$/.test(commit)) throw new ValidationError(field, `${JSON.stringify(redact(commit))} is not a commit: 4 to 64 hex digits`);
}

/** The transports git may use, for `GIT_ALLOW_PROTOCOL` and for the check of each URL. */
export const ALLOWED_PROTOCOLS = ['https', 'http', 'ssh', 'git', 'file'] as const;

const SCHEME_URL = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/(.*)$/s;
const SCP_LIKE = /^[A-Za-z0-9._-]+@[A-Za-z0-9][A-Za-z0-9.-]*:(?!\/\/)(.+)$/s;

/** A repository URL: an allowed transport, no option in disguise, no `..` in a file path. */
export function checkUrl(field: string, url: string): void {
  const bad = (why: string) => {
    throw new ValidationError(field, `${JSON.stringify(redact(url))} is refused: ${why}`);
  };
  if (url === '' || url.length > 2048) bad('a URL has 1 to 2048 characters');
  if (url.startsWith('-')) bad('it begins with "-"');
  if (CONTROL.test(url) || /\s/.test(url)) bad('it contains whitespace or a control character');
  if (url.includes('::')) bad('"<transport>::" remote helpers (ext::, fd::) are not allowed');
  const scheme = SCHEME_URL.exec(url);
  if (scheme) {
    const protocol = scheme[1]!.toLowerCase();
    if (!(ALLOWED_PROTOCOLS as readonly string[]).includes(protocol)) bad(`transport "${protocol}" is not one of ${ALLOWED_PROTOCOLS.join(', ')}`);
    const rest = scheme[2]!;
    if (rest.startsWith('-')) bad('its host begins with "-"');
    if (protocol === 'file') {
      if (!rest.startsWith('/')) bad('a file URL is file:///absolute/path');
      if (rest.split('/').some((segment) => segment === '..' || segment === '.')) bad('a file URL must not contain "." or ".." segments');
    } else {
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        return bad('it does not parse as a URL');
      }
      if (parsed.hostname === '' || parsed.hostname.startsWith('-')) bad('its host is empty or begins with "-"');
    }
    return;
  }
  const scp = SCP_LIKE.exec(url);
  if (scp) {
    if (scp[1]!.startsWith('-')) bad('its path begins with "-"');
    return;
  }
  bad('it is neither <transport>://... (https, http, ssh, git, file) nor user@host:path');
}

/** `url` with any credentials hidden: what logs and errors show. */
export function redact(text: string): string {
  return text.replace(/([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^/@\s]*@/g, '$1***@');
}
