/**
 * no_data alerts with the server's default silence check: the timing bound (fires within
 * SECONDS + 5 s of the last reading), one event per silence, resolution by the next reading,
 * and the webhook's `type`. Real server, real HTTP receiver.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { history, send, sleep, startHttpReceiver, waitFor, waitForEvents } from './helpers.js';

let server: TestServer;
let receiver: Awaited<ReturnType<typeof startHttpReceiver>>;

beforeAll(async () => {
  receiver = await startHttpReceiver();
  // Default silence check period: this file is the one that holds the 5 s bound to it.
  server = await startTestServer({}, { webhookRetryDelaysMs: [50] });
});
afterAll(async () => {
  await server.stop();
  await receiver.close();
});

const readingTime = async (s: Awaited<ReturnType<typeof seedAccount>>) => (await server.storage.repos.readings.latest(s.device.seq))!.time;

async function alertOf(key: string, id: string) {
  return (await (await server.request(`/v1/alerts/${id}`, { key })).json()).data as Record<string, unknown>;
}

describe('no_data alert on any reading', () => {
  it('fires within SECONDS + 5 s of the last reading, once per silence; the next reading resolves it', async () => {
    const s = await seedAccount(server, { device: { name: 'Freezer' } });
    const alert = await server.services.alerts.create(s.device, {
      name: 'Freezer silent',
      kind: 'no_data',
      value: 10,
      severity: 'critical',
      actions: ['webhook'],
      webhookUrl: `${receiver.base}/hook`,
    });
    expect(alert).toMatchObject({ kind: 'no_data', field: '*', operator: 'no_data', value: 10, state: 'ok' });
    await send(server, s.device, s.token, { t: 1 });
    const last = await readingTime(s);

    const [event] = await waitForEvents(server, alert.id, 1);
    expect((await history(server, s.key, alert.id)).body.data).toEqual([event]);
    const firedAfter = Date.parse(event!.triggered_at as string) - last;
    expect(firedAfter).toBeGreaterThanOrEqual(10_000);
    expect(firedAfter).toBeLessThanOrEqual(15_000);
    // condition_value is the silence in seconds.
    expect(event!.condition_value).toBe(Math.floor(firedAfter / 1000));
    expect(event!.resolved_at).toBeNull();
    expect(await alertOf(s.key, alert.id)).toMatchObject({ state: 'firing', kind: 'no_data' });

    const hook = await waitFor(() => receiver.received.find((r) => JSON.parse(r.body).type === 'triggered'), 'the trigger webhook');
    const body = JSON.parse(hook.body);
    expect(body).toMatchObject({ type: 'triggered', alert: { id: alert.id, device_id: s.device.id }, reading: null });
    expect(body.event).toEqual(event);

    // Still silent: several more checks record nothing (cooldown plays no part).
    await sleep(3_000);
    expect((await history(server, s.key, alert.id)).body.data).toHaveLength(1);

    await send(server, s.device, s.token, { t: 2 });
    const resumed = await readingTime(s);
    const [resolved] = (await history(server, s.key, alert.id)).body.data;
    expect(resolved!.id).toBe(event!.id);
    expect(resolved!.resolved_at).toBe(new Date(resumed).toISOString());
    expect(await alertOf(s.key, alert.id)).toMatchObject({ state: 'ok' });
    const notice = await waitFor(() => receiver.received.find((r) => JSON.parse(r.body).type === 'resolved'), 'the resolution webhook');
    const noticeBody = JSON.parse(notice.body);
    expect(noticeBody.event).toMatchObject({ id: event!.id, resolved_at: resolved!.resolved_at });
    expect(noticeBody.reading.data).toEqual({ t: 2 });

    // A new silence, counted from that reading, is a new event.
    const events = await waitForEvents(server, alert.id, 2);
    expect(events).toHaveLength(2);
    const second = Date.parse(events[0]!.triggered_at as string) - resumed;
    expect(second).toBeGreaterThanOrEqual(10_000);
    expect(second).toBeLessThanOrEqual(15_000);
  }, 60_000);
});
