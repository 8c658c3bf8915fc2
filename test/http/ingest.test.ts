import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { countAllReadings, onPostgres, storedRows } from '../helpers/backend.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

describe('HTTP ingest', () => {
  let server: TestServer;
  let s: Awaited<ReturnType<typeof seedAccount>>;

  const count = () => countAllReadings(server.storage);

  beforeAll(async () => {
    server = await startTestServer();
    s = await seedAccount(server, { email: 'ingest@example.com' });
  });
  afterAll(() => server.stop());

  it('accepts the token in the body or as Bearer, stamps a millisecond server time, sets last_seen', async () => {
    const before = Date.now();
    const r1 = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { temp: 20 } });
    expect(r1).toMatchObject({ status: 200, body: { success: true } });
    const r2 = await ingest(
      server,
      { device_id: s.device.id, data: { temp: 21, time: 'device clock ignored' } },
      { authorization: `Bearer ${s.token}` },
    );
    expect(r2.status).toBe(200);
    const latest = (await (await server.request(`/v1/devices/${s.device.id}/telemetry/latest`, { key: s.key })).json()).data;
    expect(latest.data).toEqual({ temp: 21, time: 'device clock ignored' });
    expect(latest.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(Date.parse(latest.time)).toBeGreaterThanOrEqual(before);
    expect(Date.parse(latest.time)).toBeLessThanOrEqual(Date.now());
    const device = (await (await server.request(`/v1/devices/${s.device.id}`, { key: s.key })).json()).data;
    expect(device.last_seen).toBe(latest.time);

    // An empty or null access_token beside a Bearer header counts as not sent; a wrong one in
    // the body wins over a right header; one that is not a string is malformed.
    const bearer = { authorization: `Bearer ${s.token}` };
    for (const access_token of ['', null]) {
      expect((await ingest(server, { device_id: s.device.id, access_token, data: { temp: 22 } }, bearer)).status).toBe(200);
    }
    expect((await ingest(server, { device_id: s.device.id, access_token: 'x', data: { temp: 23 } }, bearer)).status).toBe(401);
    expect(await ingest(server, { device_id: s.device.id, access_token: 5, data: { temp: 24 } }, bearer)).toMatchObject({
      status: 400,
      body: { success: false, error: 'access_token must be a string' },
    });
  });

  it('acknowledges only committed readings: the row is there when the 200 arrives', async () => {
    const n = await count();
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => ingest(server, { device_id: s.device.id, access_token: s.token, data: { i } })),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(await count()).toBe(n + 50);
  });

  it('stores data as sent when the body spells it plainly, re-serialized when it holds a duplicate key or an escape', async () => {
    const { device, token, key } = await seedAccount(server, { email: 'as-sent@example.com' });
    const send = (body: string, type = 'application/json') =>
      server.request('/api/devices/ingest', { method: 'POST', headers: { 'content-type': type }, body });
    const bodies = [
      `{ "device_id": "${device.id}", "data" : { "t" : 1.50, "s": "a,b}" } , "access_token": "${token}" }`,
      `{"device_id":"${device.id}","access_token":"${token}","data":{"t":1,"t":2}}`,
      `{"device_id":"${device.id}","access_token":"${token}","data":{"s":"\u0041"}}`,
    ];
    for (const body of bodies) expect((await send(body)).status).toBe(200);
    expect((await send(`{"data":[1, 2] ,"device_id":"${device.id}","access_token":"${token}"}`, 'text/plain')).status).toBe(400);
    expect((await send(`{"data":{"n": 7e0},"device_id":"${device.id}","access_token":"${token}"}`, 'text/plain')).status).toBe(200);
    const charset = 'application/json; charset=utf-8';
    expect((await send(`{"data":{"u": 1.0},"device_id":"${device.id}","access_token":"${token}"}`, charset)).status).toBe(200);
    const stored = (await storedRows(server.storage, device.seq)).map((r) => r.data);
    expect(stored).toEqual(['{ "t" : 1.50, "s": "a,b}" }', '{"t":2}', '{"s":"A"}', '{"n": 7e0}', '{"u": 1.0}']);
    // The API serves the values, whatever their spelling.
    const history = await (await server.request(`/v1/devices/${device.id}/telemetry?limit=10`, { key })).json();
    expect(history.data.map((r: { data: unknown }) => r.data)).toEqual([{ u: 1 }, { n: 7 }, { s: 'A' }, { t: 2 }, { t: 1.5, s: 'a,b}' }]);
  });

  it('400 when device_id, access_token or data is missing, with {success:false, error}', async () => {
    const cases: unknown[] = [
      { access_token: s.token, data: { a: 1 } },
      { device_id: s.device.id, data: { a: 1 } },
      { device_id: s.device.id, access_token: s.token },
    ];
    const n = await count();
    for (const body of cases) {
      const r = await ingest(server, body);
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ success: false, error: expect.stringMatching(/device_id|access_token|data/) });
    }
    expect(await count()).toBe(n);
  });

  it('400 for a body that is not JSON and for data that is not an object', async () => {
    const n = await count();
    for (const raw of ['{"device_id": ', 'not json', '[1,2]', '"text"', 'null']) {
      const r = await ingest(server, raw);
      expect(r.status, raw).toBe(400);
      expect(r.body.success).toBe(false);
    }
    for (const data of [[1, 2], 'string', null, 42]) {
      const r = await ingest(server, { device_id: s.device.id, access_token: s.token, data });
      expect(r.status, JSON.stringify(data)).toBe(400);
      expect(r.body.error).toMatch(/object/);
    }
    expect(await count()).toBe(n);
  });

  it('refuses prototype-poisoning keys', async () => {
    const r = await ingest(server, `{"device_id":"${s.device.id}","access_token":"${s.token}","data":{"__proto__":{"admin":true}}}`);
    expect(r.status).toBe(400);
  });

  it('parses JSON sent without a JSON content type (curl -d)', async () => {
    const res = await server.request('/api/devices/ingest', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: JSON.stringify({ device_id: s.device.id, access_token: s.token, data: { via: 'form' } }),
    });
    expect(res.status).toBe(200);
  });

  it('401 for an unknown device or a wrong token; 403 when paused or suspended', async () => {
    expect((await ingest(server, { device_id: 'dev_unknown', access_token: s.token, data: { a: 1 } })).status).toBe(401);
    const wrong = await ingest(server, { device_id: s.device.id, access_token: 'x'.repeat(40), data: { a: 1 } });
    expect(wrong).toMatchObject({ status: 401, body: { success: false } });
    const other = await seedAccount(server, { email: 'other@example.com' });
    // A valid token of another device is still wrong for this device id.
    expect((await ingest(server, { device_id: s.device.id, access_token: other.token, data: { a: 1 } })).status).toBe(401);

    await server.services.devices.pause(s.device);
    const paused = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { a: 1 } });
    expect(paused).toMatchObject({ status: 403, body: { success: false, error: 'device is paused' } });
    await server.services.devices.resume(s.device);

    await server.services.accounts.setStatus(s.account.id, 'suspended');
    expect((await ingest(server, { device_id: s.device.id, access_token: s.token, data: { a: 1 } })).status).toBe(403);
    await server.services.accounts.setStatus(s.account.id, 'active');
    expect((await ingest(server, { device_id: s.device.id, access_token: s.token, data: { a: 1 } })).status).toBe(200);
  });

  it('413 above 65,536 bytes of body; exactly 65,536 is accepted', async () => {
    const envelope = JSON.stringify({ device_id: s.device.id, access_token: s.token, data: { pad: '' } });
    const pad = 'x'.repeat(65_536 - envelope.length);
    const exact = JSON.stringify({ device_id: s.device.id, access_token: s.token, data: { pad } });
    expect(Buffer.byteLength(exact)).toBe(65_536);
    expect((await ingest(server, exact)).status).toBe(200);
    const over = JSON.stringify({ device_id: s.device.id, access_token: s.token, data: { pad: `${pad}x` } });
    const r = await ingest(server, over);
    expect(r.status).toBe(413);
    expect(r.body).toEqual({ success: false, error: 'request body is too large (limit 65,536 bytes)' });
  });

  it('strict schema: unknown fields are 400 naming them, counted as rejected; declared fields pass', async () => {
    const free = await seedAccount(server, {
      email: 'strict@example.com',
      plan: 'free',
      device: { name: 'strict', fields: [{ name: 'temp', label: 'Temperature', unit: '°C' }, { name: 'hum' }] },
    });
    const device = await server.services.devices.getAny(free.device.id);
    expect(device.schemaMode).toBe('strict');
    const ok = await ingest(server, { device_id: device.id, access_token: free.token, data: { temp: 1, hum: 2 } });
    expect(ok.status).toBe(200);
    const bad = await ingest(server, { device_id: device.id, access_token: free.token, data: { temp: 1, pressure: 3, wind: 4 } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toContain('pressure');
    expect(bad.body.error).toContain('wind');
    // Counted off the answer's path: on PostgreSQL the count may commit just after the 400.
    const after = await vi.waitFor(async () => {
      const d = await server.services.devices.getAny(device.id);
      expect(d.rejectedCount).toBe(1);
      return d;
    });
    expect(after.lastRejectionReason).toContain('pressure');
  });

  it('strict schema: a dotted declared field is taken nested (what alerts read) or as its literal key; other nested keys are named', async () => {
    const free = await seedAccount(server, {
      email: 'strict-dotted@example.com',
      plan: 'free',
      device: { name: 'strict dotted', fields: [{ name: 'temp' }, { name: 'env.humidity' }, { name: 'a.b.c' }, { name: 'raw' }] },
    });
    const send = (data: Record<string, unknown>) => ingest(server, { device_id: free.device.id, access_token: free.token, data });
    for (const data of [
      { temp: 1, env: { humidity: 40 } },
      { 'env.humidity': 41 },
      { a: { b: { c: 2 } }, raw: { anything: { below: 1 } } },
      { a: { 'b.c': 3 } },
      { env: {} },
    ]) {
      const r = await send(data);
      expect(r.status, JSON.stringify(data)).toBe(200);
    }
    const refusals: [Record<string, unknown>, string][] = [
      [{ env: { humidity: 40, pressure: 1000 } }, 'env.pressure'],
      [{ env: 40 }, 'env'],
      [{ env: [40] }, 'env'],
      [{ a: { b: { c: 1, d: 2 }, e: 3 } }, 'a.b.d, a.e'],
      [{ envx: { humidity: 1 }, temp: { x: 1 } }, 'envx'],
    ];
    for (const [data, named] of refusals) {
      const r = await send(data);
      expect(r.status, JSON.stringify(data)).toBe(400);
      expect(r.body.error, JSON.stringify(data)).toBe(`unknown fields for strict schema: ${named}`);
    }
  });

  it('flexible schema: at most the plan field limit of top-level keys', async () => {
    await server.services.accounts.setPlan(s.account.id, 'starter', { fieldLimit: 3 });
    expect(
      (await ingest(server, { device_id: s.device.id, access_token: s.token, data: { a: 1, b: 2, c: { d: 1, e: 2, f: 3 } } })).status,
    ).toBe(200);
    const r = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { a: 1, b: 2, c: 3, d: 4 } });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/4 fields.*allows 3/);
    await server.services.accounts.setPlan(s.account.id, 'starter');
  });

  it('Device API errors for unknown routes keep the device error shape', async () => {
    const res = await server.request('/api/devices/nothing', { method: 'POST' });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ success: false, error: 'not found' });
  });

  it('/healthz reports the database and which backend holds it', async () => {
    const res = await server.request('/healthz');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', database: 'ok', storage: onPostgres ? 'postgres' : 'sqlite' });
  });
});
