/**
 * The dashboard's storage banner in real headless Chromium: shown on every page while the
 * server refuses new readings (with the reason and the free disk space), gone once writes are
 * taken again. The faults are real: a write lock held by another connection past the busy
 * timeout, and a --min-free-disk above the disk's free space.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres, sqliteDb } from '../helpers/backend.js';
import { launchChromium } from '../helpers/browser.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

const ARTIFACTS = path.resolve('test-artifacts');
const PASSWORD = 'correct horse battery';
let browser: Browser;
const servers: TestServer[] = [];

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  for (const s of servers) await s.stop();
});

async function signedIn(
  overrides: Record<string, unknown>,
): Promise<{ server: TestServer; page: Page; seed: Awaited<ReturnType<typeof seedAccount>> }> {
  const server = await startTestServer(overrides);
  servers.push(server);
  const seed = await seedAccount(server);
  await server.services.accounts.setPassword(seed.account.seq, PASSWORD);
  const page = await (await browser.newContext({ viewport: { width: 1200, height: 800 } })).newPage();
  page.setDefaultTimeout(8_000);
  await page.goto(server.httpUrl);
  await page.getByLabel('Email').fill(seed.account.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices' }).waitFor();
  return { server, page, seed };
}

describe('storage banner', () => {
  // A busy database is SQLite's write lock, held here by a second connection to its file.
  it.skipIf(onPostgres)('appears while writes fail (database busy) and goes once a write commits again', async () => {
    const { server, page, seed } = await signedIn({ 'min-free-disk': '0' });
    const banner = page.locator('#storage-banner');
    expect(await banner.isHidden()).toBe(true);

    const other = new Database(path.join(server.dataDir, 'telemetryd.db'));
    try {
      sqliteDb(server.storage).pragma('busy_timeout = 200');
      other.exec('BEGIN IMMEDIATE');
      const refused = await ingest(server, { device_id: seed.device.id, access_token: seed.token, data: { t: 1 } });
      expect(refused.status).toBe(503);
      other.exec('COMMIT');
    } finally {
      other.close();
    }
    // Any page change asks again (and every 15 s).
    await page.getByRole('link', { name: 'Alerts' }).click();
    await banner.waitFor({ state: 'visible' });
    const text = (await banner.textContent()) ?? '';
    expect(text).toContain('New readings and snapshots are being refused.');
    expect(text).toContain('Storage unavailable: database busy.');
    expect(text).toMatch(/Free disk space: [\d.]+ MB\./);
    await page.screenshot({ path: path.join(ARTIFACTS, 'storage-banner-busy.png') });

    expect((await ingest(server, { device_id: seed.device.id, access_token: seed.token, data: { t: 2 } })).status).toBe(200);
    await page.getByRole('link', { name: 'Devices' }).click();
    await banner.waitFor({ state: 'hidden' });
  });

  it('shows low disk space below --min-free-disk, on every page', async () => {
    const { page } = await signedIn({ 'min-free-disk': '1000000000' });
    const banner = page.getByRole('alert');
    await banner.waitFor({ state: 'visible' });
    // On PostgreSQL the watermark guards the snapshot files only: the database's disk is its server's.
    expect(await banner.textContent()).toMatch(
      onPostgres
        ? /Storage unavailable: low disk space: [\d.]+ MB free for the snapshots directory, below the minimum of [\d.]+ MB\./
        : /Storage unavailable: low disk space: [\d.]+ MB free for the data directory, below the minimum of [\d.]+ MB\. Free disk space: [\d.]+ MB\./,
    );
    await page.screenshot({ path: path.join(ARTIFACTS, 'storage-banner-low-disk.png') });
    await page.getByRole('link', { name: 'Settings' }).click();
    await page.getByRole('heading', { name: 'Settings' }).waitFor();
    expect(await banner.isVisible()).toBe(true);
  });
});
