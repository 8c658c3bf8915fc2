import { api, newestOnly, session } from '../api';
import { ago, copyable, errorBox, field, h, select, showError, toast } from '../dom';
import { debounce, POLL_MS } from '../live';
import type { PageContext } from '../main';
import { snippets } from '../snippets';

export interface DeviceDetail {
  id: string;
  name: string;
  type: string;
  description: string;
  status: 'active' | 'paused';
  settings: Record<string, any>;
  last_seen: string | null;
  created_at: string;
  schema_mode: string;
  fields: { name: string; label: string; unit: string }[];
  snapshots_enabled: boolean;
  rejected_count: number;
  last_rejection_reason: string | null;
  last_rejection_at: string | null;
  /** A no_data alert fires, or it has not been seen for over twice its data interval (list only). */
  silent?: boolean;
}

export const statusBadge = (status: string) => h('span', { class: `badge ${status}` }, status);

export async function renderDevices(main: HTMLElement, _params: string[], ctx: PageContext): Promise<void> {
  const body = h('div');
  main.append(
    h('div', { class: 'page-head' }, h('h1', {}, 'Devices'), h('a', { class: 'button', href: '#/devices/new' }, 'New device')),
    body,
  );

  const fetchDevices = newestOnly(() => api<{ data: DeviceDetail[] }>('GET', '/devices'));
  async function refresh() {
    const res = await fetchDevices();
    if (!res) return;
    const { data } = res;
    if (!data.length) {
      body.replaceChildren(
        h(
          'div',
          { class: 'card empty' },
          h('p', {}, 'No devices yet.'),
          h('a', { class: 'button', href: '#/devices/new' }, 'Create your first device'),
        ),
      );
      return;
    }
    body.replaceChildren(
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'list', 'data-testid': 'devices' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              h('th', { scope: 'col' }, 'Name'),
              h('th', { scope: 'col' }, 'Status'),
              h('th', { scope: 'col' }, 'Type'),
              h('th', { scope: 'col' }, 'Last seen'),
              h('th', { scope: 'col' }, 'Rejected'),
            ),
          ),
          h(
            'tbody',
            {},
            ...data.map((d) =>
              h(
                'tr',
                { 'data-device': d.id },
                h(
                  'td',
                  { 'data-label': 'Name' },
                  // One box for name and id: on a phone the cell is a flex row (app.css), and the id goes under the name.
                  h(
                    'div',
                    { class: 'cell-stack' },
                    h('a', { href: `#/devices/${encodeURIComponent(d.id)}` }, d.name),
                    h('div', { class: 'muted mono small' }, d.id),
                  ),
                ),
                h(
                  'td',
                  { 'data-label': 'Status' },
                  statusBadge(d.status),
                  d.silent
                    ? [
                        ' ',
                        h('span', { class: 'badge silent', title: 'No data for longer than expected', 'data-testid': 'silent' }, 'silent'),
                      ]
                    : '',
                ),
                h('td', { 'data-label': 'Type' }, d.type),
                h('td', { 'data-label': 'Last seen', title: d.last_seen ?? '' }, ago(d.last_seen)),
                h('td', { 'data-label': 'Rejected', class: d.rejected_count ? 'warn' : '' }, String(d.rejected_count)),
              ),
            ),
          ),
        ),
      ),
    );
  }
  await refresh();
  const soon = debounce(() => void refresh().catch(() => {}), 1000);
  ctx.onLeave(ctx.live.on('reading', soon));
  ctx.onLeave(ctx.live.on('rejected', soon));
  ctx.onLeave(
    ctx.live.on('device', (e) => {
      // A deleted device leaves the list at once; the refresh then shows the empty state if it was the last.
      if (e.change === 'deleted') body.querySelector(`tr[data-device="${CSS.escape(e.device_id)}"]`)?.remove();
      soon();
    }),
  );
  const timer = window.setInterval(() => void refresh().catch(() => {}), POLL_MS);
  ctx.onLeave(() => window.clearInterval(timer));
}

type FieldRow = { name: HTMLInputElement; label: HTMLInputElement; unit: HTMLInputElement; row: HTMLElement };

/** What a device form sends (POST and PUT /ui/api/devices, src/http/routes/dashboardApi.ts). */
export type DeviceFormBody = Record<string, unknown>;

/**
 * The controls of a device form, shared by "New device" and the device page's "Edit": the
 * same fields, look and checks in both. Empty for a new device, or filled with `current`'s
 * values for an edit. `fieldsets` go into the caller's form; `body()` reads them for the API.
 */
