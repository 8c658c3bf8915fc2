import { h, svg } from './dom';

/** A hand-written SVG line chart of one numeric field (no library, works offline). */
export function lineChart(title: string, unit: string, points: [number, number][], rangeMs: number): HTMLElement {
  const W = 600;
  const H = 180;
  const P = { l: 48, r: 10, t: 10, b: 24 };
  const now = Date.now();
  const x0 = now - rangeMs;
  const ys = points.map((p) => p[1]);
  let yMin = Math.min(...ys);
  let yMax = Math.max(...ys);
  if (yMin === yMax) {
    yMin -= 1;
    yMax += 1;
  }
  const sx = (t: number) => P.l + ((t - x0) / rangeMs) * (W - P.l - P.r);
  const sy = (v: number) => P.t + (1 - (v - yMin) / (yMax - yMin)) * (H - P.t - P.b);
  const sorted = [...points].sort((a, b) => a[0] - b[0]);
  const path = sorted.map(([t, v], i) => `${i ? 'L' : 'M'}${sx(t).toFixed(1)},${sy(v).toFixed(1)}`).join(' ');
  const label = (x: number, y: number, text: string, anchor = 'end') => {
    const el = svg('text', { x, y, 'text-anchor': anchor, class: 'axis' });
    el.textContent = text;
    return el;
  };
  const fmt = (v: number) => (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2).replace(/\.?0+$/, ''));
  const timeFmt = (t: number) =>
    rangeMs > 86_400_000
      ? new Date(t).toLocaleDateString(undefined, { month: 'short', day: 'numeric' })
      : rangeMs === 86_400_000
        ? new Date(t).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' })
        : new Date(t).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  const chart = svg(
    'svg',
    {
      viewBox: `0 0 ${W} ${H}`,
      class: 'chart',
      role: 'img',
      'aria-label': `${title}: ${points.length} readings, from ${fmt(Math.min(...ys))} to ${fmt(Math.max(...ys))} ${unit}`,
    },
    svg('line', { x1: P.l, y1: H - P.b, x2: W - P.r, y2: H - P.b, class: 'grid' }),
    svg('line', { x1: P.l, y1: P.t, x2: W - P.r, y2: P.t, class: 'grid' }),
    label(P.l - 4, P.t + 4, fmt(yMax)),
    label(P.l - 4, H - P.b, fmt(yMin)),
    label(P.l, H - 6, timeFmt(x0), 'start'),
    label(W - P.r, H - 6, timeFmt(now)),
    svg('path', { d: path, class: 'line' }),
    ...(sorted.length <= 60
      ? sorted.map(([t, v]) => svg('circle', { cx: sx(t).toFixed(1), cy: sy(v).toFixed(1), r: 2.5, class: 'dot' }))
      : []),
  );
  return h('figure', { class: 'card chart-card' }, h('figcaption', {}, `${title}${unit ? ` (${unit})` : ''}`), chart as unknown as Node);
}
