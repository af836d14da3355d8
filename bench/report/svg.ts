import type { TierName } from '../support/config.js';
import type { Results } from './results.js';

/**
 * The chart of bench/README.md: cost per cycle (median ms of a full lease cycle, one
 * acquirer) against the number of idle resources, one line per tier, with each tier's
 * target (1.3 × its cost at the smallest pool) dashed. Plain SVG, no dependency.
 */
const COLORS: Record<TierName, string> = { postgres: '#1f6fb2', embedded: '#d9641e' };

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function niceStep(max: number): number {
  const raw = max / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

export function costPerCycleSvg(r: Results): string | null {
  const series = (Object.entries(r.tiers) as Array<[TierName, NonNullable<Results['tiers'][TierName]>]>)
    .filter(([, t]) => t.scale && t.scale.points.length > 0)
    .map(([tier, t]) => ({ tier, points: t.scale!.points.map((p) => ({ x: p.resources, y: p.msPerCycleP50 })), history: t.scale!.historyLeases }));
  if (series.length === 0) return null;
  const W = 760;
  const H = 440;
  const m = { left: 70, right: 40, top: 84, bottom: 58 };
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  const lx0 = Math.log10(xs[0]);
  const lx1 = Math.log10(xs[xs.length - 1]);
  const yMax = Math.max(...series.flatMap((s) => [...s.points.map((p) => p.y), s.points[0].y * 1.3])) * 1.1;
  const step = niceStep(yMax);
  const top = Math.ceil(yMax / step) * step;
  const X = (v: number) => m.left + ((Math.log10(v) - lx0) / Math.max(1e-9, lx1 - lx0)) * (W - m.left - m.right);
  const Y = (v: number) => H - m.bottom - (v / top) * (H - m.top - m.bottom);
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif" font-size="12">`);
  parts.push(`<rect width="${W}" height="${H}" fill="#ffffff"/>`);
  const history = series[0].history.toLocaleString('en');
  parts.push(`<text x="${m.left}" y="22" font-size="15" font-weight="bold">Cost per lease cycle against the idle pool size</text>`);
  parts.push(`<text x="${m.left}" y="40" fill="#555">median ms per full cycle, 1 acquirer, ${history} destroyed leases in the history; ${esc(r.mode)} run of ${esc(r.startedAt.slice(0, 10))}</text>`);
  for (let v = 0; v <= top + 1e-9; v += step) {
    parts.push(`<line x1="${m.left}" x2="${W - m.right}" y1="${Y(v)}" y2="${Y(v)}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${m.left - 8}" y="${Y(v) + 4}" text-anchor="end" fill="#444">${Math.round(v * 10) / 10}</text>`);
  }
  for (const x of xs) {
    parts.push(`<line x1="${X(x)}" x2="${X(x)}" y1="${m.top}" y2="${H - m.bottom}" stroke="#f0f0f0"/>`);
    parts.push(`<text x="${X(x)}" y="${H - m.bottom + 18}" text-anchor="middle" fill="#444">${x.toLocaleString('en')}</text>`);
  }
  parts.push(`<line x1="${m.left}" x2="${W - m.right}" y1="${H - m.bottom}" y2="${H - m.bottom}" stroke="#333"/>`);
  parts.push(`<line x1="${m.left}" x2="${m.left}" y1="${m.top}" y2="${H - m.bottom}" stroke="#333"/>`);
  parts.push(`<text x="${(m.left + W - m.right) / 2}" y="${H - 16}" text-anchor="middle">idle active resources (log scale)</text>`);
  parts.push(`<text transform="translate(18 ${(m.top + H - m.bottom) / 2}) rotate(-90)" text-anchor="middle">ms per cycle (median)</text>`);
  series.forEach((s, i) => {
    const color = COLORS[s.tier];
    const limit = s.points[0].y * 1.3;
    parts.push(`<line x1="${m.left}" x2="${W - m.right}" y1="${Y(limit)}" y2="${Y(limit)}" stroke="${color}" stroke-dasharray="5 4" stroke-width="1"/>`);
    const path = s.points.map((p, j) => `${j === 0 ? 'M' : 'L'}${X(p.x).toFixed(1)},${Y(p.y).toFixed(1)}`).join(' ');
    parts.push(`<path d="${path}" fill="none" stroke="${color}" stroke-width="2.5"/>`);
    const last = s.points[s.points.length - 1].x;
    for (const p of s.points) {
      parts.push(`<circle cx="${X(p.x)}" cy="${Y(p.y)}" r="4" fill="${color}"/>`);
      const ratio = p.y / s.points[0].y;
      // The highest point at an x is labelled above it, the others below, so close points stay readable.
      const highest = series.every((o) => o === s || (o.points.find((q) => q.x === p.x)?.y ?? -Infinity) <= p.y);
      const dy = highest ? -9 : 18;
      const anchor = p.x === last ? 'end' : 'start';
      const dx = p.x === last ? -8 : 8;
      parts.push(`<text x="${X(p.x) + dx}" y="${Y(p.y) + dy}" text-anchor="${anchor}" fill="${color}">${Math.round(p.y)} ms${p.x === s.points[0].x ? '' : ` (${ratio.toFixed(1)}×)`}</text>`);
    }
    const lx = m.left + i * 300;
    const ly = 64;
    parts.push(`<line x1="${lx}" x2="${lx + 24}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2.5"/>`);
    parts.push(`<text x="${lx + 30}" y="${ly + 4}">${s.tier}</text>`);
    parts.push(`<line x1="${lx + 110}" x2="${lx + 134}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-dasharray="5 4"/>`);
    parts.push(`<text x="${lx + 140}" y="${ly + 4}" fill="#555">target: 1.3 × at ${s.points[0].x}</text>`);
  });
  parts.push('</svg>');
  return parts.join('\n') + '\n';
}
