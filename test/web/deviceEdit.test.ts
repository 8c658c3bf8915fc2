/**
 * Editing a device from the dashboard (docs/dashboard.md): the device page's Edit dialog in
 * real headless Chromium, and PUT /ui/api/devices/:id against the real server. An edit keeps
 * the id, the token, the status and the readings, and the ingest path sees it at once.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, pageWithProblems } from '../helpers/browser.js';
import { dashboardSession } from '../helpers/dashboard.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

const PASSWORD = 'correct horse battery';

let server: TestServer;
let browser: Browser;

beforeAll(async () => {
  server = await startTestServer();
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

type Seeded = Awaited<ReturnType<typeof seedAccount>>;
type DeviceJson = {
  id: string;
  name: string;
  type: string;
  description: string;
  status: string;
  schema_mode: string;
  fields: { name: string; label: string; unit: string }[];
  snapshots_enabled: boolean;
  settings: Record<string, unknown>;
  updated_at: string;
};

/** An account with a password and a device of the given definition. */
async function owner(device: Parameters<TestServer['services']['devices']['create']>[1], plan = 'starter'): Promise<Seeded> {
  const seeded = await seedAccount(server, { plan, device });
  await server.services.accounts.setPassword(seeded.account.seq, PASSWORD);
  return seeded;
}

/** A dashboard API session of `email`, without a browser. */
async function apiSession(email: string) {
  const { call } = await dashboardSession(server.httpUrl, email, PASSWORD);
  return {
    call,
    put: (id: string, body: unknown) => call('PUT', `/devices/${id}`, body),
    device: async (id: string): Promise<DeviceJson> => {
      const r = await call('GET', `/devices/${id}`);
      expect(r.status).toBe(200);
      return r.body.data;
    },
    readings: async (id: string): Promise<{ data: Record<string, unknown> }[]> =>
      (await call('GET', `/devices/${id}/readings?range=1h`)).body.data,
  };
}

const newPage = () => pageWithProblems(browser, { width: 1200, height: 900 });

async function openDevicePage(page: Page, email: string, deviceId: string, name: string): Promise<void> {
  await page.goto(server.httpUrl);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices' }).waitFor();
  await page.goto(`${server.httpUrl}/#/devices/${deviceId}`);
  await page.getByRole('heading', { level: 1, name }).waitFor();
}

