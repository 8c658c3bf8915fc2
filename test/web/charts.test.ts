/**
 * Device-page charts in real headless Chromium (docs/api.md, "Aggregates", docs/dashboard.md): a week
 * of readings stored with past times gives one chart per numeric path, nested ones included,
 * spanning the whole week from aggregates, with units from the field definitions, hover
 * values, nested latest-value tiles, live updates and a phone layout. Screenshots go to
 * test-artifacts/.
 */

import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../helpers/browser.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

const ARTIFACTS = path.resolve('test-artifacts');
const TZ = 'America/New_York';
const MIN = 60_000;
const DAY = 86_400_000;
const PASSWORD = 'charts password 1';

let server: TestServer;
let browser: Browser;
let page: Page;
let seed: Awaited<ReturnType<typeof seedAccount>>;
const now = Date.now();

/** The local date (in TZ) of an instant, as the chart's legend writes it. */
const localDate = (ms: number) =>
  new Intl.DateTimeFormat('en-CA', { timeZone: TZ, year: 'numeric', month: '2-digit', day: '2-digit' }).format(ms);

async function hoverLegend(chartPath: string, fraction: number): Promise<{ time: string; min: string; max: string; avg: string }> {
  const over = page.locator(`.chart-card[data-path="${chartPath}"] .u-over`);
  const box = (await over.boundingBox())!;
  await page.mouse.move(box.x + box.width * fraction, box.y + box.height / 2);
  const values = await page.locator(`.chart-card[data-path="${chartPath}"] .u-legend .u-value`).allTextContents();
  return { time: values[0]!, min: values[1]!, max: values[2]!, avg: values[3]! };
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startTestServer();
  seed = await seedAccount(server, {
    email: 'charts@example.com',
    device: {
      name: 'Weather station',
      schemaMode: 'flexible',
      fields: [
        { name: 'temperature', label: 'Temperature', unit: '°C' },
        { name: 'env.humidity', label: 'Humidity', unit: '%' },
      ],
    },
  });
  await server.services.accounts.setPassword(seed.account.seq, PASSWORD);
  // A week of readings every 10 minutes, stored with past times through the reading writer.
  const batch = [];
  for (let t = now - 7 * DAY + 5 * MIN, i = 0; t < now - 5 * MIN; t += 10 * MIN, i++) {
    const data = {
      temperature: Math.round((18 + 6 * Math.sin((t / DAY) * 2 * Math.PI) + (i % 7) / 10) * 100) / 100,
      env: { humidity: Math.round(55 + 20 * Math.cos((t / DAY) * 2 * Math.PI)), pressure: 1000 + (i % 13) },
      status: 'ok',
    };
    batch.push({ deviceSeq: seed.device.seq, time: t, data: JSON.stringify(data) });
  }
  await Promise.all(batch.map((r) => server.storage.writer.append(r)));
  await server.services.rollups.runOnce();

  browser = await launchChromium();
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, timezoneId: TZ });
  page = await context.newPage();
  page.setDefaultTimeout(8_000);
});

afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

