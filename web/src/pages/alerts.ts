import { api, session, toastFailure } from '../api';
import { dialog, errorBox, field, fmtTime, h, select, showError, toast } from '../dom';
import { debounce } from '../live';
import type { PageContext } from '../main';
import type { DeviceDetail } from './devices';

interface Alert {
  id: string;
  device_id: string;
  name: string;
  kind: 'threshold' | 'no_data';
  condition: { field: string; operator: string; value: number; clear_value?: number };
  actions: string[];
  webhook_url: string | null;
  slack_url: string | null;
  discord_url: string | null;
  ntfy_url: string | null;
  severity: string;
  enabled: boolean;
  state: 'ok' | 'firing';
  notify_resolved: boolean;
  cooldown: number;
  last_triggered: string | null;
}

type Delivery = { action: string; status: string; detail: string | null; at: string | null };

interface AlertEvent {
  id: string;
  condition_value: number;
  severity: string;
  acknowledged: boolean;
  acknowledged_at: string | null;
  triggered_at: string;
  resolved_at: string | null;
  deliveries: Delivery[];
  resolution_deliveries: Delivery[];
}

/** The actions that POST to a URL of their own, with the form's label and an example URL. */
const URL_ACTIONS: { action: 'webhook' | 'slack' | 'discord' | 'ntfy'; label: string; urlLabel: string; placeholder: string }[] = [
  { action: 'webhook', label: 'Webhook (signed HTTP POST)', urlLabel: 'Webhook URL', placeholder: 'https://example.com/hook' },
  {
    action: 'slack',
    label: 'Slack (or Mattermost) incoming webhook',
    urlLabel: 'Slack URL',
    placeholder: 'https://hooks.slack.com/services/…',
  },
  { action: 'discord', label: 'Discord webhook', urlLabel: 'Discord URL', placeholder: 'https://discord.com/api/webhooks/…' },
  { action: 'ntfy', label: 'ntfy push notification', urlLabel: 'ntfy topic URL', placeholder: 'https://ntfy.sh/your-secret-topic' },
];

/** "temp > 30 (clear 25)", "no data for 600 s", "no temp for 600 s". */
function conditionText(a: Alert): string {
  if (a.kind === 'no_data') return `no ${a.condition.field === '*' ? 'data' : a.condition.field} for ${a.condition.value} s`;
  const clear = a.condition.clear_value !== undefined ? ` (clear ${a.condition.clear_value})` : '';
  return `${a.condition.field} ${a.condition.operator} ${a.condition.value}${clear}`;
}

function deliveryList(list: Delivery[]) {
  return h(
    'ul',
    { class: 'plain' },
    ...list.map((d) =>
      h('li', {}, h('span', { class: `badge ${d.status}` }, `${d.action}: ${d.status.replace('_', ' ')}`), d.detail ? ` ${d.detail}` : ''),
    ),
  );
}

const OPERATORS: [string, string][] = [
  ['>', '>'],
  ['>=', '≥'],
  ['<', '<'],
  ['<=', '≤'],
  ['==', '='],
  ['!=', '≠'],
];

