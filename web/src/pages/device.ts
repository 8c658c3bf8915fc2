import { DAY_MS, HOUR_MS } from '../../../src/time';
import { ApiError, api, newestOnly, toastFailure } from '../api';
import { type AggregateBucket, SeriesChart } from '../chart';
import { ago, connectivityText, dialog, errorBox, field, fmtTime, fmtValue, h, showError, toast } from '../dom';
import { debounce, POLL_MS } from '../live';
import type { PageContext } from '../main';
import { type DeviceDetail, deviceForm, renderCreated, statusBadge } from './devices';

interface Reading {
  id: string;
  time: string;
  data: Record<string, unknown>;
}

const RANGES = ['1h', '6h', '24h', '7d', '30d'] as const;
const RANGE_MS: Record<string, number> = { '1h': HOUR_MS, '6h': 6 * HOUR_MS, '24h': DAY_MS, '7d': 7 * DAY_MS, '30d': 30 * DAY_MS };
const TABLE_ROWS = 100;

/**
 * A reading's values by dotted path: nested objects are walked, so `{"env":{"humidity":39}}`
 * gives `env.humidity`; arrays and other values stay whole (shown as JSON text).
 */
function flatten(data: Record<string, unknown>, prefix = '', out: [string, unknown][] = []): [string, unknown][] {
  for (const [k, v] of Object.entries(data)) {
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0)
      flatten(v as Record<string, unknown>, `${prefix}${k}.`, out);
    else out.push([prefix + k, v]);
  }
  return out;
}

/** A *_url field holding a snapshot URL (docs/api.md, "Snapshots") renders as a thumbnail. */
function isSnapshotUrl(key: string, v: unknown): v is string {
  if (!key.endsWith('_url') || typeof v !== 'string') return false;
  try {
    const url = new URL(v, location.origin);
    return (url.protocol === 'http:' || url.protocol === 'https:') && /\/api\/devices\/[^/]+\/snapshot\/[^/]+$/.test(url.pathname);
  } catch {
    return false;
  }
}

function cell(key: string, v: unknown): Node | string {
  if (isSnapshotUrl(key, v)) {
    return h(
      'a',
      { href: v, target: '_blank', rel: 'noopener', class: 'thumb', 'aria-label': `Open snapshot ${key}` },
      h('img', { src: v, alt: `snapshot (${key})`, loading: 'lazy', width: 80, height: 60 }),
    );
  }
  return fmtValue(v);
}

