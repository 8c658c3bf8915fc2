/**
 * no_data rules beside the timing: a paused device and a disabled alert never fire; resuming
 * or enabling starts the silence afresh; a PATH alert counts only readings with a number at
 * that path. The silence check runs every 200 ms here (a start option) so the bounds can be
 * asserted closely; noData.test.ts holds the default period to SECONDS + 5 s.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres, openDataDirStorage } from '../helpers/backend.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { eventsOf, send, sleep, waitForEvents } from './helpers.js';

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({}, { silenceCheckMs: 200 });
});
afterAll(() => server.stop());

const latestTime = async (deviceSeq: number) => (await server.storage.repos.readings.latest(deviceSeq))!.time;

describe('no_data alerts: paused devices, disabled alerts, paths', () => {
  it('never fires for a paused device or a disabled alert; resume and enable count the silence from then', async () => {
    const account = await seedAccount(server, { device: { name: 'watched' } });
    const acc = (await server.services.accounts.list()).find((a) => a.id === account.account.id)!;
    const paused = await server.services.devices.create(acc, { name: 'paused' });
    const quiet = await server.services.devices.create(acc, { name: 'alert disabled' });

    const watched = await server.services.alerts.create(account.device, { name: 'watched silent', kind: 'no_data', value: 10 });
    const onPaused = await server.services.alerts.create(paused.device, { name: 'paused silent', kind: 'no_data', value: 10 });
    const disabled = await server.services.alerts.create(quiet.device, {
      name: 'disabled silent',
      kind: 'no_data',
      value: 10,
      enabled: false,
    });
    // A suspended account's devices cannot send: their silence is no alarm either.
    const suspended = await seedAccount(server, { device: { name: 'of a suspended account' } });
    const onSuspended = await server.services.alerts.create(suspended.device, { name: 'suspended silent', kind: 'no_data', value: 10 });
    await send(server, account.device, account.token, { t: 1 });
    await send(server, paused.device, paused.accessToken, { t: 1 });
    await send(server, quiet.device, quiet.accessToken, { t: 1 });
    await send(server, suspended.device, suspended.token, { t: 1 });
    await server.services.devices.pause(paused.device);
    await server.services.accounts.setStatus(suspended.account.id, 'suspended');

    await waitForEvents(server, watched.id, 1);
    await sleep(2_000);
    expect(await eventsOf(server, onPaused.id)).toEqual([]);
    expect(await eventsOf(server, disabled.id)).toEqual([]);
    expect(await eventsOf(server, onSuspended.id)).toEqual([]);

    // Their last readings are over 10 s old, yet the silence starts at the resume / enabling.
    await server.services.devices.resume(paused.device);
    const resumedAt = (await server.services.devices.getAny(paused.device.id)).resumedAt!;
    await server.services.alerts.setEnabled(disabled, true);
    const enabledAt = (await server.services.alerts.getAny(disabled.id)).enabledAt;
    const accountResumedAt = Date.now();
    await server.services.accounts.setStatus(suspended.account.id, 'active');
    await sleep(1_000);
    expect(await eventsOf(server, onPaused.id)).toEqual([]);
    expect(await eventsOf(server, disabled.id)).toEqual([]);
    expect(await eventsOf(server, onSuspended.id)).toEqual([]);

    const [afterResume] = await waitForEvents(server, onPaused.id, 1);
    const [afterEnable] = await waitForEvents(server, disabled.id, 1);
    const [afterAccountResume] = await waitForEvents(server, onSuspended.id, 1);
    for (const [event, from] of [
      [afterResume!, resumedAt],
      [afterEnable!, enabledAt],
      [afterAccountResume!, accountResumedAt],
    ] as const) {
      const after = Date.parse(event.triggered_at!) - from;
      expect(after).toBeGreaterThanOrEqual(10_000);
      expect(after).toBeLessThan(10_000 + 1_000);
    }
  }, 60_000);

  it('a PATH alert counts only readings with a number at the path; such a reading resolves it', async () => {
    const s = await seedAccount(server);
    const alert = await server.services.alerts.create(s.device, { name: 'no temperature', kind: 'no_data', field: 'env.temp', value: 10 });
    await send(server, s.device, s.token, { env: { temp: 4 } });
    const lastMatch = await latestTime(s.device.seq);
    // Readings keep coming, but none has a number at env.temp.
    for (const data of [{ env: { humidity: 50 } }, { env: { temp: 'n/a' } }, { temp: 4 }]) {
      await sleep(2_500);
      await send(server, s.device, s.token, data);
    }
    const [event] = await waitForEvents(server, alert.id, 1);
    const after = Date.parse(event!.triggered_at!) - lastMatch;
    expect(after).toBeGreaterThanOrEqual(10_000);
    expect(after).toBeLessThan(11_000);

    await send(server, s.device, s.token, { env: { temp: null } });
    expect((await server.services.alerts.getAny(alert.id)).state).toBe('firing');
    await send(server, s.device, s.token, { env: { temp: -18.5 } });
    expect((await server.services.alerts.getAny(alert.id)).state).toBe('ok');
    expect((await eventsOf(server, alert.id))[0]!.resolved_at).toBe(new Date(await latestTime(s.device.seq)).toISOString());
  }, 30_000);

  it('forgets the silences of alerts another process disabled, or deleted with their device', async () => {
    const evaluation = server.services.alertEvaluation;
    await evaluation.checkSilences();
    const before = evaluation.trackedSilences;
    const s = await seedAccount(server);
    const other = await server.services.devices.create((await server.services.accounts.list()).find((a) => a.id === s.account.id)!, {
      name: 'other',
    });
    const disabled = await server.services.alerts.create(s.device, { name: 'to disable', kind: 'no_data', value: 600 });
    await server.services.alerts.create(other.device, { name: 'goes with its device', kind: 'no_data', field: 'x', value: 600 });
    await send(server, s.device, s.token, { x: 1 });
    await send(server, other.device, other.accessToken, { x: 1 });
    await evaluation.checkSilences();
    expect(evaluation.trackedSilences).toBe(before + 2);

    // The admin CLI's way: another connection commits, seen by the next check.
    const admin = await openDataDirStorage(server.dataDir);
    try {
      await admin.services.alerts.setEnabled(await admin.services.alerts.getAny(disabled.id), false);
      await admin.services.devices.remove(other.device);
    } finally {
      await admin.close();
    }
    // SQLite: the next check reads PRAGMA data_version and sees both changes. PostgreSQL: they
    // reach this process as notifications, asynchronously; a check after they are heard forgets.
    const forgotten = async () => {
      await evaluation.checkSilences();
      return evaluation.trackedSilences;
    };
    if (onPostgres) await expect.poll(forgotten, { timeout: 5_000 }).toBe(before);
    else expect(await forgotten()).toBe(before);
  });
});