describe('the Edit dialog on the device page', () => {
  it('saves name, description and a field label/unit; the page, a reload, another tab and the API show them; token and readings stay', async () => {
    const seed = await owner({
      name: 'Greenhouse',
      description: 'North bed',
      schemaMode: 'flexible',
      fields: [
        { name: 'temperature', label: 'Temperature', unit: 'C' },
        { name: 'humidity', label: 'Humidity', unit: '%' },
      ],
      settings: { network: 'ethernet', protocol: 'http', data_direction: 'send_only', data_interval_seconds: 30 },
    });
    expect(
      (await ingest(server, { device_id: seed.device.id, access_token: seed.token, data: { temperature: 21.5, humidity: 40 } })).status,
    ).toBe(200);
    const api = await apiSession(seed.account.email);
    const before = await api.device(seed.device.id);

    const { page, problems } = await newPage();
    await openDevicePage(page, seed.account.email, seed.device.id, 'Greenhouse');
    // Another tab of the same owner, told by the live stream (the 15 s poll is longer than the waits here).
    const { page: other } = await newPage();
    await openDevicePage(other, seed.account.email, seed.device.id, 'Greenhouse');

    await page.getByRole('button', { name: 'Edit' }).click();
    const dlg = page.getByRole('dialog', { name: 'Edit Greenhouse' });
    await dlg.waitFor();
    // Pre-filled with the current values; labels are tied to their controls.
    expect(await dlg.getByLabel('Name', { exact: true }).inputValue()).toBe('Greenhouse');
    expect(await dlg.getByLabel('Description').inputValue()).toBe('North bed');
    expect(await dlg.getByLabel('Network').inputValue()).toBe('ethernet');
    expect(await dlg.getByLabel('Data interval (seconds)').inputValue()).toBe('30');
    expect(await dlg.getByLabel('Schema mode').inputValue()).toBe('flexible');
    expect(await dlg.getByLabel('Field 1 name').inputValue()).toBe('temperature');
    expect(await dlg.getByLabel('Field 2 unit').inputValue()).toBe('%');
    // Focus starts in the form.
    expect(await page.evaluate(() => (document.activeElement as HTMLInputElement | null)?.name)).toBe('name');

    await dlg.getByLabel('Name', { exact: true }).fill('Glasshouse');
    await dlg.getByLabel('Description').fill('South wall');
    await dlg.getByLabel('Field 1 label').fill('Air temperature');
    await dlg.getByLabel('Field 1 unit').fill('°F');
    await dlg.getByRole('button', { name: 'Save' }).click();

    await page.locator('#toast').getByText('Device saved.').waitFor();
    await dlg.waitFor({ state: 'detached' });
    await page.getByRole('heading', { level: 1, name: 'Glasshouse' }).waitFor();
    await page.getByText('South wall').waitFor();
    const headers = page.getByTestId('readings').locator('thead th');
    await headers.filter({ hasText: 'Air temperature (°F)' }).waitFor();
    await other.getByRole('heading', { level: 1, name: 'Glasshouse' }).waitFor();

    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'Glasshouse' }).waitFor();
    await page.getByText('South wall').waitFor();
    await headers.filter({ hasText: 'Air temperature (°F)' }).waitFor();
    expect(await headers.allTextContents()).toEqual(['Time', 'Air temperature (°F)', 'Humidity (%)']);

    const after = await api.device(seed.device.id);
    expect(after).toEqual({
      ...before,
      name: 'Glasshouse',
      description: 'South wall',
      fields: [
        { name: 'temperature', label: 'Air temperature', unit: '°F' },
        { name: 'humidity', label: 'Humidity', unit: '%' },
      ],
      updated_at: after.updated_at,
    });
    // The token still ingests; the reading from before the edit is still there.
    expect((await ingest(server, { device_id: seed.device.id, access_token: seed.token, data: { temperature: 70 } })).status).toBe(200);
    expect((await api.readings(seed.device.id)).map((r) => r.data)).toEqual([{ temperature: 70 }, { temperature: 21.5, humidity: 40 }]);
    expect(problems).toEqual([]);
  });

  it("a refused edit (more fields than the plan allows) shows the server's message, keeps the dialog open and saves nothing; Cancel and Escape send nothing", async () => {
    const fields = ['a', 'b', 'c', 'd', 'e'].map((name) => ({ name, label: name.toUpperCase(), unit: '' }));
    const seed = await owner({ name: 'Free sensor', fields }, 'free');
    const api = await apiSession(seed.account.email);
    const before = await api.device(seed.device.id);
    expect(before.fields).toHaveLength(5);

    const { page } = await newPage();
    await openDevicePage(page, seed.account.email, seed.device.id, 'Free sensor');
    const puts: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'PUT') puts.push(r.url());
    });

    await page.getByRole('button', { name: 'Edit' }).click();
    const dlg = page.getByRole('dialog', { name: 'Edit Free sensor' });
    await dlg.waitFor();
    await dlg.getByLabel('Name', { exact: true }).fill('Renamed');
    await dlg.getByRole('button', { name: 'Add field' }).click();
    await dlg.getByLabel('Field 6 name').fill('f');
    await dlg.getByRole('button', { name: 'Save' }).click();
    await dlg.getByRole('alert').getByText('6 fields declared; the plan allows 5 per device').waitFor();
    expect(puts).toHaveLength(1);
    expect(await dlg.isVisible()).toBe(true);
    expect(await page.locator('#toast').textContent()).not.toBe('Device saved.');
    expect(await api.device(seed.device.id)).toEqual(before);

    await dlg.getByRole('button', { name: 'Cancel' }).click();
    await dlg.waitFor({ state: 'detached' });
    await page.getByRole('heading', { level: 1, name: 'Free sensor' }).waitFor();
    // Escape closes it too (native modal dialog); neither sends anything.
    await page.getByRole('button', { name: 'Edit' }).click();
    await dlg.waitFor();
    await page.keyboard.press('Escape');
    await dlg.waitFor({ state: 'detached' });
    expect(puts).toHaveLength(1);
    expect(await api.device(seed.device.id)).toEqual(before);
  });
});