export async function renderDevice(main: HTMLElement, [id]: string[], ctx: PageContext): Promise<void> {
  let range: string = sessionStorage.getItem('tlm-range') ?? '24h';
  const headEl = h('div');
  const latestEl = h('section', { 'aria-labelledby': 'latest-h' });
  const chartsEl = h('div', { class: 'charts' });
  const tableEl = h('div', { class: 'table-wrap' });
  const rangeNote = h('p', { class: 'muted small', 'aria-live': 'polite' });
  const chartNote = h('p', { class: 'muted small' });
  const liveNote = h('span', { class: 'muted small', 'data-testid': 'updated' });
  const exportCsv = h('a', { class: 'button secondary', download: '' }, 'Export CSV');
  const exportXlsx = h('a', { class: 'button secondary', download: '' }, 'Export Excel');
  const rangeSelect = h('select', { id: 'range' }, ...RANGES.map((r) => h('option', { value: r, selected: r === range }, r)));
  let device: DeviceDetail;
  /** Set while this tab deletes the device, which then says so itself. */
  let deleting = false;
  let left = false;
  ctx.onLeave(() => (left = true));

  /**
   * The device was deleted elsewhere (another tab, the admin CLI, another node): told by the
   * live stream, or noticed as a 404 by the poll. Back to the list, saying why.
   */
  function gone(): void {
    if (deleting || left) return;
    left = true;
    toast(`${device ? `"${device.name}"` : 'This device'} was deleted.`);
    ctx.navigate('#/devices');
  }
  const goneOn404 = (err: unknown) => {
    if (err instanceof ApiError && err.status === 404) gone();
  };

  const fetchDevice = newestOnly(() => api<{ data: DeviceDetail; latest: Reading | null }>('GET', `/devices/${encodeURIComponent(id!)}`));
  async function loadDevice() {
    const res = await fetchDevice();
    if (!res) return;
    device = res.data;
    renderHead();
    renderLatest(res.latest);
  }

  function renderHead() {
    const d = device;
    const pause = h('button', { type: 'button', class: 'secondary' }, d.status === 'active' ? 'Pause' : 'Resume');
    pause.addEventListener('click', async () => {
      try {
        await api('POST', `/devices/${encodeURIComponent(d.id)}/${d.status === 'active' ? 'pause' : 'resume'}`);
        await loadDevice();
        toast(device.status === 'paused' ? 'Device paused: its data is refused until resumed.' : 'Device resumed.');
      } catch (err) {
        toastFailure(err);
      }
    });
    const edit = h('button', { type: 'button', class: 'secondary' }, 'Edit');
    edit.addEventListener('click', () => {
      // The New device form's controls, filled with the device as last loaded.
      const controls = deviceForm(d);
      const err = errorBox();
      const save = h('button', { type: 'submit' }, 'Save');
      const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
      const form = h('form', {}, err, ...controls.fieldsets, h('div', { class: 'row' }, save, cancel));
      const dlg = dialog(`Edit ${d.name}`, form);
      cancel.addEventListener('click', () => dlg.close());
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        err.hidden = true;
        save.disabled = true;
        try {
          const res = await api<{ data: DeviceDetail }>('PUT', `/devices/${encodeURIComponent(d.id)}`, controls.body());
          dlg.close();
          toast('Device saved.');
          device = res.data;
          renderHead();
          // Labels, units and the order of declared fields show in the tiles, charts and table.
          for (const chart of charts.values()) chart.destroy();
          charts.clear();
          await Promise.all([loadDevice(), loadData()]);
        } catch (e2) {
          // A refusal (400) keeps the dialog open with the server's message; nothing was saved.
          if (dlg.open) {
            showError(err, e2);
            err.scrollIntoView({ block: 'nearest' });
          } else toastFailure(e2);
        } finally {
          save.disabled = false;
        }
      });
      controls.name.focus();
    });
    const regen = h('button', { type: 'button', class: 'secondary' }, 'Regenerate token');
    regen.addEventListener('click', () => {
      const yes = h('button', { type: 'button', class: 'danger' }, 'Regenerate');
      const no = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
      const dlg = dialog(
        'Regenerate the access token?',
        h('p', {}, 'The current token stops working at once; devices using it must be updated.'),
        h('div', { class: 'row' }, yes, no),
      );
      no.addEventListener('click', () => dlg.close());
      yes.addEventListener('click', async () => {
        dlg.close();
        try {
          const res = await api<{ data: DeviceDetail; access_token: string }>(
            'POST',
            `/devices/${encodeURIComponent(d.id)}/regenerate-token`,
          );
          renderCreated(main, res.data, res.access_token, 'New access token');
        } catch (err) {
          toastFailure(err);
        }
      });
    });
    const del = h('button', { type: 'button', class: 'danger' }, 'Delete');
    del.addEventListener('click', () => {
      const input = h('input', { autocomplete: 'off', name: 'confirm_name' });
      const err = errorBox();
      const yes = h('button', { type: 'submit', class: 'danger', disabled: true }, 'Delete permanently');
      const no = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
      input.addEventListener('input', () => (yes.disabled = input.value !== d.name));
      const form = h(
        'form',
        {},
        h('p', {}, 'This removes the device and all its data permanently.'),
        field(`Type the device name (${d.name}) to confirm`, input),
        err,
        h('div', { class: 'row' }, yes, no),
      );
      const dlg = dialog(`Delete ${d.name}?`, form);
      no.addEventListener('click', () => dlg.close());
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        deleting = true;
        try {
          await api('POST', `/devices/${encodeURIComponent(d.id)}/delete`, { confirm_name: input.value });
          dlg.close();
          toast(`Deleted ${d.name}.`);
          ctx.navigate('#/devices');
        } catch (e2) {
          deleting = false;
          showError(err, e2);
        }
      });
      input.focus();
    });
    const settings = d.settings ?? {};
    headEl.replaceChildren(
      h('div', { class: 'page-head' }, h('h1', {}, d.name), statusBadge(d.status)),
      h('p', { class: 'muted' }, d.description || ''),
      h(
        'dl',
        { class: 'kv compact' },
        h('dt', {}, 'Id'),
        h('dd', { class: 'mono' }, d.id),
        h('dt', {}, 'Type'),
        h('dd', {}, d.type),
        h('dt', {}, 'Connectivity'),
        h('dd', {}, connectivityText(settings)),
        h('dt', {}, 'Schema'),
        h('dd', {}, `${d.schema_mode}${d.snapshots_enabled ? ' · image uploads allowed' : ''}`),
        h('dt', {}, 'Last seen'),
        h('dd', { title: d.last_seen ?? '' }, ago(d.last_seen)),
        h('dt', {}, 'Rejected messages'),
        h(
          'dd',
          { 'data-testid': 'rejected' },
          d.rejected_count ? `${d.rejected_count} · last: ${d.last_rejection_reason ?? '—'} (${fmtTime(d.last_rejection_at)})` : '0',
        ),
      ),
      h('div', { class: 'row' }, edit, pause, regen, del),
    );
  }

  function labelOf(key: string) {
    const f = device.fields.find((x) => x.name === key);
    return { label: f?.label || key, unit: f?.unit ?? '' };
  }

  /** Declared fields first (a declared object's nested paths in its place), then the rest in order seen. */
  function orderPaths(paths: Iterable<string>): string[] {
    const rank = (p: string) => {
      const i = device.fields.findIndex((f) => p === f.name || p.startsWith(`${f.name}.`));
      return i < 0 ? device.fields.length : i;
    };
    return [...new Set(paths)]
      .map((p, i) => [p, i] as const)
      .sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1])
      .map(([p]) => p);
  }

  function renderLatest(latest: Reading | null) {
    if (!latest) {
      latestEl.replaceChildren(
        h('h2', { id: 'latest-h' }, 'Latest values'),
        h('p', { class: 'muted' }, 'No data yet. Send a reading with the snippets shown at creation.'),
      );
      return;
    }
    const values = new Map(flatten(latest.data));
    const keys = orderPaths(values.keys());
    latestEl.replaceChildren(
      h('h2', { id: 'latest-h' }, 'Latest values ', h('span', { class: 'muted small' }, fmtTime(latest.time))),
      // A reading of `{}` is valid (flexible schema), but there is nothing to show for it.
      keys.length === 0 ? h('p', { class: 'muted' }, 'The newest reading has no values.') : '',
      h(
        'div',
        { class: 'tiles', 'data-testid': 'latest' },
        ...keys.map((k) => {
          const { label, unit } = labelOf(k);
          const v = values.get(k);
          return h(
            'div',
            { class: 'tile', 'data-field': k },
            h('div', { class: 'tile-label' }, label),
            h('div', { class: 'tile-value' }, cell(k, v), unit && typeof v === 'number' ? h('span', { class: 'unit' }, ` ${unit}`) : null),
          );
        }),
      ),
    );
  }

  const charts = new Map<string, SeriesChart>();
  // A slow answer for the previous range never replaces the range chosen after it.
  const fetchAggregate = newestOnly((r: string) =>
    api<{
      data: AggregateBucket[];
      query: { range: string; requested_range: string; interval: string; fields: string[]; data_retention_days: number };
    }>('GET', `/devices/${encodeURIComponent(id!)}/aggregate?range=${r}`),
  );
  const fetchReadings = newestOnly((r: string) =>
    api<{
      data: Reading[];
      query: { range: string; requested_range: string; limit: number; data_retention_days: number };
    }>('GET', `/devices/${encodeURIComponent(id!)}/readings?range=${r}&limit=${TABLE_ROWS}`),
  );

  /** Charts of every numeric path over the whole range, from aggregates (docs/api.md, "Aggregates"). */
  async function loadCharts() {
    const res = await fetchAggregate(range);
    if (!res) return;
    const q = res.query;
    const to = Date.now();
    const from = to - RANGE_MS[q.range]!;
    const paths = orderPaths(q.fields);
    for (const [path, chart] of charts) {
      if (!paths.includes(path)) {
        chart.destroy();
        charts.delete(path);
      }
    }
    for (const path of paths) {
      let chart = charts.get(path);
      if (!chart) {
        const { label, unit } = labelOf(path);
        chart = new SeriesChart(path, label, unit);
        charts.set(path, chart);
      }
      chart.update(res.data, from, to);
    }
    const ordered = paths.map((p) => charts.get(p)!.el);
    if (ordered.some((el, i) => chartsEl.children[i] !== el) || chartsEl.children.length !== ordered.length)
      chartsEl.replaceChildren(...ordered);
    chartsEl.dataset.interval = q.interval;
    chartNote.textContent = paths.length ? `Charts: ${q.interval} buckets over ${q.range} (min–max band and average).` : '';
  }

  async function loadReadings() {
    const res = await fetchReadings(range);
    if (!res) return;
    const q = res.query;
    const effective = q.range;
    rangeNote.textContent =
      effective !== q.requested_range ? `Range capped to ${effective} by your plan's ${q.data_retention_days}-day retention.` : '';
    const base = `/ui/api/devices/${encodeURIComponent(id!)}/export?range=${effective}`;
    exportCsv.setAttribute('href', `${base}&format=csv`);
    exportXlsx.setAttribute('href', `${base}&format=xlsx`);
    if (res.data[0]) renderLatest(res.data[0]);

    // Readings table: one column per path (nested objects flattened), declared fields first.
    const flat = res.data.map((r) => new Map(flatten(r.data)));
    const seen = flat.flatMap((m) => [...m.keys()]);
    // A declared field keeps its (empty) column unless it holds an object, shown by its nested paths.
    const declared = device.fields.map((f) => f.name).filter((n) => !seen.some((p) => p.startsWith(`${n}.`)));
    const keys = orderPaths([...declared, ...seen]);
    const rows = res.data;
    tableEl.replaceChildren(
      rows.length
        ? h(
            'table',
            { class: 'readings', 'data-testid': 'readings' },
            h('caption', { class: 'muted small' }, `Newest ${rows.length} readings`),
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                h('th', { scope: 'col' }, 'Time'),
                ...keys.map((k) => h('th', { scope: 'col' }, labelOf(k).label, labelOf(k).unit ? ` (${labelOf(k).unit})` : '')),
              ),
            ),
            h(
              'tbody',
              {},
              ...rows.map((r, i) =>
                h(
                  'tr',
                  { 'data-reading': r.id },
                  h('td', { class: 'nowrap' }, fmtTime(r.time)),
                  ...keys.map((k) => {
                    const shown = flat[i]!.has(k) ? cell(k, flat[i]!.get(k)) : '';
                    // A long value is cut to the column's width (app.css); the whole of it shows on hover.
                    return h('td', typeof shown === 'string' && shown.length > 24 ? { title: shown } : {}, shown);
                  }),
                ),
              ),
            ),
          )
        : h('p', { class: 'muted' }, 'No readings in this range.'),
    );
    liveNote.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  }

  const loadData = () => Promise.all([loadCharts(), loadReadings()]);

  rangeSelect.addEventListener('change', () => {
    range = rangeSelect.value;
    sessionStorage.setItem('tlm-range', range);
    void loadData();
  });

  await loadDevice();
  main.append(
    headEl,
    latestEl,
    h(
      'section',
      { 'aria-labelledby': 'data-h' },
      h('div', { class: 'page-head' }, h('h2', { id: 'data-h' }, 'Data'), liveNote),
      h('div', { class: 'row' }, h('label', { for: 'range' }, 'Range '), rangeSelect, exportCsv, exportXlsx),
      rangeNote,
      chartNote,
      chartsEl,
      tableEl,
    ),
  );
  await loadData();

  // New readings refresh the charts in place: new buckets appear without a reload.
  const refresh = debounce(() => void loadData().catch(goneOn404), 300);
  const refreshDevice = debounce(() => void loadDevice().catch(goneOn404), 300);
  ctx.onLeave(ctx.live.on('reading', (e) => e.device_id === id && refresh()));
  ctx.onLeave(ctx.live.on('reading', (e) => e.device_id === id && refreshDevice()));
  ctx.onLeave(ctx.live.on('rejected', (e) => e.device_id === id && refreshDevice()));
  ctx.onLeave(ctx.live.on('device', (e) => e.device_id === id && (e.change === 'deleted' ? gone() : refreshDevice())));
  // Polling fallback (and the 15 s refresh) whether or not the stream is up.
  const timer = window.setInterval(() => {
    void loadData().catch(goneOn404);
    void loadDevice().catch(goneOn404);
  }, POLL_MS);
  ctx.onLeave(() => window.clearInterval(timer));
  ctx.onLeave(() => {
    for (const chart of charts.values()) chart.destroy();
  });
}
