/**
 * End-to-end dashboard tests in real headless Chromium against the real server
 * (docs/dashboard.md): one browser and one page for the whole file, steps in order, like a user would.
 */

import { mkdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import ExcelJS from 'exceljs';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashSecret } from '../../src/ids.js';
import { launchChromium } from '../helpers/browser.js';
import { ingest, startTestServer, type TestServer } from '../helpers/server.js';

const ARTIFACTS = path.resolve('test-artifacts');
// A 2×2 PNG (red, green, blue, white).
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAAMIM/4EAAB/uBfsL2WiLAAAAAElFTkSuQmCC', 'base64');
const EMAIL = 'owner@example.com';
const PASSWORD = 'correct horse battery';

let server: TestServer;
let browser: Browser;
let context: BrowserContext;
let page: Page;
const state: { deviceId?: string; token?: string; readings: Record<string, unknown>[] } = { readings: [] };

async function shot(name: string) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function cookieHeader(): Promise<string> {
  return (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer();
  browser = await launchChromium();
  context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1200, height: 900 } });
  page = await context.newPage();
  page.setDefaultTimeout(8_000);
  page.on('dialog', (d) => void d.accept());
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

describe('dashboard in a browser', () => {
  it('serves the app with strict security headers', async () => {
    const res = await server.request('/');
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toContain('unsafe-inline');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('referrer-policy')).toBeTruthy();
    const html = await res.text();
    expect(html).not.toMatch(/<script>(?!<\/script>)/); // no inline script
    expect(html).not.toMatch(/https?:\/\//); // nothing loaded from elsewhere (offline)
  });

  it('first run: the printed setup URL creates the first account and signs in, once', async () => {
    expect(server.setupUrl).toMatch(/\/setup\?token=/);
    await page.goto(server.setupUrl!);
    await page.getByRole('heading', { name: 'Create the first account' }).waitFor();
    await shot('01-setup');
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.getByRole('heading', { name: 'Devices' }).waitFor();
    expect(await server.services.accounts.count()).toBe(1);
    const cookie = (await context.cookies()).find((c) => c.name === 'telemetryd_session')!;
    expect(cookie.httpOnly).toBe(true);
    expect(cookie.sameSite).toBe('Lax');
    // Only a hash of the session id is stored.
    expect(await server.storage.repos.sessions.findByHash(cookie.value)).toBeNull();
    expect(await server.storage.repos.sessions.findByHash(hashSecret(cookie.value))).not.toBeNull();

    // The token worked once: the same link is now refused.
    const token = new URL(server.setupUrl!).searchParams.get('token')!;
    const again = await server.request('/ui/api/setup', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-csrf-token': 'x' },
      body: JSON.stringify({ token, email: 'other@example.com', password: 'another password' }),
    });
    expect(again.status).toBe(401);
    expect(await server.services.accounts.count()).toBe(1);
  });

  it('sign-out, then a wrong password and an unknown email get the same generic error; the right one signs in', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await shot('02-sign-in');
    const messages: string[] = [];
    for (const email of [EMAIL, 'nobody@example.com']) {
      await page.getByLabel('Email').fill(email);
      await page.getByLabel('Password').fill('wrong password');
      await page.getByRole('button', { name: 'Sign in' }).click();
      const alert = page.getByRole('alert');
      await alert.waitFor();
      messages.push((await alert.textContent())!);
    }
    expect(messages[0]).toBe('wrong email or password');
    expect(messages[1]).toBe(messages[0]);
    await page.getByLabel('Email').fill(EMAIL);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Devices' }).waitFor();
  });

  it('creates a device with fields imported from a JSON file and shows its token once', async () => {
    await page.getByRole('link', { name: 'Create your first device' }).click();
    await page.getByRole('heading', { name: 'New device' }).waitFor();
    // The page starts in its Name box: typing goes there, not to the heading.
    await page.keyboard.type('Greenhouse');
    expect(await page.getByLabel('Name', { exact: true }).inputValue()).toBe('Greenhouse');
    await page.getByLabel('Description').fill('north side');
    await page.getByLabel('Protocol').selectOption('http');
    await page.getByLabel('Data interval (seconds)').fill('30');
    const fields = [
      { name: 'temperature', label: 'Temperature', unit: '°C' },
      { name: 'humidity', label: 'Humidity', unit: '%' },
      { name: 'snapshot_url', label: 'Snapshot', unit: '' },
    ];
    await page.getByLabel(/Allow this device to upload images/).check();
    // A file over the plan's field limit (starter: 20) or not JSON is refused with a message.
    const tooMany = Array.from({ length: 21 }, (_, i) => ({ name: `f${i}`, label: `F${i}`, unit: '' }));
    await page
      .getByLabel('Import fields from a JSON file')
      .setInputFiles({ name: 'many.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(tooMany)) });
    await page.getByRole('alert').getByText('21 fields in the file; your plan allows 20 per device').waitFor();
    await page
      .getByLabel('Import fields from a JSON file')
      .setInputFiles({ name: 'bad.json', mimeType: 'application/json', buffer: Buffer.from('{nope') });
    await page
      .getByRole('alert')
      .getByText(/not valid JSON/)
      .waitFor();
    await page
      .getByLabel('Import fields from a JSON file')
      .setInputFiles({ name: 'fields.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(fields)) });
    await page.getByLabel('Field 3 name').waitFor();
    expect(await page.getByLabel('Field 2 unit').inputValue()).toBe('%');
    await shot('03-new-device');
    await page.getByRole('button', { name: 'Create device' }).click();
    await page.getByRole('heading', { name: 'Device created' }).waitFor();
    state.deviceId = (await page.getByTestId('device-id').textContent())!;
    state.token = (await page.getByTestId('access-token').textContent())!;
    expect(state.deviceId).toMatch(/^dev_/);
    expect(state.token.length).toBeGreaterThanOrEqual(32);
    const curl = (await page.getByTestId('snippet-curl').textContent())!;
    expect(curl).toContain(`${server.config.publicUrl}/api/devices/ingest`);
    expect(curl).toContain(state.token);
    // This server has MQTT off: no MQTT snippet (its contents: dashboardApi.test.ts, snippets.test.ts).
    expect(await page.getByTestId('snippet-mosquitto').count()).toBe(0);
    await shot('04-device-created');

    const device = (await server.storage.repos.devices.findById(state.deviceId))!;
    expect(device.fields).toEqual(fields);
    expect(device.settings).toMatchObject({ protocol: 'http', data_interval_seconds: 30, network: 'wifi', data_direction: 'send_only' });
    expect(device.description).toBe('north side');
    expect(device.snapshotsEnabled).toBe(true);
  });

  it('shows a reading sent over HTTP on the device page without a reload', async () => {
    await page.getByRole('link', { name: 'Go to the device page' }).click();
    await page.getByRole('heading', { name: 'Greenhouse' }).waitFor();
    await page.getByText('No data yet').waitFor();
    const navigations: string[] = [];
    page.on('framenavigated', (f) => navigations.push(f.url()));

    const first = { temperature: 21.5, humidity: 40 };
    expect((await ingest(server, { device_id: state.deviceId, access_token: state.token, data: first })).status).toBe(200);
    state.readings.push(first);
    // Pushed at once; the page's 15 s poll is the fallback when a loaded machine delays the push.
    await page.locator('[data-testid=latest] [data-field=temperature]').getByText('21.5').waitFor({ timeout: 20_000 });
    expect(await page.locator('[data-testid=latest] [data-field=temperature]').textContent()).toContain('°C');

    // Upload a snapshot as the device does, then send its URL in a *_url field.
    const upload = await server.request(`/api/devices/${state.deviceId}/snapshot`, {
      method: 'POST',
      headers: { authorization: `Bearer ${state.token}`, 'content-type': 'image/png' },
      body: PNG,
    });
    expect(upload.status).toBe(200);
    const snapshotUrl = server.config.publicUrl + ((await upload.json()) as { url: string }).url;
    expect((await fetch(snapshotUrl)).status).toBe(404); // nobody else can read it
    const second = { temperature: 23.25, humidity: 42, snapshot_url: snapshotUrl };
    expect((await ingest(server, { device_id: state.deviceId, data: second }, { authorization: `Bearer ${state.token}` })).status).toBe(
      200,
    );
    state.readings.push(second);
    await page.locator('[data-testid=readings] tbody tr').nth(1).waitFor({ timeout: 10_000 });
    expect(await page.locator('[data-testid=readings] tbody tr').count()).toBe(2);
    expect(navigations).toEqual([]); // no reload
    // The *_url field renders as a clickable thumbnail.
    const thumb = page.locator('[data-testid=readings] a.thumb');
    expect(await thumb.getAttribute('href')).toBe(snapshotUrl);
    expect(await thumb.locator('img').getAttribute('src')).toBe(snapshotUrl);
    // The image really loads: the snapshot GET accepts the owner's dashboard session.
    await page.waitForFunction(
      () => (document.querySelector('[data-testid=readings] a.thumb img') as HTMLImageElement | null)?.naturalWidth === 2,
    );
    // One uPlot chart per numeric path: temperature and humidity.
    await page.locator('.chart-card[data-path=humidity] canvas').waitFor();
    expect(await page.locator('.chart-card[data-path]').count()).toBe(2);
    await shot('05-device-page');
  });

  it('exports the range as CSV and as .xlsx matching the readings', async () => {
    const [csvDownload] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Export CSV' }).click()]);
    const csv = readFileSync((await csvDownload.path())!, 'utf8')
      .trim()
      .split('\r\n');
    expect(csv[0]).toBe('time,temperature,humidity,snapshot_url');
    expect(csv).toHaveLength(3);
    const stored = (
      await server.storage.repos.readings.history((await server.storage.repos.devices.findById(state.deviceId!))!.seq, 0, 10)
    ).reverse();
    for (const [i, line] of csv.slice(1).entries()) {
      const [time, t, hum, url] = line.split(',');
      expect(time).toBe(new Date(stored[i]!.time).toISOString());
      expect(Number(t)).toBe(state.readings[i]!.temperature);
      expect(Number(hum)).toBe(state.readings[i]!.humidity);
      expect(url ?? '').toBe((state.readings[i]!.snapshot_url as string | undefined) ?? '');
    }

    const [xlsxDownload] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Export Excel' }).click()]);
    expect(xlsxDownload.suggestedFilename()).toMatch(/\.xlsx$/);
    const workbook = new ExcelJS.Workbook();
    await workbook.xlsx.readFile((await xlsxDownload.path())!);
    const sheet = workbook.getWorksheet('readings')!;
    const rows = sheet
      .getSheetValues()
      .filter(Boolean)
      .map((r) => (r as unknown[]).slice(1));
    expect(rows[0]).toEqual(['time', 'temperature', 'humidity', 'snapshot_url']);
    expect(rows).toHaveLength(3);
    for (const [i, row] of rows.slice(1).entries()) {
      expect(row[0]).toBe(new Date(stored[i]!.time).toISOString());
      expect(row[1]).toBe(state.readings[i]!.temperature);
      expect(row[2]).toBe(state.readings[i]!.humidity);
      expect(row[3] ?? undefined).toBe(state.readings[i]!.snapshot_url);
    }
  });

  it('creates an alert, records a trigger and acknowledges it in the UI', async () => {
    await page.getByRole('link', { name: 'Alerts' }).click();
    await page.getByRole('heading', { name: 'Alerts' }).waitFor();
    await page.getByRole('button', { name: 'New alert' }).click();
    const dlg = page.getByRole('dialog');
    await dlg.getByLabel('Name').fill('Too hot');
    await dlg.getByLabel('Field', { exact: true }).fill('temperature');
    await dlg.getByLabel('Operator').selectOption('>');
    await dlg.getByLabel('Value').fill('30');
    await dlg.getByLabel('Severity').selectOption('critical');
    await dlg.getByLabel('Cooldown (seconds)').fill('0');
    // Not ticked by default here: this server has no --smtp-url.
    await dlg.getByLabel('Email the account owner').check();
    await dlg.getByLabel('Webhook (signed HTTP POST)').check();
    await dlg.getByLabel('Webhook URL').fill('http://127.0.0.1:9/hook');
    await shot('06a-alert-form');
    await dlg.getByRole('button', { name: 'Create alert' }).click();
    await page.locator('[data-testid=alerts] tbody tr').waitFor();
    const [alert] = (await server.services.alerts.list((await server.services.accounts.list())[0]!, 10, 0)).alerts;
    expect(alert).toMatchObject({
      name: 'Too hot',
      field: 'temperature',
      operator: '>',
      value: 30,
      severity: 'critical',
      cooldown: 0,
      actions: ['email', 'webhook'],
      webhookUrl: 'http://127.0.0.1:9/hook',
      enabled: true,
    });

    // Trigger it with a reading: the evaluator records the event.
    const hot = { temperature: 35, humidity: 50 };
    expect((await ingest(server, { device_id: state.deviceId, access_token: state.token, data: hot })).status).toBe(200);
    state.readings.push(hot);
    for (let waited = 0; (await server.services.alerts.history(alert!, 10)).length === 0 && waited < 5_000; waited += 50)
      await new Promise((r) => setTimeout(r, 50));
    expect(await server.services.alerts.history(alert!, 10)).toHaveLength(1);
    await page.getByRole('button', { name: 'History' }).click();
    await page.locator('[data-testid=history] tbody tr').first().waitFor();
    expect(await page.locator('[data-testid=history]').textContent()).toContain('35');
    await shot('06-alerts');
    await page.getByRole('button', { name: 'Acknowledge' }).first().click();
    await page.locator('[data-testid=history] tbody tr').first().getByText(/^yes/).waitFor();
    const [event] = await server.services.alerts.history(alert!, 10);
    expect(event!.acknowledged).toBe(true);
    expect(event!.acknowledgedAt).not.toBeNull();

    // Edit: the form comes back filled in; change the threshold.
    await page.getByRole('button', { name: 'Edit' }).click();
    const edit = page.getByRole('dialog');
    expect(await edit.getByLabel('Field', { exact: true }).inputValue()).toBe('temperature');
    await edit.getByLabel('Value').fill('25.5');
    await edit.getByRole('button', { name: 'Save alert' }).click();
    await page.locator('[data-testid=alerts]').getByText('temperature > 25.5').waitFor();
    expect((await server.services.alerts.getAny(alert!.id)).value).toBe(25.5);

    // Disable from the list.
    await page.getByLabel('Enable Too hot').uncheck();
    await expect.poll(async () => (await server.services.alerts.getAny(alert!.id)).enabled).toBe(false);
  });

  it('creates an API key that works against /v1, then revokes it (401)', async () => {
    await page.getByRole('link', { name: 'Settings' }).click();
    await page.getByRole('heading', { name: 'Settings', exact: true }).waitFor();
    expect(await page.getByTestId('usage').textContent()).toContain('starter');
    await page.getByLabel('New key name').fill('grafana');
    await page.getByRole('button', { name: 'Create key' }).click();
    const key = (await page.getByTestId('new-key').textContent())!;
    expect(key).toMatch(/^tlm_/);
    await page.getByRole('button', { name: 'Done' }).click();
    const ok = await server.request('/v1/devices', { key });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { data: { id: string }[] }).data.map((d) => d.id)).toEqual([state.deviceId]);
    await shot('07-settings');
    await page.locator('[data-testid=keys] tr', { hasText: 'grafana' }).getByRole('button', { name: 'Revoke' }).click();
    await page
      .locator('[data-testid=keys] tr', { hasText: 'grafana' })
      .getByText(/^revoked/)
      .waitFor();
    expect((await server.request('/v1/devices', { key })).status).toBe(401);
  });

  it('refuses cross-site state-changing requests (CSRF)', async () => {
    const keysBefore = (await server.services.keys.list((await server.services.accounts.list())[0]!)).length;
    const cookie = await cookieHeader();
    // A request with a foreign Origin (and no CSRF token) is refused, even with the cookie.
    const foreign = await server.request('/ui/api/keys', {
      method: 'POST',
      headers: { cookie, origin: 'http://evil.example', 'content-type': 'application/json' },
      body: '{"name":"evil"}',
    });
    expect(foreign.status).toBe(403);
    // Same origin but without the session's CSRF token: refused.
    const noToken = await page.evaluate(
      async () =>
        (await fetch('/ui/api/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"evil"}' })).status,
    );
    expect(noToken).toBe(403);
    const wrongToken = await page.evaluate(
      async () =>
        (
          await fetch('/ui/api/keys', {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-csrf-token': 'guess' },
            body: '{"name":"evil"}',
          })
        ).status,
    );
    expect(wrongToken).toBe(403);

    // A real cross-site form POST from another origin, in the same browser (cookie sent: same site).
    let formStatus = 0;
    page.on('response', (r) => {
      if (r.url().endsWith('/ui/api/keys') && r.request().method() === 'POST') formStatus = r.status();
    });
    const evil: Server = createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(
        `<form id="f" method="POST" action="${server.httpUrl.replace('localhost', '127.0.0.1')}/ui/api/keys"><input name="name" value="evil"></form><script>document.getElementById('f').submit()</script>`,
      );
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
    try {
      await page.goto(`http://127.0.0.1:${(evil.address() as AddressInfo).port}/`);
      await page.waitForURL(/\/ui\/api\/keys$/);
      expect(formStatus).toBe(403);
    } finally {
      evil.close();
    }
    expect(await server.services.keys.list((await server.services.accounts.list())[0]!)).toHaveLength(keysBefore);
  });

  it('regenerates the token (old one refused), pauses, and deletes with a typed confirmation', async () => {
    await page.goto(`${server.httpUrl}/#/devices/${state.deviceId}`);
    await page.getByRole('heading', { name: 'Greenhouse' }).waitFor();
    await page.getByRole('button', { name: 'Regenerate token' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Regenerate' }).click();
    await page.getByRole('heading', { name: 'New access token' }).waitFor();
    const newToken = (await page.getByTestId('access-token').textContent())!;
    expect(newToken).not.toBe(state.token);
    expect((await ingest(server, { device_id: state.deviceId, access_token: state.token, data: { temperature: 1 } })).status).toBe(401);
    expect((await ingest(server, { device_id: state.deviceId, access_token: newToken, data: { temperature: 1 } })).status).toBe(200);

    await page.getByRole('link', { name: 'Go to the device page' }).click();
    await page.getByRole('button', { name: 'Pause' }).click();
    await page.getByRole('button', { name: 'Resume' }).waitFor();
    expect((await ingest(server, { device_id: state.deviceId, access_token: newToken, data: { temperature: 1 } })).status).toBe(403);
    await page.getByRole('button', { name: 'Resume' }).click();
    await page.getByRole('button', { name: 'Pause' }).waitFor();
    // A rejected reading (more top-level keys than the plan's 20 fields) shows up live with its reason.
    const tooWide = Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, i]));
    expect((await ingest(server, { device_id: state.deviceId, access_token: newToken, data: tooWide })).status).toBe(400);
    await page
      .getByTestId('rejected')
      .getByText(/^1 · last: /)
      .waitFor();

    // Phone-sized screenshot of the device page.
    await page.setViewportSize({ width: 390, height: 844 });
    await shot('08-device-phone');
    await page.setViewportSize({ width: 1200, height: 900 });

    await page.getByRole('link', { name: 'Devices', exact: true }).click();
    const row = page.locator(`[data-testid=devices] tr[data-device="${state.deviceId}"]`);
    await row.waitFor();
    expect(await row.textContent()).toContain('active');
    await shot('08b-devices');
    await row.getByRole('link', { name: 'Greenhouse' }).click();
    await page.getByRole('button', { name: 'Delete' }).click();
    const dlg = page.getByRole('dialog');
    const confirm = dlg.getByRole('button', { name: 'Delete permanently' });
    expect(await confirm.isDisabled()).toBe(true);
    await dlg.getByLabel(/Type the device name/).fill('Greenhouse');
    await confirm.click();
    await page.getByRole('heading', { name: 'Devices' }).waitFor();
    expect(await server.storage.repos.devices.findById(state.deviceId!)).toBeNull();
    await shot('09-devices-empty');
  });
});