export function deviceForm(current?: DeviceDetail): { fieldsets: HTMLElement[]; name: HTMLInputElement; body(): DeviceFormBody } {
  const free = session?.account.plan === 'free';
  const fieldLimit = session?.account.limits.field_limit ?? 5;
  const settings = current?.settings ?? {};
  const name = h('input', { name: 'name', required: true, maxlength: 200, autocomplete: 'off', value: current?.name ?? '' });
  const type = select(
    'type',
    [
      ['sensor', 'Sensor'],
      ['camera', 'Camera'],
      ['gateway', 'Gateway'],
      ['actuator', 'Actuator'],
      ['other', 'Other'],
    ],
    current?.type ?? 'sensor',
  );
  const description = h('textarea', { name: 'description', rows: 2 });
  description.value = current?.description ?? '';
  const direction = select(
    'data_direction',
    [
      ['send_only', 'Send only'],
      ['receive_only', 'Receive only'],
      ['send_and_receive', 'Send and receive'],
    ],
    String(settings.data_direction ?? 'send_only'),
  );
  const network = select(
    'network',
    [
      ['wifi', 'WiFi'],
      ['ethernet', 'Ethernet'],
      ['4g', '4G'],
    ],
    String(settings.network ?? 'wifi'),
  );
  // MQTT is only the default where the server listens for it (--mqtt-port, not off).
  const mqttOn = session?.mqtt.enabled ?? true;
  const protocol = select(
    'protocol',
    [
      ['mqtt', mqttOn ? `MQTT (TLS, port ${session?.mqtt.port ?? 8883})` : 'MQTT (off on this server)'],
      ['http', 'HTTP'],
    ],
    String(settings.protocol ?? (mqttOn ? 'mqtt' : 'http')),
  );
  const interval = h('input', {
    name: 'data_interval_seconds',
    type: 'number',
    min: 1,
    max: 604800,
    value: Number(settings.data_interval_seconds ?? 60),
    inputmode: 'numeric',
  });
  const schema = select(
    'schema_mode',
    [
      ['strict', 'Strict: only declared fields are accepted'],
      ['flexible', 'Flexible: any fields'],
    ],
    current?.schema_mode ?? (free ? 'strict' : 'flexible'),
  );
  const snapshots = h('input', { type: 'checkbox', name: 'snapshots_enabled', checked: current?.snapshots_enabled ?? false });

  const rows: FieldRow[] = [];
  const rowsEl = h('div', { class: 'field-rows' });
  const fieldCount = h('p', { class: 'muted small', 'aria-live': 'polite' });
  const updateCount = () => (fieldCount.textContent = `${rows.length} of ${fieldLimit} fields allowed on your plan.`);
  function addRow(f: { name?: string; label?: string; unit?: string } = {}) {
    const n = rows.length + 1;
    const r: FieldRow = {
      name: h('input', { 'aria-label': `Field ${n} name`, placeholder: 'name (e.g. temperature)', value: f.name ?? '', class: 'mono' }),
      label: h('input', { 'aria-label': `Field ${n} label`, placeholder: 'label', value: f.label ?? '' }),
      unit: h('input', { 'aria-label': `Field ${n} unit`, placeholder: 'unit', value: f.unit ?? '', class: 'unit' }),
      row: h('div', { class: 'field-row' }),
    };
    const remove = h('button', { type: 'button', class: 'small secondary', 'aria-label': `Remove field ${n}` }, 'Remove');
    remove.addEventListener('click', () => {
      rows.splice(rows.indexOf(r), 1);
      r.row.remove();
      updateCount();
    });
    r.row.append(r.name, r.label, r.unit, remove);
    rows.push(r);
    rowsEl.append(r.row);
    updateCount();
    return r;
  }
  for (const f of current?.fields ?? []) addRow(f);
  const addButton = h('button', { type: 'button', class: 'secondary' }, 'Add field');
  addButton.addEventListener('click', () => addRow().name.focus());
  const importInput = h('input', { type: 'file', accept: 'application/json,.json', name: 'fields_file' });
  const importError = errorBox();
  importInput.addEventListener('change', async () => {
    importError.hidden = true;
    const file = importInput.files?.[0];
    if (!file) return;
    try {
      const parsed = JSON.parse(await file.text());
      if (!Array.isArray(parsed)) throw new Error('the file must hold a JSON array of {name, label, unit}');
      for (const [i, f] of parsed.entries()) {
        if (!f || typeof f !== 'object' || typeof f.name !== 'string') throw new Error(`entry #${i + 1} needs a string "name"`);
      }
      if (parsed.length > fieldLimit) throw new Error(`${parsed.length} fields in the file; your plan allows ${fieldLimit} per device`);
      for (const r of rows.splice(0)) r.row.remove();
      for (const f of parsed)
        addRow({ name: f.name, label: typeof f.label === 'string' ? f.label : '', unit: typeof f.unit === 'string' ? f.unit : '' });
      toast(`Imported ${parsed.length} fields from ${file.name}`);
    } catch (err) {
      showError(importError, err instanceof SyntaxError ? new Error(`not valid JSON: ${err.message}`) : err);
    }
  });
  updateCount();

  const fieldsets = [
    h('fieldset', {}, h('legend', {}, 'Device'), field('Name', name), field('Type', type), field('Description', description)),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Connectivity'),
      h(
        'div',
        { class: 'grid2' },
        field('Network', network),
        field(
          'Protocol',
          protocol,
          mqttOn
            ? 'Informational: picks the code snippets; both protocols work.'
            : 'Informational: picks the code snippets. This server has MQTT off, so devices send over HTTP.',
        ),
      ),
      h('div', { class: 'grid2' }, field('Data direction', direction), field('Data interval (seconds)', interval)),
    ),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Data fields'),
      field('Schema mode', schema, free ? 'Strict is the default on the free plan.' : undefined),
      rowsEl,
      fieldCount,
      h('div', { class: 'row' }, addButton),
      field('Import fields from a JSON file', importInput, 'An array of {"name", "label", "unit"} objects; replaces the fields above.'),
      importError,
    ),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Images'),
      h('label', { class: 'check' }, snapshots, ' Allow this device to upload images (camera snapshots over HTTP POST)'),
    ),
  ];
  return {
    fieldsets,
    name,
    body: () => ({
      name: name.value,
      type: type.value,
      description: description.value,
      data_direction: direction.value,
      network: network.value,
      protocol: protocol.value,
      data_interval_seconds: interval.value,
      schema_mode: schema.value,
      // A row whose name is left empty is no field; the server checks the rest.
      fields: rows
        .filter((r) => r.name.value.trim())
        .map((r) => ({ name: r.name.value.trim(), label: r.label.value.trim(), unit: r.unit.value.trim() })),
      snapshots_enabled: snapshots.checked,
    }),
  };
}