describe('device charts in a browser', () => {
  it('draws one chart per numeric path, nested ones included, spanning the whole week', async () => {
    await page.goto(server.httpUrl);
    await page.getByLabel('Email').fill('charts@example.com');
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Devices' }).waitFor();
    await page.goto(`${server.httpUrl}/#/devices/${seed.device.id}`);
    await page.getByRole('heading', { name: 'Weather station' }).waitFor();
    await page.locator('#range').selectOption('7d');
    await page.waitForFunction(() => document.querySelector('.charts')?.getAttribute('data-interval') === '1h');
    await page.locator('.chart-card[data-path="env.pressure"] canvas').waitFor();

    // Declared fields first (with their labels and units), then the other numeric paths.
    expect(await page.locator('.chart-card[data-path]').evaluateAll((els) => els.map((e) => e.getAttribute('data-path')))).toEqual([
      'temperature',
      'env.humidity',
      'env.pressure',
    ]);
    expect(await page.locator('.chart-card[data-path="env.humidity"] figcaption').textContent()).toBe('Humidity (%)');
    // Hourly buckets over the whole week, not the newest 1,000 readings.
    const buckets = Number(await page.locator('.chart-card[data-path=temperature]').getAttribute('data-buckets'));
    expect(buckets).toBeGreaterThanOrEqual(167);

    // Hovering near the left edge shows a bucket from a week ago, near the right edge one from today.
    const left = await hoverLegend('temperature', 0.01);
    expect([localDate(now - 7 * DAY), localDate(now - 7 * DAY + 3 * 3_600_000)]).toContain(left.time.slice(0, 10));
    expect(left.min).toMatch(/°C$/);
    expect(Number.parseFloat(left.min)).toBeLessThanOrEqual(Number.parseFloat(left.max));
    const right = await hoverLegend('temperature', 0.995);
    expect([localDate(now), localDate(now - 3_600_000)]).toContain(right.time.slice(0, 10));
    expect(right.avg).toMatch(/^-?[\d.]+ °C$/);
    const humidity = await hoverLegend('env.humidity', 0.5);
    expect(humidity.avg).toMatch(/^[\d.]+ %$/);
    await hoverLegend('temperature', 0.62);
    await page.locator('h2#data-h').scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(ARTIFACTS, 'charts-week-desktop.png') });
  });

  it('shows nested paths as their own latest-value tiles', async () => {
    const tile = page.locator('[data-testid=latest] [data-field="env.humidity"]');
    expect(await tile.locator('.tile-label').textContent()).toBe('Humidity');
    expect(await tile.locator('.tile-value').textContent()).toMatch(/^\d+ %$/);
    expect(await page.locator('[data-testid=latest] [data-field="env.pressure"]').count()).toBe(1);
    expect(await page.locator('[data-testid=latest] [data-field=env]').count()).toBe(0);
    expect(await page.getByText('{"humidity"').count()).toBe(0);
  });

  it('adds new buckets live, without a reload', async () => {
    await page.locator('#range').selectOption('1h');
    await page.waitForFunction(() => document.querySelector('.charts')?.getAttribute('data-interval') === '1m');
    const chart = page.locator('.chart-card[data-path=temperature]');
    await page.waitForFunction(
      () => Number(document.querySelector('.chart-card[data-path=temperature]')?.getAttribute('data-buckets')) > 0,
    );
    const before = Number(await chart.getAttribute('data-buckets'));
    const navigations: string[] = [];
    page.on('framenavigated', (f) => navigations.push(f.url()));
    const res = await ingest(server, {
      device_id: seed.device.id,
      access_token: seed.token,
      data: { temperature: 42.5, env: { humidity: 1 } },
    });
    expect(res.status).toBe(200);
    await page.waitForFunction(
      (n) => Number(document.querySelector('.chart-card[data-path=temperature]')?.getAttribute('data-buckets')) === n + 1,
      before,
      { timeout: 10_000 },
    );
    expect(navigations).toEqual([]);
    const newest = await hoverLegend('temperature', 0.999);
    expect(newest.max).toBe('42.5 °C');
  });

  it('stays readable on a phone', async () => {
    await page.locator('#range').selectOption('7d');
    await page.waitForFunction(() => document.querySelector('.charts')?.getAttribute('data-interval') === '1h');
    await page.setViewportSize({ width: 390, height: 844 });
    // The chart follows the narrower page: no horizontal scrolling.
    await page.waitForFunction(() => {
      const canvas = document.querySelector('.chart-card[data-path=temperature] canvas') as HTMLCanvasElement | null;
      return canvas !== null && canvas.getBoundingClientRect().width <= 390;
    });
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await page.locator('.chart-card[data-path=temperature]').scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(ARTIFACTS, 'charts-week-phone.png') });
  });

  it('keeps the range chosen last when the previous range answers after it', async () => {
    await page.locator('#range').selectOption('24h');
    await page.waitForFunction(() => document.querySelector('.charts')?.getAttribute('data-interval') === '5m');
    // The page opens on 24h again; its aggregate answer is held back until 7d has been shown.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    await page.route(/\/aggregate\?range=24h/, async (route) => {
      await held;
      await route.continue();
    });
    try {
      await page.reload();
      await page.getByRole('heading', { name: 'Weather station' }).waitFor();
      await page.locator('#range').selectOption('7d');
      await page.waitForFunction(() => document.querySelector('.charts')?.getAttribute('data-interval') === '1h');
      const late = page.waitForEvent('requestfinished', (r) => r.url().includes('/aggregate?range=24h'));
      release();
      await late;
      // Time for the late answer's rendering, had it been applied.
      await page.waitForTimeout(300);
      expect(await page.locator('.charts').getAttribute('data-interval')).toBe('1h');
      expect(Number(await page.locator('.chart-card[data-path=temperature]').getAttribute('data-buckets'))).toBeGreaterThanOrEqual(167);
    } finally {
      release();
      await page.unroute(/\/aggregate\?range=24h/);
    }
  });
});
