import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

/**
 * History is written as text with each reading's stored JSON spliced in (docs/architecture.md, "Storage layout");
 * the body must be exactly what parse + serialize would give, whatever the data holds.
 */
describe('GET /v1/devices/:id/telemetry body', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(async () => server?.stop());

  it('returns each reading exactly as sent: nested objects, escapes, unicode, numbers', async () => {
    const { key, device, token } = await seedAccount(server, { plan: 'business' });
    const sent = [
      { temperature: 21.5, humidity: 40 },
      { note: 'a "quoted" \\ back\nslash \u2603 \ud83d\ude00 </script>', env: { t: -1.25e-7, deep: { list: [1, 'two', null, true] } } },
      { big: 12345678901234, small: 0.1, neg: -0, empty: {}, arr: [] },
    ];
    for (const data of sent) expect((await ingest(server, { device_id: device.id, access_token: token, data })).status).toBe(200);

    const res = await server.request(`/v1/devices/${device.id}/telemetry?limit=10`, { key });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('x-ratelimit-limit')).toBeTruthy();
    const text = await res.text();
    const body = JSON.parse(text);
    // Newest first; the data round-trips exactly as JSON.stringify would have written it.
    expect(body.data.map((r: { data: unknown }) => r.data)).toEqual(JSON.parse(JSON.stringify([...sent].reverse())));
    for (const r of body.data) {
      expect(Object.keys(r)).toEqual(['id', 'time', 'data']);
      expect(r.id).toMatch(/^tel_[0-9a-z]+$/);
      expect(r.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }
    expect(body.query).toEqual({ device_id: device.id, requested_range: '24h', range: '24h', limit: 10, data_retention_days: 90 });
    // Same bytes as the parsed body serialized again: nothing but the splice differs.
    expect(text).toBe(JSON.stringify(body));
  });

  it('is {data: [], query} for a device without readings', async () => {
    const { key, device } = await seedAccount(server, { plan: 'starter' });
    const res = await server.request(`/v1/devices/${device.id}/telemetry?range=30d`, { key });
    expect(await res.json()).toEqual({
      data: [],
      query: { device_id: device.id, requested_range: '30d', range: '30d', limit: 100, data_retention_days: 30 },
    });
  });
});
