/**
 * Details of the dashboard a user meets, in real headless Chromium against the real server
 * (docs/dashboard.md): a clean console for a signed-out visitor, and how the readings table
 * shows values.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, pageWithProblems } from '../helpers/browser.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

const PASSWORD = 'correct horse battery';

let server: TestServer;
let browser: Browser;
let seed: Awaited<ReturnType<typeof seedAccount>>;

beforeAll(async () => {
  server = await startTestServer();
  seed = await seedAccount(server, { device: { name: 'Greenhouse' } });
  await server.services.accounts.setPassword(seed.account.seq, PASSWORD);
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

const newPage = (viewport = { width: 1200, height: 800 }) => pageWithProblems(browser, viewport);

async function signIn(page: Page): Promise<void> {
  await page.getByLabel('Email').fill(seed.account.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices' }).waitFor();
}

describe('signed-out visitor', () => {
  it('opening the dashboard signed out shows the sign-in page with nothing in the console', async () => {
    const { page, problems } = await newPage();
    await page.goto(server.httpUrl);
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    // A deep link too, and a reload: each probes the session again.
    await page.goto(`${server.httpUrl}/#/devices/${seed.device.id}`);
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    expect(problems).toEqual([]);
  });

  it('a session that ended (signed out elsewhere) also just shows the sign-in page, quietly', async () => {
    const { page, problems } = await newPage();
    await page.goto(server.httpUrl);
    await signIn(page);
    const cookie = (await page.context().cookies()).find((c) => c.name === 'telemetryd_session')!;
    // Ended server-side while the cookie stays in the browser: a reset signs out every session.
    await server.services.sessions.resetPassword(seed.account.email, PASSWORD);
    expect((await page.context().cookies()).some((c) => c.value === cookie.value)).toBe(true);
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    expect(problems).toEqual([]);
  });

  it('GET /ui/api/session answers "no session" as a value, and the signed-in routes still refuse with 401', async () => {
    const res = await server.request('/ui/api/session');
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ account: null });
    expect((await server.request('/ui/api/account')).status).toBe(401);
  });
});

describe('readings table', () => {
  it('shows a text value quoted, so "12" never looks like the number 12 (table and latest tiles)', async () => {
    const sent = await ingest(server, {
      device_id: seed.device.id,
      access_token: seed.token,
      data: { n: 12, s: '12', yes: true, says: 'true', quote: 'say "hi"', none: null },
    });
    expect(sent.status).toBe(200);
    const { page, problems } = await newPage();
    await page.goto(server.httpUrl);
    await signIn(page);
    await page.goto(`${server.httpUrl}/#/devices/${seed.device.id}`);
    const table = page.getByTestId('readings');
    await table.waitFor();
    const headers = await table.locator('thead th').allTextContents();
    const cells = await table.locator('tbody tr').first().locator('td').allTextContents();
    const row = Object.fromEntries(headers.map((name, i) => [name, cells[i]]));
    expect(row).toMatchObject({ n: '12', s: '"12"', yes: 'true', says: '"true"', quote: '"say \\"hi\\""', none: '—' });
    const tile = (field: string) => page.locator(`[data-testid=latest] [data-field="${field}"] .tile-value`).textContent();
    expect(await tile('n')).toBe('12');
    expect(await tile('s')).toBe('"12"');
    expect(await tile('says')).toBe('"true"');
    expect(problems).toEqual([]);
  });
});

describe('new device on a server with MQTT off', () => {
  it('defaults to HTTP, says MQTT is off, and shows only HTTP snippets', async () => {
    expect(server.mqttPort ?? null).toBeNull();
    const { page, problems } = await newPage();
    await page.goto(server.httpUrl);
    await signIn(page);
    await page.goto(`${server.httpUrl}/#/devices/new`);
    await page.getByRole('heading', { name: 'New device' }).waitFor();
    const protocol = page.getByLabel('Protocol');
    expect(await protocol.inputValue()).toBe('http');
    expect(await protocol.locator('option[value=mqtt]').textContent()).toBe('MQTT (off on this server)');
    await page.getByLabel('Name', { exact: true }).fill('Porch');
    await page.getByRole('button', { name: 'Create device' }).click();
    await page.getByRole('heading', { name: 'Device created' }).waitFor();
    const titles = await page.locator('section.snippet h3').allTextContents();
    expect(titles).toEqual(['curl (HTTP)', 'ESP32 / Arduino (HTTP)', 'Python (HTTP)']);
    expect(await page.locator('section.snippet').allTextContents()).not.toContain(expect.stringMatching(/8883|mqtt/i));
    expect(problems).toEqual([]);
  });
});

describe('a phone-width window (360 px): lists become cards', () => {
  it("a device's id stays inside its card; an alert's Condition and a key's Prefix label are in the labels' font", async () => {
    await server.services.alerts.create(seed.device, { name: 'Too hot', field: 'temperature', operator: '>', value: 30, actions: [] });
    const { page, problems } = await newPage({ width: 360, height: 800 });
    await page.goto(server.httpUrl);
    await signIn(page);
    const row = page.locator(`[data-testid=devices] tr[data-device="${seed.device.id}"]`);
    // The card that clips what overflows it.
    const card = (await page.locator('.table-wrap').filter({ has: row }).boundingBox())!;
    const id = (await row.getByText(seed.device.id).boundingBox())!;
    expect(id.x + id.width).toBeLessThanOrEqual(card.x + card.width);

    await page.goto(`${server.httpUrl}/#/alerts`);
    await page.locator('td[data-label=Name]', { hasText: 'Too hot' }).waitFor();
    const labelFont = (label: string) =>
      page
        .locator(`table.list td[data-label="${label}"]`)
        .first()
        .evaluate((td) => getComputedStyle(td, '::before').fontFamily);
    expect(await labelFont('Condition')).toBe(await labelFont('Name'));
    // The condition itself stays monospace.
    expect(await page.getByText('temperature > 30').evaluate((el) => getComputedStyle(el).fontFamily)).toMatch(/monospace/);
    // Likewise an API key's Prefix (the seeded account has one key).
    await page.goto(`${server.httpUrl}/#/settings`);
    await page.locator('td[data-label=Prefix]').waitFor();
    expect(await labelFont('Prefix')).toBe(await labelFont('Name'));
    expect(problems).toEqual([]);
  });
});

describe('acting on something already gone', () => {
  /**
   * A signed-in page at `hash` that accepts every confirmation, and the errors its scripts
   * throw (the console's error lines are expected here: the failed requests).
   */
  async function signedInAt(hash: string): Promise<{ page: Page; pageErrors: string[] }> {
    const { page } = await newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (err) => pageErrors.push(err.message));
    page.on('dialog', (d) => void d.accept());
    await page.goto(server.httpUrl);
    await signIn(page);
    await page.goto(`${server.httpUrl}/${hash}`);
    return { page, pageErrors };
  }

  it('revoking a key after the session ended says the session ended and shows the sign-in page', async () => {
    const { page, pageErrors } = await signedInAt('#/settings');
    const revoke = page.getByRole('button', { name: 'Revoke' }).first();
    await revoke.waitFor();
    await server.services.sessions.resetPassword(seed.account.email, PASSWORD);
    await revoke.click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    expect(await page.locator('#toast').textContent()).toBe('Your session ended; please sign in again.');
    expect(pageErrors).toEqual([]);
  });

  it('deleting an alert someone else deleted meanwhile says so and drops it from the list', async () => {
    const alert = await server.services.alerts.create(seed.device, {
      name: 'Gone soon',
      field: 'temperature',
      operator: '<',
      value: 0,
      actions: [],
    });
    const { page, pageErrors } = await signedInAt('#/alerts');
    const row = page.locator(`tr[data-alert="${alert.id}"]`);
    await row.waitFor();
    await server.services.alerts.remove(alert);
    await row.getByRole('button', { name: 'Delete' }).click();
    await page.locator('#toast.error').getByText('alert not found').waitFor();
    await row.waitFor({ state: 'detached' });
    expect(pageErrors).toEqual([]);
  });
});