describe('PUT /ui/api/devices/:id', () => {
  it('refuses without a session (401)', async () => {
    const seed = await owner({ name: 'No session' });
    const res = await server.request(`/ui/api/devices/${seed.device.id}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' },
      body: JSON.stringify({ name: 'Hijacked' }),
    });
    expect(res.status).toBe(401);
    expect((await server.services.devices.getAny(seed.device.id)).name).toBe('No session');
  });

  it("answers 404 for another account's device, and for one that does not exist, changing nothing", async () => {
    const mine = await owner({ name: 'Mine' });
    const theirs = await owner({ name: 'Theirs' });
    const api = await apiSession(mine.account.email);
    const res = await api.put(theirs.device.id, { name: 'Taken' });
    expect(res).toEqual({ status: 404, body: { error: 'device not found' } });
    expect((await server.services.devices.getAny(theirs.device.id)).name).toBe('Theirs');
    expect(await api.put('dev_doesnotexist', { name: 'x' })).toEqual({ status: 404, body: { error: 'device not found' } });
  });

  it("answers 400 with creation's messages for bad input, changing nothing", async () => {
    const seed = await owner({ name: 'Checked', fields: [{ name: 'temperature', label: 'Temperature', unit: 'C' }] });
    const api = await apiSession(seed.account.email);
    const before = await api.device(seed.device.id);
    const tooMany = Array.from({ length: 21 }, (_, i) => ({ name: `f${i}` }));
    const cases: [unknown, string][] = [
      [{ name: '' }, 'a device needs a name'],
      [{ name: '   ' }, 'a device needs a name'],
      [{ name: 'x'.repeat(201) }, 'device name is longer than 200 characters'],
      [{ type: 'toaster' }, 'unknown device type "toaster" (one of sensor, camera, gateway, actuator, other)'],
      [{ schema_mode: 'loose' }, 'schema mode must be strict or flexible'],
      [{ fields: tooMany }, '21 fields declared; the plan allows 20 per device'],
      [{ fields: [{ name: 'a' }, { name: 'a' }] }, 'field a is declared twice'],
      [{ fields: [{ name: '1bad' }] }, 'field #1: name must be 1-64 letters, digits, _ . - and start with a letter or _'],
      [{ fields: 'temperature' }, 'fields must be an array of {name, label, unit}'],
      [{ network: 'carrier-pigeon' }, 'network must be one of wifi, ethernet, 4g'],
      [{ data_interval_seconds: 0 }, 'data interval must be a whole number of seconds between 1 and 604800'],
      [{ description: 42 }, 'description must be text'],
    ];
    for (const [body, error] of cases) {
      // The same input at creation gets the same answer.
      const created = await api.call('POST', '/devices', { name: 'New one', ...(body as object) });
      expect(created, JSON.stringify(body)).toEqual({ status: 400, body: { error } });
      expect(await api.put(seed.device.id, body), JSON.stringify(body)).toEqual({ status: 400, body: { error } });
    }
    expect(await api.device(seed.device.id)).toEqual(before);
  });

  it('returns the device as GET does, keeps what the body leaves out, and never touches id, token, status or readings', async () => {
    const seed = await owner({
      name: 'Partial',
      type: 'camera',
      description: 'Gate',
      schemaMode: 'flexible',
      snapshotsEnabled: true,
      fields: [{ name: 'motion', label: 'Motion', unit: '' }],
      settings: { network: '4g', protocol: 'http', data_direction: 'send_and_receive', data_interval_seconds: 600, site: 'north' },
    });
    expect((await ingest(server, { device_id: seed.device.id, access_token: seed.token, data: { motion: 1 } })).status).toBe(200);
    const api = await apiSession(seed.account.email);
    expect((await api.call('POST', `/devices/${seed.device.id}/pause`)).status).toBe(200);
    const before = await api.device(seed.device.id);

    const res = await api.put(seed.device.id, { description: 'Back gate', id: 'dev_other', status: 'active', access_token: 'x' });
    expect(res.status).toBe(200);
    const after = await api.device(seed.device.id);
    expect(res.body.data).toEqual(after);
    expect(after).toEqual({ ...before, description: 'Back gate', updated_at: after.updated_at });
    expect(after.status).toBe('paused');
    // Settings the form does not know stay; the ones it sends are checked and replaced.
    expect((await api.put(seed.device.id, { network: 'wifi' })).body.data.settings).toEqual({ ...before.settings, network: 'wifi' });
    expect(before.settings.site).toBe('north');

    expect((await api.call('POST', `/devices/${seed.device.id}/resume`)).status).toBe(200);
    // The token from creation still ingests, and the reading from before is still there.
    expect((await ingest(server, { device_id: seed.device.id, access_token: seed.token, data: { motion: 0 } })).status).toBe(200);
    expect((await api.readings(seed.device.id)).map((r) => r.data)).toEqual([{ motion: 0 }, { motion: 1 }]);
  });

  it("changing a strict device's declared fields takes effect on ingest at once", async () => {
    const seed = await owner({ name: 'Strict', schemaMode: 'strict', fields: [{ name: 'old', label: 'Old', unit: '' }] });
    const send = (data: Record<string, unknown>) => ingest(server, { device_id: seed.device.id, access_token: seed.token, data });
    expect((await send({ old: 1 })).status).toBe(200);
    expect((await send({ new: 1 })).status).toBe(400);

    const api = await apiSession(seed.account.email);
    const res = await api.put(seed.device.id, { fields: [{ name: 'new', label: 'New', unit: 'V' }] });
    expect(res.status).toBe(200);
    expect(res.body.data.schema_mode).toBe('strict');

    expect((await send({ new: 2 })).status).toBe(200);
    const refused = await send({ old: 2 });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toBe('unknown fields for strict schema: old');

    // And a switch to flexible lets the undeclared field in again.
    expect((await api.put(seed.device.id, { schema_mode: 'flexible' })).status).toBe(200);
    expect((await send({ old: 3 })).status).toBe(200);
  });
});