function alertForm(devices: DeviceDetail[], existing: Alert | null, onSaved: () => void): HTMLFormElement {
  const error = errorBox();
  const device = select(
    'device_id',
    devices.map((d) => [d.id, `${d.name} (${d.id})`]),
    existing?.device_id,
  );
  if (existing) device.disabled = true;
  const name = h('input', { name: 'name', required: true, value: existing?.name ?? '' });
  const fieldInput = h('input', {
    name: 'field',
    required: true,
    list: 'alert-fields',
    autocomplete: 'off',
    class: 'mono',
    value: existing?.kind === 'threshold' ? existing.condition.field : '',
  });
  const datalist = h('datalist', { id: 'alert-fields' });
  const fillFields = () => {
    const d = devices.find((x) => x.id === device.value);
    datalist.replaceChildren(...(d?.fields ?? []).map((f) => h('option', { value: f.name }, `${f.label}${f.unit ? ` (${f.unit})` : ''}`)));
  };
  device.addEventListener('change', fillFields);
  fillFields();
  const kind = select(
    'kind',
    [
      ['threshold', 'Threshold: a value crosses a limit'],
      ['no_data', 'No data: the device goes silent'],
    ],
    existing?.kind ?? 'threshold',
  );
  const operator = select('operator', OPERATORS, existing?.kind === 'threshold' ? existing.condition.operator : '>');
  const value = h('input', {
    name: 'value',
    type: 'number',
    step: 'any',
    required: true,
    value: existing?.kind === 'threshold' ? existing.condition.value : '',
  });
  const clearValue = h('input', { name: 'clear_value', type: 'number', step: 'any', value: existing?.condition.clear_value ?? '' });
  const silence = h('input', {
    name: 'silence',
    type: 'number',
    min: 10,
    max: 2592000,
    step: 1,
    value: existing?.kind === 'no_data' ? existing.condition.value : 600,
  });
  const thresholdPart = h(
    'div',
    {},
    h(
      'div',
      { class: 'grid3' },
      field('Field', fieldInput, 'Pick a declared field or type a name (env.temp for nested data).'),
      field('Operator', operator),
      field('Value', value),
    ),
    field('Clear at (optional)', clearValue, 'Hysteresis: resolve only once the value is back below (> ≥) or above (< ≤) this number.'),
  );
  const noDataField = h('input', {
    name: 'no_data_field',
    list: 'alert-fields',
    autocomplete: 'off',
    class: 'mono',
    placeholder: '*',
    value: existing?.kind === 'no_data' && existing.condition.field !== '*' ? existing.condition.field : '',
  });
  // The grid sits inside a plain wrapper: a `display: grid` rule would override `hidden`.
  const noDataPart = h(
    'div',
    {},
    h(
      'div',
      { class: 'grid2' },
      field('Silence (seconds)', silence, 'Fires once when nothing arrives for this long (10 s to 30 days); the next reading resolves it.'),
      field('Only readings with', noDataField, 'Empty: any reading counts. A field name: only readings with a number there.'),
    ),
  );
  const syncKind = () => {
    const noData = kind.value === 'no_data';
    thresholdPart.hidden = noData;
    noDataPart.hidden = !noData;
    fieldInput.required = !noData;
    value.required = !noData;
    silence.required = noData;
  };
  kind.addEventListener('change', syncKind);
  syncKind();
  const severity = select(
    'severity',
    [
      ['info', 'Info'],
      ['warning', 'Warning'],
      ['critical', 'Critical'],
    ],
    existing?.severity ?? 'warning',
  );
  const cooldown = h('input', { name: 'cooldown', type: 'number', min: 0, step: 1, value: existing?.cooldown ?? 300 });
  // A new alert emails the owner by default only where this server can send email.
  const mailOn = session?.email.enabled ?? true;
  const email = h('input', { type: 'checkbox', name: 'action_email', checked: existing ? existing.actions.includes('email') : mailOn });
  const urlActions = URL_ACTIONS.map((a) => {
    const box = h('input', { type: 'checkbox', name: `action_${a.action}`, checked: existing?.actions.includes(a.action) ?? false });
    const url = h('input', {
      name: `${a.action}_url`,
      type: 'url',
      placeholder: a.placeholder,
      value: existing?.[`${a.action}_url`] ?? '',
    });
    const urlField = field(a.urlLabel, url);
    const sync = () => {
      urlField.hidden = !box.checked;
      url.required = box.checked;
    };
    box.addEventListener('change', sync);
    sync();
    return { ...a, box, url, urlField };
  });
  const notifyResolved = h('input', { type: 'checkbox', name: 'notify_resolved', checked: existing?.notify_resolved ?? true });
  const enabled = h('input', { type: 'checkbox', name: 'enabled', checked: existing?.enabled ?? true });
  const submit = h('button', { type: 'submit' }, existing ? 'Save alert' : 'Create alert');
  const form = h(
    'form',
    { class: 'alert-form' },
    error,
    field('Device', device),
    field('Name', name),
    field('Kind', kind),
    thresholdPart,
    noDataPart,
    datalist,
    h(
      'div',
      { class: 'grid2' },
      field('Severity', severity),
      field('Cooldown (seconds)', cooldown, 'Threshold alerts: matching readings within this time after a trigger record nothing.'),
    ),
    h(
      'fieldset',
      {},
      h('legend', {}, 'Actions'),
      h(
        'label',
        { class: 'check' },
        email,
        mailOn ? ' Email the account owner' : ' Email the account owner (this server has no mail server: --smtp-url)',
      ),
      ...urlActions.flatMap((a) => [h('label', { class: 'check' }, a.box, ` ${a.label}`), a.urlField]),
      h('label', { class: 'check' }, notifyResolved, ' Also notify when it resolves'),
    ),
    h('label', { class: 'check' }, enabled, ' Enabled'),
    h('div', { class: 'row' }, submit),
  );
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    error.hidden = true;
    const noData = kind.value === 'no_data';
    const actions = [email.checked && 'email', ...urlActions.map((a) => a.box.checked && a.action)].filter(Boolean);
    const body: Record<string, unknown> = {
      device_id: device.value,
      name: name.value,
      kind: kind.value,
      field: noData ? noDataField.value.trim() || '*' : fieldInput.value,
      operator: noData ? 'no_data' : operator.value,
      value: noData ? silence.value : value.value,
      clear_value: noData ? null : clearValue.value || null,
      severity: severity.value,
      cooldown: cooldown.value,
      actions,
      notify_resolved: notifyResolved.checked,
      enabled: enabled.checked,
    };
    for (const a of urlActions) body[`${a.action}_url`] = a.box.checked ? a.url.value : null;
    submit.disabled = true;
    try {
      if (existing) await api('PUT', `/alerts/${encodeURIComponent(existing.id)}`, body);
      else await api('POST', '/alerts', body);
      toast(existing ? 'Alert saved.' : 'Alert created.');
      onSaved();
    } catch (err) {
      showError(error, err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export async function renderAlerts(main: HTMLElement, _params: string[], ctx: PageContext): Promise<void> {
  const listEl = h('div');
  const historyEl = h('section', { 'aria-live': 'polite' });
  // Enabled once the devices are known, so that a quick click does not read "Create a device first".
  const newButton = h('button', { type: 'button', disabled: true }, 'New alert');
  main.append(h('div', { class: 'page-head' }, h('h1', {}, 'Alerts'), newButton), listEl, historyEl);
  let devices: DeviceDetail[] = [];
  let shownHistory: Alert | null = null;

  function openForm(existing: Alert | null) {
    if (!devices.length) {
      toast('Create a device first.', 'error');
      return;
    }
    const dlg = dialog(
      existing ? `Edit ${existing.name}` : 'New alert',
      alertForm(devices, existing, () => {
        dlg.close();
        void refresh();
      }),
    );
    const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
    cancel.addEventListener('click', () => dlg.close());
    dlg.querySelector('form .row')?.append(cancel);
  }
  newButton.addEventListener('click', () => openForm(null));

  async function showHistory(alert: Alert) {
    shownHistory = alert;
    const { data } = await api<{ data: AlertEvent[] }>('GET', `/alerts/${encodeURIComponent(alert.id)}/history`);
    historyEl.replaceChildren(
      h('h2', {}, `Trigger history: ${alert.name}`),
      data.length
        ? h(
            'div',
            { class: 'table-wrap' },
            h(
              'table',
              { class: 'list', 'data-testid': 'history' },
              h(
                'thead',
                {},
                h(
                  'tr',
                  {},
                  h('th', { scope: 'col' }, 'Triggered'),
                  h('th', { scope: 'col' }, 'Resolved'),
                  h('th', { scope: 'col' }, alert.kind === 'no_data' ? 'Silence (s)' : 'Value'),
                  h('th', { scope: 'col' }, 'Severity'),
                  h('th', { scope: 'col' }, 'Deliveries'),
                  h('th', { scope: 'col' }, 'Acknowledged'),
                ),
              ),
              h(
                'tbody',
                {},
                ...data.map((ev) => {
                  const ack = h('button', { type: 'button', class: 'small' }, 'Acknowledge');
                  ack.addEventListener('click', async () => {
                    try {
                      await api('POST', `/alert-events/${encodeURIComponent(ev.id)}/acknowledge`);
                      await showHistory(alert);
                    } catch (err) {
                      toastFailure(err);
                    }
                  });
                  return h(
                    'tr',
                    { 'data-event': ev.id },
                    h('td', { 'data-label': 'Triggered' }, fmtTime(ev.triggered_at)),
                    h(
                      'td',
                      { 'data-label': 'Resolved', 'data-testid': 'resolved' },
                      ev.resolved_at ? fmtTime(ev.resolved_at) : h('span', { class: 'muted' }, 'not yet'),
                    ),
                    h('td', { 'data-label': alert.kind === 'no_data' ? 'Silence (s)' : 'Value' }, String(ev.condition_value)),
                    h('td', { 'data-label': 'Severity' }, h('span', { class: `badge ${ev.severity}` }, ev.severity)),
                    h(
                      'td',
                      { 'data-label': 'Deliveries' },
                      ev.deliveries.length ? deliveryList(ev.deliveries) : h('span', { class: 'muted' }, 'none recorded'),
                      ev.resolution_deliveries.length
                        ? [h('div', { class: 'muted small' }, 'Resolution notice:'), deliveryList(ev.resolution_deliveries)]
                        : '',
                    ),
                    h('td', { 'data-label': 'Acknowledged' }, ev.acknowledged ? `yes, ${fmtTime(ev.acknowledged_at)}` : ack),
                  );
                }),
              ),
            ),
          )
        : h('p', { class: 'muted' }, 'This alert has not triggered yet.'),
    );
  }

  async function refresh() {
    const [alerts, devs] = await Promise.all([api<{ data: Alert[] }>('GET', '/alerts'), api<{ data: DeviceDetail[] }>('GET', '/devices')]);
    devices = devs.data;
    const deviceName = (id: string) => devices.find((d) => d.id === id)?.name ?? id;
    if (!alerts.data.length) {
      listEl.replaceChildren(
        h(
          'div',
          { class: 'card empty' },
          h('p', {}, devices.length ? 'No alerts yet.' : 'Create a device first, then add alerts on its fields.'),
        ),
      );
      return;
    }
    listEl.replaceChildren(
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'list', 'data-testid': 'alerts' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              ...['Name', 'State', 'Device', 'Condition', 'Severity', 'Actions', 'Last triggered', 'Enabled', ''].map((t) =>
                h('th', { scope: 'col' }, t),
              ),
            ),
          ),
          h(
            'tbody',
            {},
            ...alerts.data.map((a) => {
              const toggle = h('input', { type: 'checkbox', checked: a.enabled, 'aria-label': `Enable ${a.name}` });
              toggle.addEventListener('change', async () => {
                try {
                  await api('POST', `/alerts/${encodeURIComponent(a.id)}/${toggle.checked ? 'enable' : 'disable'}`);
                  toast(`${a.name} ${toggle.checked ? 'enabled' : 'disabled'}.`);
                } catch (err) {
                  toggle.checked = !toggle.checked;
                  toastFailure(err);
                }
              });
              const edit = h('button', { type: 'button', class: 'small secondary' }, 'Edit');
              edit.addEventListener('click', () => openForm(a));
              const hist = h('button', { type: 'button', class: 'small secondary' }, 'History');
              hist.addEventListener('click', () => void showHistory(a).then(() => historyEl.querySelector('h2')?.scrollIntoView()));
              const del = h('button', { type: 'button', class: 'small danger' }, 'Delete');
              del.addEventListener('click', async () => {
                if (!window.confirm(`Delete the alert "${a.name}" and its history?`)) return;
                try {
                  await api('DELETE', `/alerts/${encodeURIComponent(a.id)}`);
                } catch (err) {
                  // Deleted elsewhere meanwhile, for one: say why, and show the list as it is now.
                  toastFailure(err);
                }
                if (shownHistory?.id === a.id) historyEl.replaceChildren();
                await refresh().catch(() => {});
              });
              return h(
                'tr',
                { 'data-alert': a.id },
                h('td', { 'data-label': 'Name' }, a.name),
                h('td', { 'data-label': 'State' }, h('span', { class: `badge ${a.state}`, 'data-testid': 'state' }, a.state)),
                h('td', { 'data-label': 'Device' }, deviceName(a.device_id)),
                h('td', { 'data-label': 'Condition' }, h('span', { class: 'mono' }, conditionText(a))),
                h('td', { 'data-label': 'Severity' }, h('span', { class: `badge ${a.severity}` }, a.severity)),
                h('td', { 'data-label': 'Actions' }, a.actions.join(', ') || '—'),
                h('td', { 'data-label': 'Last triggered' }, fmtTime(a.last_triggered)),
                h('td', { 'data-label': 'Enabled' }, toggle),
                // The buttons' flex row inside the cell: a flex td is no table cell, and its border slips.
                h('td', {}, h('div', { class: 'row tight' }, edit, hist, del)),
              );
            }),
          ),
        ),
      ),
    );
  }
  await refresh();
  newButton.disabled = false;
  const onTrigger = debounce(() => {
    void refresh().catch(() => {});
    if (shownHistory) void showHistory(shownHistory).catch(() => {});
  }, 500);
  ctx.onLeave(ctx.live.on('alert', onTrigger));
  // A deleted device's alerts are deleted with it.
  ctx.onLeave(ctx.live.on('device', (e) => e.change === 'deleted' && onTrigger()));
}