describe('charts', () => {
  it("a chart's screen-reader summary counts one bucket in the singular and ends without a stray space", async () => {
    const { device, accessToken } = await server.services.devices.create(seed.account, {
      name: 'One reading',
      fields: [{ name: 'temperature', label: 'Temperature', unit: '°C' }],
    });
    expect((await ingest(server, { device_id: device.id, access_token: accessToken, data: { temperature: 21.5, level: 3 } })).status).toBe(
      200,
    );
    const { page } = await newPage();
    await page.goto(server.httpUrl);
    await signIn(page);
    await page.goto(`${server.httpUrl}/#/devices/${device.id}`);
    const summary = (path: string) => page.locator(`figure[data-path="${path}"] p.sr-only`);
    await expect.poll(() => summary('temperature').textContent()).toBe('Temperature: 1 bucket, average 21.5 °C');
    expect(await summary('level').textContent()).toBe('level: 1 bucket, average 3');
  });
});

describe('a link to a device that does not exist', () => {
  it('shows a Not found page with the reason and the way back, like an unknown address', async () => {
    const { page } = await newPage();
    await page.goto(server.httpUrl);
    await signIn(page);
    await page.goto(`${server.httpUrl}/#/devices/dev_doesnotexist`);
    await page.getByRole('heading', { name: 'Not found' }).waitFor();
    expect(await page.getByRole('alert').textContent()).toBe('device not found');
    await page.getByRole('link', { name: 'Back to devices' }).click();
    await page.getByRole('heading', { name: 'Devices' }).waitFor();
  });
});