export async function renderNewDevice(main: HTMLElement, _params: string[], ctx: PageContext): Promise<void> {
  const error = errorBox();
  const controls = deviceForm();
  const submit = h('button', { type: 'submit' }, 'Create device');
  const form = h(
    'form',
    { class: 'card' },
    error,
    ...controls.fieldsets,
    h('div', { class: 'row' }, submit, h('a', { href: '#/devices', class: 'button secondary' }, 'Cancel')),
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    submit.disabled = true;
    try {
      const res = await api<{ data: DeviceDetail; access_token: string }>('POST', '/devices', controls.body());
      renderCreated(main, res.data, res.access_token, 'Device created');
    } catch (err) {
      showError(error, err);
      error.scrollIntoView({ block: 'center' });
    } finally {
      submit.disabled = false;
    }
  });
  void ctx;
  main.append(h('h1', {}, 'New device'), form);
  controls.name.focus();
}

/** The id and access token, shown once, with snippets for the device's connectivity. */
export function renderCreated(main: HTMLElement, device: DeviceDetail, token: string, title: string): void {
  const s = session!;
  const list = snippets({
    deviceId: device.id,
    token,
    publicUrl: s.public_url,
    mqttHost: s.mqtt.host,
    mqttPort: s.mqtt.port,
    fields: device.fields,
    network: String(device.settings.network ?? 'wifi'),
    protocol: String(device.settings.protocol ?? 'mqtt'),
    mqttEnabled: s.mqtt.enabled,
    intervalSeconds: Number(device.settings.data_interval_seconds ?? 60),
    certificatePem: s.mqtt.certificate_pem,
    selfSigned: s.mqtt.self_signed,
  });
  main.replaceChildren(
    h('h1', {}, title),
    h(
      'div',
      { class: 'card' },
      h(
        'p',
        { class: 'notice', role: 'note' },
        'Copy the access token now: it is shown only this once. Regenerate it from the device page if it is lost.',
      ),
      h(
        'dl',
        { class: 'kv' },
        h('dt', {}, 'Device id'),
        h('dd', {}, copyable(device.id, 'device id', { testid: 'device-id' })),
        h('dt', {}, 'Access token'),
        h('dd', {}, copyable(token, 'access token', { testid: 'access-token' })),
      ),
    ),
    h('h2', {}, 'Send data'),
    ...list.map((sn) =>
      h(
        'section',
        { class: 'card snippet', 'aria-label': sn.title },
        h('h3', {}, sn.title),
        copyable(sn.code, `${sn.title} snippet`, { multiline: true, testid: `snippet-${sn.id}` }),
      ),
    ),
    h(
      'p',
      {},
      h(
        'a',
        {
          class: 'button',
          href: `#/devices/${encodeURIComponent(device.id)}`,
          // After "Regenerate token" the address is already the device page: re-render it.
          onclick: (e: Event) => {
            if (location.hash === (e.currentTarget as HTMLAnchorElement).getAttribute('href')) {
              e.preventDefault();
              window.dispatchEvent(new HashChangeEvent('hashchange'));
            }
          },
        },
        'Go to the device page',
      ),
    ),
  );
  (main.querySelector('h1') as HTMLElement).focus();
}
