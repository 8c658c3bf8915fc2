import { existsSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAY_MS } from '../../src/time.js';
import { countAllSnapshots } from '../helpers/backend.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { fetchSnapshot, upload } from './helpers.js';
import { tinyJpeg, tinyPng } from './images.js';

/** A clock the test moves by hand: the server's services (quota day, retention) run on it. */
class TestClock {
  constructor(public ms: number) {}
  now = () => this.ms;
  advance(ms: number) {
    this.ms += ms;
  }
}

describe('snapshot retention and the UTC day of the quota, on an injected clock', () => {
  const start = Date.UTC(2026, 0, 10, 12, 0, 0);
  const clock = new TestClock(start);
  let server: TestServer;
  let starter: Awaited<ReturnType<typeof seedAccount>>;
  let business: Awaited<ReturnType<typeof seedAccount>>;

  const fileOf = (deviceId: string, id: string, ext: string) => path.join(server.dataDir, 'snapshots', deviceId, `${id}.${ext}`);
  const rows = () => countAllSnapshots(server.storage);

  beforeAll(async () => {
    server = await startTestServer({}, { clock });
    starter = await seedAccount(server, { plan: 'starter', device: { name: 'cam s', snapshotsEnabled: true } });
    business = await seedAccount(server, { plan: 'business', device: { name: 'cam b', snapshotsEnabled: true } });
  });
  afterAll(() => server.stop());

  it("deletes files and rows past the plan's snapshot retention, and only those; the URL then gives 404", async () => {
    const old = await upload(server, starter.device.id, starter.token, tinyJpeg());
    const kept = await upload(server, business.device.id, business.token, tinyPng(), 'image/png');
    expect([old.status, kept.status]).toEqual([200, 200]);
    clock.advance(DAY_MS);
    const young = await upload(server, starter.device.id, starter.token, tinyJpeg());
    expect(young.status).toBe(200);
    expect(await rows()).toBe(3);

    // Starter keeps 30 days: at exactly 30 days the first one is still there.
    clock.ms = start + 30 * DAY_MS;
    expect(await server.services.snapshots.purgeExpiredSnapshots()).toBe(0);
    expect((await fetchSnapshot(server, old.body.url, starter.key)).status).toBe(200);

    // One millisecond later it has expired: unreadable at once, then deleted by the job.
    clock.advance(1);
    expect((await fetchSnapshot(server, old.body.url, starter.key)).status).toBe(404);
    expect(existsSync(fileOf(starter.device.id, old.body.id, 'jpg'))).toBe(true);
    expect(await server.services.snapshots.purgeExpiredSnapshots()).toBe(1);
    expect(existsSync(fileOf(starter.device.id, old.body.id, 'jpg'))).toBe(false);
    expect(await rows()).toBe(2);

    // The younger starter snapshot and the business one (365 days) are untouched.
    expect((await fetchSnapshot(server, young.body.url, starter.key)).status).toBe(200);
    expect((await fetchSnapshot(server, kept.body.url, business.key)).status).toBe(200);

    clock.ms = start + 366 * DAY_MS;
    expect(await server.services.snapshots.purgeExpiredSnapshots()).toBe(2);
    expect(await rows()).toBe(0);
    expect(readdirSync(path.join(server.dataDir, 'snapshots', business.device.id))).toEqual([]);
    expect((await fetchSnapshot(server, kept.body.url, business.key)).status).toBe(404);
  });

  it('works through many expired snapshots in small batches', async () => {
    const acc = await seedAccount(server, { device: { name: 'cam many', snapshotsEnabled: true } });
    await server.services.accounts.setPlan(acc.account.id, 'starter', { snapshotsPerDay: 100, snapshotRetentionDays: 1 });
    const ups = [];
    for (let i = 0; i < 7; i++) ups.push(await upload(server, acc.device.id, acc.token, tinyJpeg(`n${i}`)));
    expect(ups.every((u) => u.status === 200)).toBe(true);
    clock.advance(DAY_MS + 1);
    expect(await server.services.snapshots.purgeExpiredSnapshots(clock.now(), 3)).toBe(7);
    expect(readdirSync(path.join(server.dataDir, 'snapshots', acc.device.id))).toEqual([]);
    expect(await rows()).toBe(0);
  });

  it("the scheduled job runs on the services' clock and removes expired snapshots by itself", async () => {
    const acc = await seedAccount(server, { device: { name: 'cam timer', snapshotsEnabled: true } });
    await server.services.accounts.setPlan(acc.account.id, 'starter', { snapshotRetentionDays: 2 });
    const up = await upload(server, acc.device.id, acc.token, tinyJpeg());
    const file = fileOf(acc.device.id, up.body.id, 'jpg');
    // Temporary files a crash left mid-write: the first run clears old ones, not fresh ones.
    const staleTemp = path.join(path.dirname(file), '.crashed.0000.tmp');
    const freshTemp = path.join(path.dirname(file), '.inflight.0000.tmp');
    writeFileSync(staleTemp, 'partial');
    writeFileSync(freshTemp, 'partial');
    const twoHoursAgo = (Date.now() - 2 * 3_600_000) / 1000;
    utimesSync(staleTemp, twoHoursAgo, twoHoursAgo);
    clock.advance(2 * DAY_MS + 1);
    // The one retention job (readings and snapshots), restarted on a short schedule.
    await server.retention.stop();
    server.retention.start({ firstRunDelayMs: 1, intervalMs: 50 });
    try {
      await expect.poll(() => existsSync(file), { timeout: 5_000 }).toBe(false);
    } finally {
      await server.retention.stop();
    }
    expect((await fetchSnapshot(server, up.body.url, acc.key)).status).toBe(404);
    expect(existsSync(staleTemp)).toBe(false);
    expect(existsSync(freshTemp)).toBe(true);
  });

  it('the daily quota resets at midnight UTC, and Retry-After counts down to it', async () => {
    const q = await seedAccount(server, { device: { name: 'cam quota', snapshotsEnabled: true } });
    await server.services.accounts.setPlan(q.account.id, 'starter', { snapshotsPerDay: 1 });
    const day = Math.floor(clock.now() / DAY_MS) * DAY_MS;
    clock.ms = day + DAY_MS - 60_000; // 23:59:00 UTC
    expect((await upload(server, q.device.id, q.token, tinyJpeg())).status).toBe(200);
    const refused = await upload(server, q.device.id, q.token, tinyJpeg());
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('60');
    clock.ms = day + DAY_MS; // 00:00:00 UTC the next day
    expect((await upload(server, q.device.id, q.token, tinyJpeg())).status).toBe(200);
    expect((await upload(server, q.device.id, q.token, tinyJpeg())).status).toBe(429);
  });
});
