/**
 * The dashboard's stylesheet and script, served from the package under `<basePath>/assets/`:
 * no build step, no CDN, and no inline code (the Content-Security-Policy allows only these).
 */

export const CSS = `
:root { color-scheme: light dark; --fg: #1d2330; --muted: #6a7285; --bg: #fbfbfd; --line: #dfe2ea; --head: #eef0f5; --stuck: #b3261e; --stuck-bg: #fde7e5; --ok: #1e7a3a; --accent: #2f5fd0; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e8ee; --muted: #9aa2b5; --bg: #14171d; --line: #2c313c; --head: #1d2129; --stuck: #ff8a80; --stuck-bg: #3a1c1a; --ok: #7bd88f; --accent: #8fb0ff; } }
* { box-sizing: border-box; }
body { margin: 0; padding: 0 1.5rem 2rem; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1.5rem; align-items: center; padding: .8rem 0; border-bottom: 1px solid var(--line); }
header nav { display: flex; gap: 1rem; }
header nav a { color: var(--muted); text-decoration: none; }
header nav a[aria-current="page"] { color: var(--fg); font-weight: 600; }
.brand { font-size: 1.05rem; letter-spacing: .02em; }
.live-state { margin-left: auto; font-size: .85rem; color: var(--muted); }
.live-state.on::before { content: "● "; color: var(--ok); }
.live-state.off::before { content: "● "; color: var(--stuck); }
h1 { font-size: 1.4rem; margin: 1rem 0 .5rem; }
h2 { font-size: 1.05rem; margin: 1.4rem 0 .5rem; }
a { color: var(--accent); }
table { border-collapse: collapse; width: 100%; margin: .3rem 0 1rem; }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--head); font-weight: 600; font-size: .85rem; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.none { color: var(--muted); }
.stuck { color: var(--stuck); background: var(--stuck-bg); border-radius: 3px; padding: 0 .25rem; font-weight: 600; }
.status { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .85rem; }
.status-active { color: var(--ok); }
.status-broken { color: var(--stuck); }
.status-destroyed { color: var(--muted); }
.tag { font-size: .75rem; color: var(--muted); border: 1px solid var(--line); border-radius: 3px; padding: 0 .3rem; }
pre { background: var(--head); padding: .6rem; overflow-x: auto; white-space: pre-wrap; word-break: break-word; }
dl.fields { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dl.fields dt { color: var(--muted); }
dl.fields dd { margin: 0; }
form.inline { display: inline; }
form.filters { display: flex; gap: .8rem; flex-wrap: wrap; align-items: end; margin: .5rem 0 1rem; }
form.filters label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
form.login { display: flex; gap: .8rem; align-items: end; }
input, select, button { font: inherit; padding: .25rem .5rem; }
button { cursor: pointer; border: 1px solid var(--line); border-radius: 4px; background: var(--head); color: var(--fg); }
button.link { border: 0; background: none; color: var(--accent); padding: 0; }
.commands { display: flex; gap: .8rem; margin: .6rem 0; }
.error { color: var(--stuck); }
ol.timeline { padding-left: 1.2rem; }
.pager { display: flex; gap: 1rem; }
.legend { color: var(--muted); font-size: .85rem; }
details summary { cursor: pointer; color: var(--muted); font-size: .8rem; }
`;

/**
 * On a "changed" message, re-fetch the page's live part (`data-fragment`) and swap it in:
 * debounced, one fetch at a time, at most one a second. It never polls; a lost stream is
 * re-opened by the browser after the 5 s the server asks for.
 */
export const JS = `'use strict';
(() => {
  const live = document.getElementById('live');
  const state = document.getElementById('live-state');
  const events = document.body.dataset.events;
  if (!live || !events || typeof EventSource !== 'function') return;
  let timer = null;
  let running = false;
  let again = false;
  let last = 0;
  const refresh = async () => {
    if (running) { again = true; return; }
    running = true;
    last = Date.now();
    try {
      const res = await fetch(live.dataset.fragment, { credentials: 'same-origin', headers: { accept: 'text/html' } });
      if (res.ok) {
        live.innerHTML = await res.text();
        document.dispatchEvent(new CustomEvent('slipway:updated'));
      }
    } catch (error) {
      // The next change, or the next reconnect, fetches again.
    } finally {
      running = false;
      if (again) { again = false; schedule(); }
    }
  };
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, Math.max(300, 1000 - (Date.now() - last)));
  };
  const source = new EventSource(events);
  source.addEventListener('changed', schedule);
  source.addEventListener('open', () => {
    if (state) { state.textContent = 'live'; state.className = 'live-state on'; }
    // What changed between the page's render and the stream's (re)opening was announced to
    // no one: fetch once on every open, the first one included.
    schedule();
  });
  source.addEventListener('error', () => {
    if (state) { state.textContent = 'reconnecting…'; state.className = 'live-state off'; }
  });
})();
`;
