/**
 * no_data across restarts of the real server on one data dir: a silence that began before
 * the restart counts from the last reading (of any kind, and with a number at the path),
 * and an alert firing at shutdown does not fire again after the restart.
 */

import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { SEARCH_ROWS_PER_CHECK } from '../../src/domain/alerts/evaluator.js';
import { onPostgres } from '../helpers/backend.js';
import { seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { eventsOf, send, sleep, waitForEvents } from './helpers.js';

const dataDir = tempDir();
const start = () => startTestServer({ 'data-dir': dataDir }, { silenceCheckMs: 200 });
let server: TestServer | null = null;

afterAll(async () => {
  await server?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('no_data across a restart', () => {
  it('counts a silence from the last reading before the restart, and never fires it twice', async () => {
    server = await start();
    const s = await seedAccount(server);
    const any = await server.services.alerts.create(s.device, { name: 'silent', kind: 'no_data', value: 10 });
    const path = await server.services.alerts.create(s.device, { name: 'no temp', kind: 'no_data', field: 'env.temp', value: 10 });
    await send(server, s.device, s.token, { env: { temp: 3 } });
    const lastTemp = (await server.storage.repos.readings.latest(s.device.seq))!.time;
    await sleep(2_000);
    await send(server, s.device, s.token, { env: { door: 1 } });
    const lastAny = (await server.storage.repos.readings.latest(s.device.seq))!.time;
    await server.stop();

    // Down for longer than the gap a restart-based count would hide: counted from the
    // restart, the alerts would fire 17 s and more after their last reading.
    await sleep(7_000);
    server = await start();
    const [pathEvent] = await waitForEvents(server, path.id, 1);
    const [anyEvent] = await waitForEvents(server, any.id, 1);
    const pathAfter = Date.parse(pathEvent!.triggered_at!) - lastTemp;
    const anyAfter = Date.parse(anyEvent!.triggered_at!) - lastAny;
    expect(pathAfter).toBeGreaterThanOrEqual(10_000);
    expect(pathAfter).toBeLessThan(11_000);
    expect(anyAfter).toBeGreaterThanOrEqual(10_000);
    expect(anyAfter).toBeLessThan(11_000);

    // Restart while both fire: the state persisted, so nothing fires again.
    await server.stop();
    server = await start();
    await sleep(2_000);
    expect(await eventsOf(server, any.id)).toHaveLength(1);
    expect(await eventsOf(server, path.id)).toHaveLength(1);
    expect((await server.services.alerts.getAny(any.id)).state).toBe('firing');

    // The next reading after the restart resolves the firing that began before it.
    await send(server, s.device, s.token, { env: { temp: 4 } });
    expect((await eventsOf(server, any.id))[0]!.resolved_at).not.toBeNull();
    expect((await eventsOf(server, path.id))[0]!.resolved_at).not.toBeNull();
    expect((await server.services.alerts.getAny(path.id)).state).toBe('ok');
  }, 60_000);
});

describe('no_data down for longer than its SECONDS', () => {
  it('reports the whole silence, counted from the last matching reading before the restart', async () => {
    const dir = tempDir();
    const at = () => startTestServer({ 'data-dir': dir }, { silenceCheckMs: 200 });
    let running: TestServer | null = await at();
    try {
      const s = await seedAccount(running);
      const any = await running.services.alerts.create(s.device, { name: 'silent', kind: 'no_data', value: 10 });
      const path = await running.services.alerts.create(s.device, { name: 'no temp', kind: 'no_data', field: 'env.temp', value: 10 });
      await send(running, s.device, s.token, { env: { temp: 3 } });
      const lastTemp = (await running.storage.repos.readings.latest(s.device.seq))!.time;
      await send(running, s.device, s.token, { env: { door: 1 } });
      await running.stop();
      running = null;
      // Due while the server is down: both fire as it starts, with the silence as it is then.
      await sleep(13_000);
      running = await at();
      const [pathEvent] = await waitForEvents(running, path.id, 1);
      const [anyEvent] = await waitForEvents(running, any.id, 1);
      for (const event of [pathEvent!, anyEvent!]) {
        const silence = (Date.parse(event.triggered_at!) - lastTemp) / 1000;
        expect(event.condition_value).toBeGreaterThanOrEqual(13);
        expect(Math.abs(event.condition_value! - silence)).toBeLessThan(1.5);
      }
    } finally {
      await running?.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('no_data after a start, on a long history without a match', () => {
  it('searches the readings for the latest match a bounded number of rows per check, then counts from it', async () => {
    const HOUR = 3_600_000;
    const T0 = Date.UTC(2026, 2, 1, 12);
    const clock = { t: T0 - 6 * HOUR, now: () => clock.t };
    // The timer stays out of the way: this test runs each check itself.
    const server = await startTestServer({}, { clock, silenceCheckMs: 24 * HOUR });
    try {
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, { name: 'no temp', kind: 'no_data', field: 'temp', value: 6 * 3_600 });
      // One reading with the path five hours before T0, then a long run of readings without it
      // (stored directly: the evaluator never saw them, as after a restart).
      const lastTemp = T0 - 5 * HOUR;
      const others = Math.floor(SEARCH_ROWS_PER_CHECK * 2.5);
      await Promise.all(
        [
          { deviceSeq: s.device.seq, time: lastTemp, data: '{"temp":1}' },
          ...Array.from({ length: others }, (_, i) => ({ deviceSeq: s.device.seq, time: lastTemp + 1_000 * (i + 1), data: '{"x":1}' })),
        ].map((r) => server.storage.writer.append(r)),
      );
      clock.t = T0;
      const evaluation = server.services.alertEvaluation;
      const tracked = evaluation.trackedSilences;
      let checks = 0;
      while (evaluation.trackedSilences === tracked) {
        await evaluation.checkSilences();
        checks++;
        expect(checks).toBeLessThanOrEqual(3);
      }
      // No check read the whole run of readings.
      expect(checks).toBe(3);
      expect(await eventsOf(server, alert.id)).toEqual([]);

      // Found: the silence counts from that reading, not from the window's start (T0 - 6 h).
      clock.t = lastTemp + 6 * HOUR - 1_000;
      await evaluation.checkSilences();
      expect(await eventsOf(server, alert.id)).toEqual([]);
      clock.t = lastTemp + 6 * HOUR;
      await evaluation.checkSilences();
      // On PostgreSQL other nodes may ingest, so before firing the check also asks the
      // database for a newer match, within the same bounded budget: a few more checks.
      for (let i = 0; onPostgres && i < 3 && (await eventsOf(server, alert.id)).length === 0; i++) await evaluation.checkSilences();
      const [event] = await eventsOf(server, alert.id);
      expect(event!.triggered_at).toBe(new Date(lastTemp + 6 * HOUR).toISOString());
    } finally {
      await server.stop();
    }
  });
});
