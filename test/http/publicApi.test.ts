import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

describe('Public API v1', () => {
  let server: TestServer;
  let a: Awaited<ReturnType<typeof seedAccount>>;
  let b: Awaited<ReturnType<typeof seedAccount>>;

  beforeAll(async () => {
    server = await startTestServer();
    a = await seedAccount(server, { email: 'a@example.com' });
    b = await seedAccount(server, { email: 'b@example.com' });
  });
  afterAll(() => server.stop());

  it('401 without a key, with a malformed key and with an unknown key, body exactly {error}', async () => {
    const missing = 'missing API key (send Authorization: Bearer <key>)';
    for (const [headers, error] of [
      [{}, missing],
      [{ authorization: 'Bearer ' }, missing],
      [{ authorization: 'Basic abc' }, missing],
      [{ authorization: a.key }, missing],
      [{ authorization: 'Bearer tlm_nope' }, 'invalid API key'],
    ] as [Record<string, string>, string][]) {
      const res = await server.request('/v1/devices', { headers });
      expect(res.status).toBe(401);
      const body = await res.json();
      expect(Object.keys(body)).toEqual(['error']);
      expect(body.error).toBe(error);
      expect(res.headers.get('x-ratelimit-limit')).toBeNull();
    }
  });

  it('GET /v1/devices/:id returns the Device shape', async () => {
    const res = await server.request(`/v1/devices/${a.device.id}`, { key: a.key });
    expect(res.status).toBe(200);
    const { data } = await res.json();
    expect(Object.keys(data).sort()).toEqual([
      'created_at',
      'description',
      'id',
      'last_seen',
      'name',
      'settings',
      'status',
      'type',
      'updated_at',
    ]);
    expect(data).toMatchObject({
      id: a.device.id,
      name: 'sensor 1',
      type: 'sensor',
      description: '',
      status: 'active',
      settings: {},
      last_seen: null,
    });
    expect(data.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  });

  it("another account's device or alert is 404, as is an unknown id", async () => {
    for (const path of [
      `/v1/devices/${b.device.id}`,
      `/v1/devices/${b.device.id}/telemetry`,
      `/v1/devices/${b.device.id}/telemetry/latest`,
      '/v1/devices/dev_missing',
    ]) {
      const res = await server.request(path, { key: a.key });
      expect(res.status, path).toBe(404);
      expect(await res.json()).toEqual({ error: expect.any(String) });
    }
    const alert = await server.services.alerts.create(b.device, { name: 'hot', field: 'temp', operator: '>', value: 30 });
    for (const path of [`/v1/alerts/${alert.id}`, `/v1/alerts/${alert.id}/history`]) {
      expect((await server.request(path, { key: a.key })).status, path).toBe(404);
      expect((await server.request(path, { key: b.key })).status, path).toBe(200);
    }
  });

  it('latest is {data: null} before any reading, then the newest reading', async () => {
    const before = await (await server.request(`/v1/devices/${a.device.id}/telemetry/latest`, { key: a.key })).json();
    expect(before).toEqual({ data: null });
    const nested = { temp: 21.5, label: 'lab', env: { humidity: 40, deep: { list: [1, 'two', { three: 3 }], flag: true, none: null } } };
    expect((await ingest(server, { device_id: a.device.id, access_token: a.token, data: { temp: 1 } })).status).toBe(200);
    expect((await ingest(server, { device_id: a.device.id, data: nested }, { authorization: `Bearer ${a.token}` })).status).toBe(200);
    const latest = await (await server.request(`/v1/devices/${a.device.id}/telemetry/latest`, { key: a.key })).json();
    expect(latest.data.data).toEqual(nested);
    expect(latest.data.id).toMatch(/^tel_/);
    const dev = await (await server.request(`/v1/devices/${a.device.id}`, { key: a.key })).json();
    expect(dev.data.last_seen).toBe(latest.data.time);
  });

  it('history is newest first, limit clamps to 1000, query echoes range and limit', async () => {
    for (let i = 0; i < 5; i++) await ingest(server, { device_id: a.device.id, access_token: a.token, data: { seq: i } });
    const res = await server.request(`/v1/devices/${a.device.id}/telemetry?limit=3`, { key: a.key });
    const body = await res.json();
    expect(body.data.map((r: any) => r.data.seq)).toEqual([4, 3, 2]);
    expect(body.query).toEqual({ device_id: a.device.id, requested_range: '24h', range: '24h', limit: 3, data_retention_days: 30 });
    const big = await (await server.request(`/v1/devices/${a.device.id}/telemetry?limit=5000&range=1h`, { key: a.key })).json();
    expect(big.query.limit).toBe(1000);
    expect(big.data.length).toBe(7);
    const times = big.data.map((r: any) => Date.parse(r.time));
    expect([...times].sort((x, y) => y - x)).toEqual(times);
  });

  it('caps a range longer than retention and keeps one equal to it', async () => {
    await server.services.accounts.setPlan(a.account.id, 'starter', { retentionDays: 3 });
    let q = (await (await server.request(`/v1/devices/${a.device.id}/telemetry?range=7d`, { key: a.key })).json()).query;
    expect(q).toMatchObject({ requested_range: '7d', range: '24h', data_retention_days: 3 });
    await server.services.accounts.setPlan(a.account.id, 'starter', { retentionDays: 7 });
    q = (await (await server.request(`/v1/devices/${a.device.id}/telemetry?range=7d`, { key: a.key })).json()).query;
    expect(q).toMatchObject({ requested_range: '7d', range: '7d' });
    q = (await (await server.request(`/v1/devices/${a.device.id}/telemetry?range=30d`, { key: a.key })).json()).query;
    expect(q).toMatchObject({ requested_range: '30d', range: '7d' });
    // Under an hour of retention no range fits: the range stays as asked, and nothing is kept.
    await server.services.accounts.setPlan(a.account.id, 'starter', { retentionDays: 0 });
    const none = await (await server.request(`/v1/devices/${a.device.id}/telemetry?range=24h`, { key: a.key })).json();
    expect(none.query).toMatchObject({ requested_range: '24h', range: '24h', data_retention_days: 0 });
    expect(none.data).toEqual([]);
    await server.services.accounts.setPlan(a.account.id, 'starter');
  });

  it('400 for bad limit, offset, range and status', async () => {
    for (const qs of ['limit=0', 'limit=-1', 'limit=abc', 'limit=1.5', 'offset=-1', 'offset=x', 'status=deleted']) {
      const res = await server.request(`/v1/devices?${qs}`, { key: a.key });
      expect(res.status, qs).toBe(400);
      expect(Object.keys(await res.json())).toEqual(['error']);
    }
    const res = await server.request(`/v1/devices/${a.device.id}/telemetry?range=2d`, { key: a.key });
    expect(res.status).toBe(400);
    // A value outside a fixed set: the answer lists the set.
    expect((await res.json()).error).toBe('querystring/range must be equal to one of the allowed values: 1h, 6h, 24h, 7d, 30d');
    expect((await server.request('/v1/alerts?limit=0', { key: a.key })).status).toBe(400);
  });

  it('pages devices to the end with pagination echo and a status filter', async () => {
    const c = await seedAccount(server, { email: 'c@example.com', plan: 'business' });
    const ids = [c.device.id];
    for (let i = 2; i <= 7; i++) ids.push((await server.services.devices.create(c.account, { name: `d${i}` })).device.id);
    await server.services.devices.pause(await server.services.devices.getAny(ids[1]!));
    await server.services.devices.pause(await server.services.devices.getAny(ids[4]!));
    const seen: string[] = [];
    for (let offset = 0; ; offset += 3) {
      const body = await (await server.request(`/v1/devices?limit=3&offset=${offset}`, { key: c.key })).json();
      expect(body.pagination).toEqual({ total: 7, limit: 3, offset });
      if (body.data.length === 0) break;
      seen.push(...body.data.map((d: any) => d.id));
    }
    expect(seen).toEqual(ids);
    const paused = await (await server.request('/v1/devices?status=paused', { key: c.key })).json();
    expect(paused.data.map((d: any) => d.id)).toEqual([ids[1], ids[4]]);
    expect(paused.pagination).toEqual({ total: 2, limit: 50, offset: 0 });
    const active = await (await server.request('/v1/devices?status=active&limit=500', { key: c.key })).json();
    expect(active.pagination).toEqual({ total: 5, limit: 100, offset: 0 });
  });

  it('usage and keys reflect the account', async () => {
    const usage = (await (await server.request('/v1/account/usage', { key: b.key })).json()).data;
    expect(usage.plan).toMatchObject({ plan: 'starter', status: 'active', device_limit: 10, data_retention_days: 30 });
    expect(usage.devices).toEqual({ total: 1, active: 1, paused: 0, limit: 10 });
    expect(usage.alerts).toEqual({ total: 1, active: 1 });
    expect(usage.telemetry).toEqual({ data_points_24h: 0 });
    const start = new Date(usage.plan.current_period_start);
    expect(start.getUTCDate()).toBe(1);
    expect(new Date(usage.plan.current_period_end).getUTCDate()).toBe(1);
    const keys = (await (await server.request('/v1/account/keys', { key: b.key })).json()).data;
    expect(keys).toHaveLength(1);
    expect(keys[0].key_prefix).toBe(b.key.slice(0, 12));
    expect(JSON.stringify(keys)).not.toContain(b.key);
    expect(keys[0].last_used_at).not.toBeNull();
    expect(keys[0].revoked_at).toBeNull();
  });

  it('free plan and suspended accounts get 403 without rate headers', async () => {
    const free = await seedAccount(server, { email: 'free@example.com', plan: 'free' });
    const res = await server.request('/v1/devices', { key: free.key });
    expect(res.status).toBe(403);
    expect(res.headers.get('x-ratelimit-limit')).toBeNull();
    await server.services.accounts.setStatus(b.account.id, 'suspended');
    expect((await server.request('/v1/devices', { key: b.key })).status).toBe(403);
    await server.services.accounts.setStatus(b.account.id, 'active');
    expect((await server.request('/v1/devices', { key: b.key })).status).toBe(200);
  });

  it('rate limits per minute with headers on every response and 429 + Retry-After', async () => {
    const r = await seedAccount(server, { email: 'rate@example.com' });
    await server.services.accounts.setPlan(r.account.id, 'starter', { ratePerMinute: 3 });
    const statuses: number[] = [];
    let last: Response | null = null;
    for (let i = 0; i < 5; i++) {
      // A 404 counts too (docs/api.md, "Rate limits").
      last = await server.request(i === 1 ? '/v1/devices/dev_nope' : '/v1/devices', { key: r.key });
      statuses.push(last.status);
      expect(last.headers.get('x-ratelimit-limit')).toBe('3');
      expect(last.headers.get('x-ratelimit-daily-limit')).toBe('10000');
    }
    // The minute may roll over mid-test; the limit must have bitten at least once.
    expect(statuses.slice(0, 3)).toEqual([200, 404, 200]);
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(1);
    expect(last!.status).toBe(429);
    expect(await last!.json()).toEqual({ error: 'rate limit exceeded' });
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(last!.headers.get('retry-after'))).toBeLessThanOrEqual(60);
    expect(last!.headers.get('x-ratelimit-remaining')).toBe('0');
  });

  it('daily limit gives 429 with Retry-After up to the next UTC midnight', async () => {
    const r = await seedAccount(server, { email: 'daily@example.com' });
    await server.services.accounts.setPlan(r.account.id, 'starter', { ratePerDay: 2 });
    expect((await server.request('/v1/devices', { key: r.key })).status).toBe(200);
    const second = await server.request('/v1/devices', { key: r.key });
    expect(second.headers.get('x-ratelimit-daily-remaining')).toBe('0');
    const res = await server.request('/v1/devices', { key: r.key });
    expect(res.status).toBe(429);
    const wait = Number(res.headers.get('retry-after'));
    const untilMidnight = (Math.floor(Date.now() / 86_400_000 + 1) * 86_400_000 - Date.now()) / 1000;
    expect(Math.abs(wait - untilMidnight)).toBeLessThan(5);
  });

  it('serves the OpenAPI document of the Public API', async () => {
    const res = await server.request('/v1/openapi.json');
    expect(res.status).toBe(200);
    const doc = await res.json();
    expect(doc.openapi).toMatch(/^3\./);
    // The server listens on an ephemeral port: the document names the bound one, not 0.
    expect(doc.servers).toEqual([{ url: `http://127.0.0.1:${server.httpPort}` }]);
    expect(Object.keys(doc.paths).sort()).toEqual([
      '/v1/account/keys',
      '/v1/account/usage',
      '/v1/alerts',
      '/v1/alerts/{id}',
      '/v1/alerts/{id}/history',
      '/v1/devices',
      '/v1/devices/{id}',
      '/v1/devices/{id}/telemetry',
      '/v1/devices/{id}/telemetry/aggregate',
      '/v1/devices/{id}/telemetry/latest',
    ]);
    // Shared schemas by name, and every reference resolves to one of them.
    const names = Object.keys(doc.components.schemas).sort();
    expect(names).toEqual([
      'AccountUsage',
      'AggregateBucket',
      'Alert',
      'AlertTriggerEvent',
      'ApiKey',
      'Device',
      'Error',
      'TelemetryReading',
    ]);
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map((m) => m[1]);
    expect(refs.length).toBeGreaterThan(10);
    for (const name of refs) expect(names).toContain(name);
    expect(JSON.stringify(doc.paths['/v1/devices'])).toContain('"$ref":"#/components/schemas/Device"');
    // What a generated client needs: one operationId each, the rate headers of a 200, the 414
    // of an over-long id, and the page sizes (default, and the most a page holds).
    const operations = Object.entries(doc.paths as Record<string, { get: any }>).map(([p, item]) => [p, item.get] as const);
    const ids = operations.map(([, op]) => op.operationId);
    expect(ids.every((id) => typeof id === 'string' && /^[a-z][A-Za-z]+$/.test(id))).toBe(true);
    expect(new Set(ids).size).toBe(operations.length);
    for (const [p, op] of operations) {
      expect(Object.keys(op.responses[200].headers ?? {}).sort(), p).toEqual([
        'X-RateLimit-Daily-Limit',
        'X-RateLimit-Daily-Remaining',
        'X-RateLimit-Limit',
        'X-RateLimit-Remaining',
      ]);
      expect('414' in op.responses, p).toBe(p.includes('{id}'));
    }
    const limitOf = (p: string) => doc.paths[p].get.parameters.find((x: { name: string }) => x.name === 'limit');
    expect(limitOf('/v1/devices')).toMatchObject({
      schema: { default: 50 },
      description: expect.stringContaining('larger one than 100 gives 100'),
    });
    expect(limitOf('/v1/devices/{id}/telemetry')).toMatchObject({
      schema: { default: 100 },
      description: expect.stringContaining('1000 gives 1000'),
    });
  });

  it('unknown paths give 404 {error} after the key, plan and rate limit checks', async () => {
    const res = await server.request('/v1/nothing', { key: a.key });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: 'not found' });
    // Counted like any request with a key, so it carries the rate headers.
    expect(res.headers.get('x-ratelimit-remaining')).toMatch(/^\d+$/);
    expect((await server.request('/v1/nothing')).status).toBe(401);
    const free = await seedAccount(server, { email: 'free-404@example.com', plan: 'free' });
    expect((await server.request('/v1/nothing', { key: free.key })).status).toBe(403);
  });

  it('ignores limit and offset on endpoints that take neither, and names the bound where they are taken', async () => {
    const usage = await server.request('/v1/account/usage?limit=abc&offset=x', { key: a.key });
    expect(usage.status).toBe(200);
    // Anything but a whole decimal number in range gets the same answer, whatever Number() makes of it.
    for (const bad of ['1e309', '0', '-1', '1.5', 'abc', '0x10', '%2010', '1e2', '', '9007199254740992', 'limit']) {
      const limit = await server.request(`/v1/devices?limit=${bad}`, { key: a.key });
      expect(limit.status, bad).toBe(400);
      expect(await limit.json(), bad).toEqual({ error: 'limit must be a positive integer of at most 2^53 - 1' });
    }
    for (const bad of ['1e309', '-1', '0x10', 'x']) {
      const offset = await server.request(`/v1/devices?offset=${bad}`, { key: a.key });
      expect(await offset.json(), bad).toEqual({ error: 'offset must be a non-negative integer of at most 2^53 - 1' });
    }
    // Repeated: the query parser gives an array.
    expect((await server.request('/v1/devices?limit=1&limit=2', { key: a.key })).status).toBe(400);
    const fine = await (await server.request('/v1/devices?limit=1&offset=0', { key: a.key })).json();
    expect(fine.pagination).toMatchObject({ limit: 1, offset: 0 });
  });
});
