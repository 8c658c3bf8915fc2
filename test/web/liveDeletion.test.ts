/**
 * A device deleted while the dashboard is open elsewhere, in real headless Chromium against the
 * real server (docs/dashboard.md, Live updates): the live stream tells every tab of the owning
 * account, which drops the device from the list and leaves its page, well before the 15 s poll.
 * Deletion by the admin CLI, another process, reaches the tabs too.
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../helpers/browser.js';
import { runCliAsync } from '../helpers/cli.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

const PASSWORD = 'correct horse battery';
/** Well under the pages' 15 s poll, so only the live stream can make it. */
const LIVE_MS = 4_000;

let server: TestServer;
let browser: Browser;
let seed: Awaited<ReturnType<typeof seedAccount>>;
let other: Awaited<ReturnType<typeof seedAccount>>;

async function signedInContext(email: string): Promise<BrowserContext> {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const page = await context.newPage();
  page.setDefaultTimeout(8_000);
  await page.goto(server.httpUrl);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices' }).waitFor();
  return context;
}

/** A tab of the context on a hash route, its live stream open (one EventSource per tab). */
async function openTab(context: BrowserContext, hash: string, heading: string): Promise<Page> {
  const page = await context.newPage();
  page.setDefaultTimeout(8_000);
  const stream = page.waitForResponse((r) => r.url().endsWith('/ui/api/events'));
  await page.goto(`${server.httpUrl}/${hash}`);
  await page.getByRole('heading', { name: heading, exact: true }).waitFor();
  await stream;
  return page;
}

/** The ids of the devices a list tab shows. */
const listed = (page: Page) =>
  page.locator('[data-testid=devices] tr[data-device]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-device')));

beforeAll(async () => {
  server = await startTestServer();
  seed = await seedAccount(server, { device: { name: 'Greenhouse' } });
  other = await seedAccount(server, { device: { name: 'Elsewhere' } });
  for (const a of [seed.account, other.account]) await server.services.accounts.setPassword(a.seq, PASSWORD);
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

describe('a device deleted while tabs show it', () => {
  it('leaves its page with a message and drops out of the list in the other tabs, only for its owner', async () => {
    const second = await server.services.devices.create(seed.account, { name: 'Cellar' });
    const context = await signedInContext(seed.account.email);
    const devicePage = await openTab(context, `#/devices/${seed.device.id}`, 'Greenhouse');
    const listPage = await openTab(context, '#/devices', 'Devices');
    // The heading shows before the list's rows: wait for them.
    await expect.poll(() => listed(listPage)).toEqual(expect.arrayContaining([seed.device.id, second.device.id]));
    // Another account's tab: its list must not change, and it must hear nothing of this device.
    const otherContext = await signedInContext(other.account.email);
    const otherPage = await openTab(otherContext, '#/devices', 'Devices');
    const otherEvents: string[] = [];
    otherPage.on('console', (m) => otherEvents.push(m.text()));
    await otherPage.evaluate(() => {
      const source = new EventSource('/ui/api/events');
      source.addEventListener('device', (e) => console.log(`device event ${(e as MessageEvent).data}`));
    });

    // Deleted from a third tab, through the dashboard's own API.
    const deleter = await openTab(context, `#/devices/${seed.device.id}`, 'Greenhouse');
    await deleter.getByRole('button', { name: 'Delete' }).click();
    await deleter.getByLabel(/Type the device name/).fill('Greenhouse');
    await deleter.getByRole('button', { name: 'Delete permanently' }).click();
    await deleter.locator('#toast').getByText('Deleted Greenhouse.').waitFor();
    const deletedAt = Date.now();

    await devicePage.locator('#toast').getByText('"Greenhouse" was deleted.').waitFor({ timeout: LIVE_MS });
    await devicePage.getByRole('heading', { name: 'Devices', exact: true }).waitFor({ timeout: LIVE_MS });
    expect(new URL(devicePage.url()).hash).toBe('#/devices');
    await expect.poll(() => listed(listPage), { timeout: LIVE_MS }).toEqual([second.device.id]);
    expect(Date.now() - deletedAt).toBeLessThan(LIVE_MS + 1_000);
    // The deleting tab says it once, its own way, and is back on the list.
    expect(await deleter.locator('#toast').textContent()).toBe('Deleted Greenhouse.');
    await expect.poll(() => listed(deleter)).toEqual([second.device.id]);

    await expect.poll(() => listed(otherPage)).toEqual([other.device.id]);
    expect(otherEvents.filter((t) => t.includes(seed.device.id))).toEqual([]);
    await context.close();
    await otherContext.close();
  });

  it("an Alerts tab drops the deleted device's alerts", async () => {
    const victim = await server.services.devices.create(seed.account, { name: 'Attic' });
    const alert = await server.services.alerts.create(victim.device, {
      name: 'Attic too hot',
      field: 't',
      operator: '>',
      value: 40,
      actions: [],
    });
    const context = await signedInContext(seed.account.email);
    const alertsPage = await openTab(context, '#/alerts', 'Alerts');
    const row = alertsPage.locator(`tr[data-alert="${alert.id}"]`);
    await row.waitFor();

    await server.services.devices.remove(victim.device);
    await row.waitFor({ state: 'detached', timeout: LIVE_MS });
    await context.close();
  });

  it('deleted by the admin CLI (another process): the open tabs notice too', async () => {
    const victim = await server.services.devices.create(seed.account, { name: 'Shed' });
    const context = await signedInContext(seed.account.email);
    const devicePage = await openTab(context, `#/devices/${victim.device.id}`, 'Shed');
    const listPage = await openTab(context, '#/devices', 'Devices');
    await expect.poll(() => listed(listPage)).toContain(victim.device.id);

    const cli = await runCliAsync(['devices', 'delete', victim.device.id, '--yes', '--json'], { dataDir: server.dataDir });
    expect(cli.status, cli.stderr).toBe(0);
    expect(cli.json).toEqual({ deleted: victim.device.id });

    await devicePage.locator('#toast').getByText('"Shed" was deleted.').waitFor({ timeout: LIVE_MS });
    expect(new URL(devicePage.url()).hash).toBe('#/devices');
    await expect.poll(() => listed(listPage), { timeout: LIVE_MS }).not.toContain(victim.device.id);
    await context.close();
  });
});
