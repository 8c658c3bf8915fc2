import { api, session, toastFailure } from '../api';
import { copyable, dialog, errorBox, field, fmtTime, h, showError, toast } from '../dom';
import type { PageContext } from '../main';

interface Key {
  id: string;
  key_prefix: string;
  name: string;
  last_used_at: string | null;
  created_at: string;
  revoked_at: string | null;
}

export async function renderSettings(main: HTMLElement, _params: string[], _ctx: PageContext): Promise<void> {
  const accountEl = h('section', { class: 'card', 'aria-labelledby': 'acc-h' });
  const keysEl = h('div');
  main.append(h('h1', {}, 'Settings'), accountEl);

  // ---- account: plan, limits, usage (the figures of /v1/account/usage)
  const { account, usage } = await api<{ account: any; usage: any }>('GET', '/account');
  const L = account.limits;
  const rows: [string, string][] = [
    ['Email', account.email],
    ['Plan', `${usage.plan.plan} (${usage.plan.status})`],
    ['Billing period', `${fmtTime(usage.plan.current_period_start)} – ${fmtTime(usage.plan.current_period_end)}`],
    ['Devices', `${usage.devices.total} of ${usage.devices.limit} (${usage.devices.active} active, ${usage.devices.paused} paused)`],
    ['Data points (24 h)', String(usage.telemetry.data_points_24h)],
    ['Alerts', `${usage.alerts.total} (${usage.alerts.active} enabled)`],
    ['Data retention', `${L.retention_days} days`],
    ['Fields per device', String(L.field_limit)],
    [
      'Public API rate',
      usage.plan.plan === 'free' ? 'no Public API access on the free plan' : `${L.rate_per_minute} / minute, ${L.rate_per_day} / day`,
    ],
    ['Snapshots', `${L.snapshots_per_day} per device per day, kept ${L.snapshot_retention_days} days`],
  ];
  accountEl.append(
    h('h2', { id: 'acc-h' }, 'Account and usage'),
    h('dl', { class: 'kv', 'data-testid': 'usage' }, ...rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
  );

  // ---- API keys
  const keyName = h('input', { name: 'key_name', required: true, maxlength: 100, autocomplete: 'off', placeholder: 'e.g. grafana' });
  const keyError = errorBox();
  const createKey = h('form', { class: 'row end' }, field('New key name', keyName), h('button', { type: 'submit' }, 'Create key'));
  createKey.addEventListener('submit', async (e) => {
    e.preventDefault();
    keyError.hidden = true;
    try {
      const res = await api<{ data: Key; key: string }>('POST', '/keys', { name: keyName.value });
      keyName.value = '';
      const close = h('button', { type: 'button' }, 'Done');
      const dlg = dialog(
        'API key created',
        h('p', { class: 'notice' }, 'Copy the key now: it is shown only this once.'),
        copyable(res.key, 'API key', { testid: 'new-key' }),
        h('p', { class: 'muted small' }, 'Use it as Authorization: Bearer <key> against /v1.'),
        h('div', { class: 'row' }, close),
      );
      close.addEventListener('click', () => dlg.close());
      close.focus();
      await loadKeys();
    } catch (err) {
      showError(keyError, err);
    }
  });
  main.append(
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'keys-h' },
      h('h2', { id: 'keys-h' }, 'API keys'),
      h('p', { class: 'muted small' }, 'Read-only access to the Public API (/v1).'),
      keyError,
      createKey,
      keysEl,
    ),
  );

  async function loadKeys() {
    const { data } = await api<{ data: Key[] }>('GET', '/keys');
    keysEl.replaceChildren(
      data.length
        ? h(
            'div',
            { class: 'table-wrap' },
            h(
              'table',
              { class: 'list', 'data-testid': 'keys' },
              h('thead', {}, h('tr', {}, ...['Name', 'Prefix', 'Created', 'Last used', 'Status'].map((t) => h('th', { scope: 'col' }, t)))),
              h(
                'tbody',
                {},
                ...data.map((k) => {
                  let status: Node | string = `revoked ${fmtTime(k.revoked_at)}`;
                  if (!k.revoked_at) {
                    const revoke = h('button', { type: 'button', class: 'small danger' }, 'Revoke');
                    revoke.addEventListener('click', async () => {
                      if (!window.confirm(`Revoke the key "${k.name}"? Requests using it get 401 at once.`)) return;
                      try {
                        await api('POST', `/keys/${encodeURIComponent(k.id)}/revoke`);
                        toast(`Revoked ${k.name}.`);
                      } catch (err) {
                        toastFailure(err);
                      }
                      await loadKeys().catch(() => {});
                    });
                    status = revoke;
                  }
                  return h(
                    'tr',
                    { 'data-key': k.id },
                    h('td', { 'data-label': 'Name' }, k.name),
                    h('td', { 'data-label': 'Prefix' }, h('span', { class: 'mono' }, `${k.key_prefix}…`)),
                    h('td', { 'data-label': 'Created' }, fmtTime(k.created_at)),
                    h('td', { 'data-label': 'Last used' }, fmtTime(k.last_used_at)),
                    h('td', { 'data-label': 'Status' }, status),
                  );
                }),
              ),
            ),
          )
        : h('p', { class: 'muted' }, 'No keys yet.'),
    );
  }
  await loadKeys();

  // ---- change password
  const current = h('input', { type: 'password', name: 'current_password', autocomplete: 'current-password', required: true });
  const next = h('input', { type: 'password', name: 'new_password', autocomplete: 'new-password', required: true, minlength: 8 });
  const pwError = errorBox();
  // The account the password belongs to, for password managers (they update that entry).
  const username = h('input', {
    type: 'email',
    name: 'username',
    autocomplete: 'username',
    value: session?.account.email ?? '',
    hidden: true,
  });
  const pwForm = h(
    'form',
    { class: 'card', 'aria-labelledby': 'pw-h' },
    h('h2', { id: 'pw-h' }, 'Change password'),
    username,
    pwError,
    field('Current password', current),
    field('New password', next, 'At least 8 characters. Other sessions are signed out.'),
    h('button', { type: 'submit' }, 'Change password'),
  );
  pwForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    pwError.hidden = true;
    try {
      await api('POST', '/account/password', { current_password: current.value, new_password: next.value });
      current.value = next.value = '';
      toast('Password changed.');
    } catch (err) {
      showError(pwError, err);
    }
  });
  main.append(pwForm);
}
