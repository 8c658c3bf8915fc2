import uPlot from 'uplot';
import { fmtChartNumber as fmt, h } from './dom';

/** One bucket of GET …/aggregate: figures per numeric path. */
export interface AggregateBucket {
  time: string;
  values: Record<string, { count: number; min: number; max: number; avg: number }>;
}

const css = (name: string, fallback: string) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
const HEIGHT = 200;

/** [times (s), min, max, avg] of one path, null where a bucket has no value (a gap). */
function columns(path: string, buckets: AggregateBucket[]): uPlot.AlignedData {
  const xs: number[] = [];
  const min: (number | null)[] = [];
  const max: (number | null)[] = [];
  const avg: (number | null)[] = [];
  for (const b of buckets) {
    const v = b.values[path];
    xs.push(Date.parse(b.time) / 1000);
    min.push(v ? v.min : null);
    max.push(v ? v.max : null);
    avg.push(v ? v.avg : null);
  }
  return [xs, min, max, avg];
}

/**
 * A time-series chart of one numeric path over the whole selected range, drawn by uPlot
 * (bundled, works offline): the average as a line, the min-max band shaded around it,
 * a time axis in the browser's local time, and the time and figures of the bucket under
 * the cursor in the legend. `update` swaps the data in place, so live refreshes keep the
 * chart (and a hovered point) where they are.
 */
export class SeriesChart {
  readonly el: HTMLElement;
  private plot: uPlot | null = null;
  private readonly holder: HTMLElement;
  private readonly observer: ResizeObserver;
  private xRange: [number, number] = [0, 1];
  private readonly summary: HTMLElement;

  constructor(
    readonly path: string,
    private readonly title: string,
    private readonly unit: string,
  ) {
    this.holder = h('div', { class: 'uplot-holder' });
    this.summary = h('p', { class: 'sr-only' });
    this.el = h(
      'figure',
      { class: 'card chart-card', 'data-path': path },
      h('figcaption', {}, `${title}${unit ? ` (${unit})` : ''}`),
      this.holder,
      this.summary,
    );
    this.observer = new ResizeObserver(() => {
      if (this.plot) this.plot.setSize({ width: this.width(), height: HEIGHT });
    });
    this.observer.observe(this.holder);
  }

  private width(): number {
    return Math.max(200, Math.floor(this.holder.clientWidth || this.el.clientWidth || 320));
  }

  /** Draws `buckets` over [from, to] (ms): the axis always spans the whole selected range. */
  update(buckets: AggregateBucket[], from: number, to: number): void {
    this.xRange = [from / 1000, to / 1000];
    const data = columns(this.path, buckets);
    const values = (data[3] as (number | null)[]).filter((v): v is number => v !== null);
    const withUnit = (v: number) => (this.unit ? `${fmt(v)} ${this.unit}` : fmt(v));
    this.summary.textContent =
      values.length === 0
        ? `${this.title}: no values in this range`
        : values.length === 1
          ? `${this.title}: 1 bucket, average ${withUnit(values[0]!)}`
          : `${this.title}: ${values.length} buckets, averages from ${withUnit(Math.min(...values))} to ${withUnit(Math.max(...values))}`;
    this.el.dataset.buckets = String(values.length);
    if (this.plot) {
      this.plot.setData(data, false);
      this.plot.setScale('x', { min: this.xRange[0], max: this.xRange[1] });
      return;
    }
    const unit = this.unit ? ` ${this.unit}` : '';
    const value = (_u: uPlot, v: number | null) => (v === null || v === undefined ? '—' : `${fmt(v)}${unit}`);
    const accent = css('--accent', '#2563eb');
    const muted = css('--muted', '#6b7280');
    const border = css('--border', '#e5e7eb');
    const axis: uPlot.Axis = { stroke: muted, grid: { stroke: border, width: 1 }, ticks: { stroke: border, width: 1 } };
    this.plot = new uPlot(
      {
        width: this.width(),
        height: HEIGHT,
        scales: { x: { time: true, range: () => this.xRange } },
        series: [
          { label: 'Time', value: '{YYYY}-{MM}-{DD} {HH}:{mm}' },
          { label: 'min', stroke: 'transparent', points: { show: false }, value },
          { label: 'max', stroke: 'transparent', points: { show: false }, value },
          { label: 'avg', stroke: accent, width: 2, value, points: { show: (u: uPlot) => (u.data[0]?.length ?? 0) <= 60 } },
        ],
        bands: [{ series: [2, 1], fill: `${accent}33` }],
        axes: [
          { ...axis, space: 60 },
          { ...axis, size: 56, values: (_u: uPlot, ticks: number[]) => ticks.map((t) => fmt(t)) },
        ],
        cursor: { points: { size: 6 } },
        legend: { live: true },
      },
      data,
      this.holder,
    );
  }

  destroy(): void {
    this.observer.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }
}