describe('new alert form and the mail server', () => {
  /** The new alert form's email action on a signed-in page of `target`. */
  async function emailAction(target: TestServer, email: string) {
    const { page } = await newPage();
    await page.goto(target.httpUrl);
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Devices' }).waitFor();
    await page.goto(`${target.httpUrl}/#/alerts`);
    await page.getByRole('button', { name: 'New alert' }).click();
    const box = page.getByRole('checkbox', { name: /Email the account owner/ });
    return { checked: await box.isChecked(), label: (await page.locator('label.check', { has: box }).textContent())!.trim() };
  }

  it('without --smtp-url, email is not ticked by default and the form says why', async () => {
    expect(server.config.smtpUrl).toBeNull();
    expect(await emailAction(server, seed.account.email)).toEqual({
      checked: false,
      label: 'Email the account owner (this server has no mail server: --smtp-url)',
    });
  });

  it('with --smtp-url, email is ticked by default', async () => {
    const withMail = await startTestServer({ 'smtp-url': 'smtp://127.0.0.1:2525' });
    try {
      const owner = await seedAccount(withMail);
      await withMail.services.accounts.setPassword(owner.account.seq, PASSWORD);
      expect(await emailAction(withMail, owner.account.email)).toEqual({ checked: true, label: 'Email the account owner' });
    } finally {
      await withMail.stop();
    }
  });
});

describe('alerts page while its devices are still loading', () => {
  it('keeps New alert disabled until the devices are known, so a quick click opens the form instead of "Create a device first"', async () => {
    const { page, problems } = await newPage();
    await page.goto(server.httpUrl);
    await signIn(page);
    // The real server answers; only the answer is held back until the button has been looked at.
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    await page.route('**/ui/api/devices', async (route) => {
      await held;
      await route.continue();
    });
    await page.goto(`${server.httpUrl}/#/alerts`);
    const button = page.getByRole('button', { name: 'New alert' });
    await button.waitFor();
    expect(await button.isDisabled()).toBe(true);
    release();
    await button.click();
    await page.getByRole('checkbox', { name: /Email the account owner/ }).waitFor();
    expect(await page.locator('#toast').textContent()).not.toContain('Create a device first');
    expect(problems).toEqual([]);
  });
});

describe('change password form', () => {
  it("names the account (hidden username) so a password manager updates the right entry, and Chromium's form check is quiet", async () => {
    const { page } = await newPage();
    const dom: string[] = [];
    page.on('console', (m) => {
      if (m.text().includes('[DOM]')) dom.push(m.text());
    });
    await page.goto(server.httpUrl);
    await signIn(page);
    await page.goto(`${server.httpUrl}/#/settings`);
    const form = page.locator('form', { has: page.getByRole('heading', { name: 'Change password' }) });
    await form.waitFor();
    const username = form.locator('input[autocomplete=username]');
    expect(await username.inputValue()).toBe(seed.account.email);
    expect(await username.isVisible()).toBe(false);
    await page.waitForTimeout(300);
    expect(dom).toEqual([]);
  });
});

describe('latest values', () => {
  it('a newest reading without values says so instead of an empty row of tiles', async () => {
    const { device, accessToken } = await server.services.devices.create(seed.account, { name: 'Empty sender' });
    expect((await ingest(server, { device_id: device.id, access_token: accessToken, data: {} })).status).toBe(200);
    const { page } = await newPage();
    await page.goto(server.httpUrl);
    await signIn(page);
    await page.goto(`${server.httpUrl}/#/devices/${device.id}`);
    await page.getByTestId('readings').waitFor();
    const latest = page.locator('section', { has: page.getByRole('heading', { name: /Latest values/ }) });
    expect(await latest.locator('.tile').count()).toBe(0);
    expect(await latest.getByText('The newest reading has no values.').isVisible()).toBe(true);
  });
});
