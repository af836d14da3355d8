import { href, html, type Markup } from './html.js';
import type { Caller } from './auth.js';

/** What every page of one request knows. */
export interface PageContext {
  base: string;
  caller: Caller;
  /** The caller's CSRF token, for the forms of buttons. */
  csrf: string;
  /** Buttons are shown: a token is set, the caller has it, and the dashboard is not read-only. */
  canWrite: boolean;
  /** A token is set and the caller is logged in with a session (a logout button). */
  loggedIn: boolean;
  stuckMs: number;
  nowMs: number;
}

const NAV = [
  ['Pools', ''],
  ['Leases', 'leases'],
  ['Resources', 'resources'],
] as const;

/**
 * A whole page: `top` stays as it is (filters being typed), `live` is the part a "changed"
 * message re-fetches (the same URL with `fragment=1`). No inline script or style: the CSP
 * allows only the dashboard's own files.
 */
export function page(ctx: PageContext, title: string, top: Markup | null, live: Markup, fragmentUrl: string): Markup {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>slipway · ${title}</title>
<link rel="stylesheet" href="${ctx.base}/assets/dashboard.css">
<script src="${ctx.base}/assets/dashboard.js" defer></script>
</head>
<body data-events="${ctx.base}/events">
<header>
<strong class="brand">slipway</strong>
<nav>${NAV.map(([label, path]) => html`<a href="${ctx.base}/${path}"${label === title ? html` aria-current="page"` : null}>${label}</a>`)}</nav>
<span class="live-state" id="live-state" title="live updates over Server-Sent Events">connecting…</span>
${ctx.loggedIn ? html`<form method="post" action="${ctx.base}/logout" class="inline"><input type="hidden" name="csrf" value="${ctx.csrf}"><button class="link">Log out</button></form>` : null}
</header>
<h1>${title}</h1>
${top}
<main id="live" data-fragment="${fragmentUrl}">${live}</main>
</body>
</html>
`;
}

/** A button that POSTs one command, with the CSRF token; `extra` adds fields (the reason of a break). */
export function commandButton(ctx: PageContext, path: string[], label: string, extra: Markup | null = null): Markup | null {
  if (!ctx.canWrite) return null;
  return html`<form method="post" action="${href(ctx.base, path)}" class="inline command"><input type="hidden" name="csrf" value="${ctx.csrf}">${extra}<button type="submit" data-command="${path.at(-1)}">${label}</button></form>`;
}

/** A status, marked stuck when it is transitional and older than the threshold. */
export function statusCell(status: string, ageMs: number, transitional: boolean, ctx: PageContext): Markup {
  const stuck = transitional && ageMs >= ctx.stuckMs;
  return html`<span class="status status-${status}${stuck ? ' stuck' : ''}"${stuck ? html` title="stuck: in this state longer than the threshold"` : null}>${status}</span>`;
}

/** The login page: one field, the token. */
export function loginPage(base: string, failed: boolean): Markup {
  return html`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>slipway · Log in</title><link rel="stylesheet" href="${base}/assets/dashboard.css"></head>
<body>
<header><strong class="brand">slipway</strong></header>
<h1>Log in</h1>
${failed ? html`<p class="error">That is not the dashboard's token.</p>` : null}
<form method="post" action="${base}/login" class="login">
<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Log in</button>
</form>
</body>
</html>
`;
}

/** A page of an error: a status, and a line that says what went wrong. */
export function errorPage(base: string, title: string, message: string): Markup {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>slipway · ${title}</title><link rel="stylesheet" href="${base}/assets/dashboard.css"></head>
<body><header><strong class="brand">slipway</strong><nav><a href="${base}/">Pools</a></nav></header><h1>${title}</h1><p class="error">${message}</p></body></html>
`;
}
