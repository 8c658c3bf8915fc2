/**
 * The dashboard's alert features in real headless Chromium against the real server: both
 * kinds and the chat actions in the form, the firing badge, the devices list's "silent"
 * mark, and resolution times in the history.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { send, waitForEvents } from '../alerts/helpers.js';
import { launchChromium } from '../helpers/browser.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const EMAIL = 'alerts-ui@example.com';
const PASSWORD = 'correct horse battery';
let server: TestServer;
let browser: Browser;
let page: Page;
let device: { id: string; seq: number };
let token: string;

beforeAll(async () => {
  server = await startTestServer({}, { silenceCheckMs: 200 });
  const account = await server.services.accounts.create({ email: EMAIL, password: PASSWORD, plan: 'starter' });
  // Every 60 s by its settings: it is "silent" only once its no_data alert fires.
  const created = await server.services.devices.create(account, { name: 'Cold room', settings: { data_interval_seconds: 60 } });
  device = created.device;
  token = created.accessToken;
  browser = await launchChromium();
  page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
  page.setDefaultTimeout(8_000);
  page.on('dialog', (d) => void d.accept());
  await page.goto(server.httpUrl);
  await page.getByLabel('Email').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices' }).waitFor();
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

describe('alerts in the dashboard', () => {
  it('creates a no_data alert with ntfy and a threshold alert with a clear value and slack; edits one', async () => {
    await send(server, device, token, { temp: 4 });
    await page.getByRole('link', { name: 'Alerts' }).click();
    await page.getByRole('button', { name: 'New alert' }).click();
    let dlg = page.getByRole('dialog');
    await dlg.getByLabel('Name').fill('Cold room silent');
    await dlg.getByLabel('Kind').selectOption('no_data');
    // The threshold inputs are hidden for this kind.
    expect(await dlg.getByLabel('Operator').isVisible()).toBe(false);
    await dlg.getByLabel('Silence (seconds)').fill('10');
    await dlg.getByLabel('Email the account owner').uncheck();
    expect(await dlg.getByLabel('ntfy topic URL').isVisible()).toBe(false);
    await dlg.getByLabel('ntfy push notification').check();
    await dlg.getByLabel('ntfy topic URL').fill('http://127.0.0.1:9/cold-room');
    await dlg.getByRole('button', { name: 'Create alert' }).click();
    await page.locator('[data-testid=alerts] tbody tr').waitFor();

    await page.getByRole('button', { name: 'New alert' }).click();
    dlg = page.getByRole('dialog');
    await dlg.getByLabel('Name').fill('Cold room warm');
    await dlg.getByLabel('Field', { exact: true }).fill('temp');
    await dlg.getByLabel('Operator').selectOption('>');
    await dlg.getByLabel('Value').fill('8');
    await dlg.getByLabel('Clear at (optional)').fill('6');
    // Not ticked by default here: this server has no --smtp-url.
    await dlg.getByLabel('Email the account owner').check();
    await dlg.getByLabel('Slack (or Mattermost) incoming webhook').check();
    await dlg.getByLabel('Slack URL').fill('http://127.0.0.1:9/slack');
    await dlg.getByLabel('Also notify when it resolves').uncheck();
    await dlg.getByRole('button', { name: 'Create alert' }).click();
    await page.locator('[data-testid=alerts] tbody tr', { hasText: 'Cold room warm' }).waitFor();

    const [silent, warm] = await server.services.alerts.listForDevice(await server.services.devices.getAny(device.id));
    expect(silent).toMatchObject({ kind: 'no_data', field: '*', value: 10, actions: ['ntfy'], ntfyUrl: 'http://127.0.0.1:9/cold-room' });
    expect(warm).toMatchObject({
      kind: 'threshold',
      field: 'temp',
      operator: '>',
      value: 8,
      clearValue: 6,
      actions: ['email', 'slack'],
      slackUrl: 'http://127.0.0.1:9/slack',
      notifyResolved: false,
    });
    expect(await page.locator('[data-testid=alerts]').textContent()).toContain('no data for 10 s');
    expect(await page.locator('[data-testid=alerts]').textContent()).toContain('temp > 8 (clear 6)');

    // Editing comes back filled in for the kind; the silence is changed.
    await page.locator('tr', { hasText: 'Cold room silent' }).getByRole('button', { name: 'Edit' }).click();
    dlg = page.getByRole('dialog');
    expect(await dlg.getByLabel('Kind').inputValue()).toBe('no_data');
    expect(await dlg.getByLabel('ntfy topic URL').inputValue()).toBe('http://127.0.0.1:9/cold-room');
    await dlg.getByLabel('Silence (seconds)').fill('12');
    await dlg.getByRole('button', { name: 'Save alert' }).click();
    await page.locator('[data-testid=alerts]').getByText('no data for 12 s').waitFor();
    expect(await server.services.alerts.getAny(silent!.id)).toMatchObject({ kind: 'no_data', value: 12 });
  });

  it('shows a firing badge, marks the device silent, and the history shows when it resolved', async () => {
    const [silent] = await server.services.alerts.listForDevice(await server.services.devices.getAny(device.id));
    await waitForEvents(server, silent!.id, 1);
    await page.reload();
    const row = page.locator('tr', { hasText: 'Cold room silent' });
    await row.getByTestId('state').getByText('firing').waitFor();
    expect(await page.locator('tr', { hasText: 'Cold room warm' }).getByTestId('state').textContent()).toBe('ok');

    await page.getByRole('link', { name: 'Devices' }).click();
    await page.locator(`[data-device=${device.id}]`).getByTestId('silent').waitFor();

    await send(server, device, token, { temp: 5 });
    await page.getByRole('link', { name: 'Alerts' }).click();
    await row.getByTestId('state').getByText('ok').waitFor();
    await row.getByRole('button', { name: 'History' }).click();
    const resolved = page.locator('[data-testid=history] tbody tr').first().getByTestId('resolved');
    await resolved.waitFor();
    expect(await resolved.textContent()).not.toBe('not yet');
    expect((await server.services.alerts.history(await server.services.alerts.getAny(silent!.id), 10))[0]!.resolvedAt).not.toBeNull();

    await page.getByRole('link', { name: 'Devices' }).click();
    await page.locator(`[data-device=${device.id}]`).waitFor();
    expect(await page.locator(`[data-device=${device.id}]`).getByTestId('silent').count()).toBe(0);
  }, 40_000);
});
