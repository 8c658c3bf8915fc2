import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import {
  type Bucket,
  expectedBuckets,
  expectSameBuckets,
  insertReadings,
  type Reading,
  seededRandom,
  telemetryAll,
} from './aggregateHelpers.js';

const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;

/** A fixed instant a little after a UTC minute boundary, so alignment is checkable. */
const NOW = Date.UTC(2025, 2, 14, 15, 26, 30, 250);

describe('GET /v1/devices/:id/telemetry/aggregate', () => {
  let server: TestServer;
  const clock = { t: NOW, now: () => clock.t };
  let a: Awaited<ReturnType<typeof seedAccount>>;
  let b: Awaited<ReturnType<typeof seedAccount>>;
  let readings: Reading[];

  beforeAll(async () => {
    server = await startTestServer({}, { clock });
    a = await seedAccount(server, { email: 'agg-a@example.com', plan: 'enterprise' });
    b = await seedAccount(server, { email: 'agg-b@example.com' });
    // 29 days of readings with nested, mixed and non-numeric values, at irregular times
    // (at most 1,000, so /telemetry can list every one of them).
    const rnd = seededRandom(7);
    readings = [];
    let t = NOW - 29 * DAY;
    while (readings.length < 940) {
      t += Math.floor(rnd() * 90 * MIN) + 1;
      if (t > NOW - 2 * MIN) break;
      const i = readings.length;
      readings.push({
        time: t,
        data: {
          temp: Math.round((15 + rnd() * 10) * 100) / 100,
          env: { humidity: Math.round(rnd() * 1000) / 10, deep: { x: i % 7 === 0 ? 'n/a' : -i / 3 } },
          count: i,
          list: [1, 2, i],
          label: 'lab',
          ok: true,
          none: null,
          numeric_text: '42',
          ...(i % 5 === 0 ? { sometimes: i * 1.5 } : {}),
        },
      });
    }
    await insertReadings(server, a.device.seq, readings);
    // Roll up everything but the last minutes, then add readings the job has not seen: the
    // answer must combine rollups with raw readings at both ends.
    await server.services.rollups.runOnce();
    const fresh: Reading[] = [
      { time: NOW - 40_000, data: { temp: 99.5, env: { humidity: 1 } } },
      { time: NOW - 1_000, data: { temp: -3, env: { humidity: 2.25 } } },
    ];
    await insertReadings(server, a.device.seq, fresh);
    readings.push(...fresh);
  });
  afterAll(() => server.stop());

  const get = (path: string, key = a.key) => server.request(path, { key });

  it('equals what the readings from /telemetry give, for every range and its default interval', async () => {
    const expectedIntervals = { '1h': '1m', '6h': '1m', '24h': '5m', '7d': '1h', '30d': '6h' } as const;
    for (const [range, interval] of Object.entries(expectedIntervals)) {
      const res = await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=${range}`);
      expect(res.status, range).toBe(200);
      const body = (await res.json()) as { data: Bucket[]; query: Record<string, unknown> };
      const raw = await telemetryAll(server, a.key, a.device.id, range);
      const expected = expectedBuckets(raw, NOW, range, interval, null);
      expect(body.query).toEqual({
        device_id: a.device.id,
        requested_range: range,
        range,
        interval,
        fields: expected.fields,
        data_retention_days: 365,
      });
      expect(body.data.length, range).toBeGreaterThan(0);
      expectSameBuckets(body.data, expected.buckets);
    }
  });

  it('every interval over every range it allows gives the raw figures', async () => {
    const ranges = ['1h', '6h', '24h', '7d', '30d'];
    for (const range of ranges) {
      const raw = await telemetryAll(server, a.key, a.device.id, range);
      for (const interval of ['1m', '5m', '15m', '1h', '6h', '1d']) {
        const res = await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=${range}&interval=${interval}`);
        const buckets = (range === '7d' || range === '30d') && interval === '1m';
        expect(res.status, `${range} ${interval}`).toBe(buckets ? 400 : 200);
        if (buckets) continue;
        const body = (await res.json()) as { data: Bucket[] };
        expectSameBuckets(body.data, expectedBuckets(raw, NOW, range, interval, null).buckets);
      }
    }
  });

  it('counts numbers reached through object keys only: nested paths yes, array elements, strings, booleans, nulls no', async () => {
    const res = await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=30d&interval=1d`);
    const body = (await res.json()) as { data: Bucket[]; query: { fields: string[] } };
    expect(body.query.fields).toEqual(['count', 'env.deep.x', 'env.humidity', 'sometimes', 'temp']);
    const total = (path: string) => body.data.reduce((n, bucket) => n + (bucket.values[path]?.count ?? 0), 0);
    expect(total('temp')).toBe(readings.length);
    expect(total('env.humidity')).toBe(readings.length);
    // A path that is a number in some readings and a string in others counts the numbers only.
    const xs = readings.filter((r) => typeof (r.data.env as { deep?: { x?: unknown } }).deep?.x === 'number').length;
    expect(total('env.deep.x')).toBe(xs);
    expect(xs).toBeLessThan(readings.length - 2);
    for (const absent of ['list', 'list.0', 'label', 'ok', 'none', 'numeric_text', 'env', 'env.deep'])
      expect(
        body.data.some((bucket) => absent in bucket.values),
        absent,
      ).toBe(false);
  });

  it('aligns buckets on UTC multiples of the interval, oldest first, across a minute boundary', async () => {
    const dev = (await server.services.devices.create(a.account, { name: 'edge' })).device;
    const m = Math.floor(NOW / MIN) * MIN - 10 * MIN; // a minute boundary 10 minutes back
    await insertReadings(server, dev.seq, [
      { time: m - 500, data: { v: 1 } },
      { time: m - 1, data: { v: 2 } },
      { time: m, data: { v: 10 } },
      { time: m + 59_999, data: { v: 20 } },
      { time: m + MIN, data: { v: 100 } },
    ]);
    await server.services.rollups.runOnce();
    const res = await get(`/v1/devices/${dev.id}/telemetry/aggregate?range=1h&interval=1m`);
    const body = (await res.json()) as { data: Bucket[] };
    expect(body.data).toEqual([
      { time: new Date(m - MIN).toISOString(), values: { v: { count: 2, min: 1, max: 2, avg: 1.5 } } },
      { time: new Date(m).toISOString(), values: { v: { count: 2, min: 10, max: 20, avg: 15 } } },
      { time: new Date(m + MIN).toISOString(), values: { v: { count: 1, min: 100, max: 100, avg: 100 } } },
    ]);
    const day = (await (await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=30d&interval=1d`)).json()) as { data: Bucket[] };
    const times = day.data.map((x) => x.time);
    expect(times.every((x) => x.endsWith('T00:00:00.000Z'))).toBe(true);
    expect([...times].sort()).toEqual(times);
    const six = (await (await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=7d&interval=6h`)).json()) as { data: Bucket[] };
    expect(six.data.every((x) => Date.parse(x.time) % (6 * HOUR) === 0)).toBe(true);
  });

  it('counts only readings inside the range: the first bucket is partial', async () => {
    const dev = (await server.services.devices.create(a.account, { name: 'partial' })).device;
    const since = NOW - HOUR;
    await insertReadings(server, dev.seq, [
      { time: since - 1, data: { v: 1000 } }, // outside: same 1m bucket as the next one
      { time: since + 1, data: { v: 7 } },
      { time: since + 20 * MIN, data: { v: 9 } },
    ]);
    await server.services.rollups.runOnce();
    const body = (await (await get(`/v1/devices/${dev.id}/telemetry/aggregate?range=1h&interval=1h`)).json()) as { data: Bucket[] };
    const total = body.data.reduce((n, x) => n + x.values.v!.count, 0);
    expect(total).toBe(2);
    expect(Math.max(...body.data.map((x) => x.values.v!.max))).toBe(9);
    expect(body.data[0]!.time).toBe(new Date(Math.floor(since / HOUR) * HOUR).toISOString());
  });

  it('fields picks paths (dotted for nested values) in the order given; a bucket without any is not listed', async () => {
    const res = await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=7d&fields=env.humidity,temp,nope`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Bucket[]; query: { fields: string[] } };
    expect(body.query.fields).toEqual(['env.humidity', 'temp', 'nope']);
    const raw = await telemetryAll(server, a.key, a.device.id, '7d');
    expectSameBuckets(body.data, expectedBuckets(raw, NOW, '7d', '1h', ['env.humidity', 'temp', 'nope']).buckets);
    for (const bucket of body.data) expect(Object.keys(bucket.values)).toEqual(['env.humidity', 'temp']);
    const only = (await (await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=30d&fields=sometimes`)).json()) as {
      data: Bucket[];
    };
    expect(only.data.length).toBeGreaterThan(0);
    expect(only.data.every((x) => Object.keys(x.values).join() === 'sometimes')).toBe(true);
    const none = (await (await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=30d&fields=list.0,label`)).json()) as {
      data: Bucket[];
    };
    expect(none.data).toEqual([]);
  });

  it('400 for an unknown range or interval, too many buckets, an empty path or more than 50 paths', async () => {
    const fifty = Array.from({ length: 50 }, (_, i) => `f${i}`);
    const cases: [string, number][] = [
      ['range=2d', 400],
      ['range=', 400],
      ['interval=2m', 400],
      ['interval=1w', 400],
      ['range=30d&interval=1m', 400],
      ['range=7d&interval=1m', 400],
      ['range=30d&interval=5m', 200],
      ['fields=', 400],
      ['fields=temp,,env.humidity', 400],
      ['fields=temp,', 400],
      [`fields=${fifty.join(',')}`, 200],
      [`fields=${[...fifty, 'f50'].join(',')}`, 400],
    ];
    for (const [qs, status] of cases) {
      const res = await get(`/v1/devices/${a.device.id}/telemetry/aggregate?${qs}`);
      expect(res.status, qs).toBe(status);
      if (status === 400) {
        const body = await res.json();
        expect(Object.keys(body), qs).toEqual(['error']);
        expect(body.error.length, qs).toBeGreaterThan(5);
      }
    }
  });

  it('caps the range to the plan retention like /telemetry, with the default interval of the effective range', async () => {
    await server.services.accounts.setPlan(a.account.id, 'enterprise', { retentionDays: 3 });
    try {
      const res = await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=7d`);
      const body = (await res.json()) as { data: Bucket[]; query: Record<string, unknown> };
      expect(body.query).toMatchObject({ requested_range: '7d', range: '24h', interval: '5m', data_retention_days: 3 });
      const raw = await telemetryAll(server, a.key, a.device.id, '24h');
      expectSameBuckets(body.data, expectedBuckets(raw, NOW, '24h', '5m', null).buckets);
      expect(Date.parse(body.data[0]!.time)).toBeGreaterThanOrEqual(Math.floor((NOW - DAY) / (5 * MIN)) * 5 * MIN);
      // An interval is judged over the effective range: 1m over a capped 7d (24h) is allowed.
      expect((await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=7d&interval=1m`)).status).toBe(200);
      // Under an hour of retention no range fits: the range stays as asked, and nothing is kept.
      await server.services.accounts.setPlan(a.account.id, 'enterprise', { retentionDays: 0 });
      const none = (await (await get(`/v1/devices/${a.device.id}/telemetry/aggregate?range=7d`)).json()) as typeof body;
      expect(none.query).toMatchObject({ requested_range: '7d', range: '7d', interval: '1h', data_retention_days: 0 });
      expect(none.data.every((b) => Object.keys(b).length === 1)).toBe(true);
    } finally {
      await server.services.accounts.setPlan(a.account.id, 'enterprise');
    }
  });

  it('401 without a valid key, 403 for a free-plan account, 404 for another account or an unknown device', async () => {
    const path = `/v1/devices/${a.device.id}/telemetry/aggregate`;
    expect((await server.request(path)).status).toBe(401);
    expect((await server.request(path, { key: 'tlm_nope' })).status).toBe(401);
    const free = await seedAccount(server, { email: 'agg-free@example.com', plan: 'free' });
    const forbidden = await get(`/v1/devices/${free.device.id}/telemetry/aggregate`, free.key);
    expect(forbidden.status).toBe(403);
    expect(await forbidden.json()).toEqual({ error: expect.any(String) });
    for (const other of [`/v1/devices/${b.device.id}/telemetry/aggregate`, '/v1/devices/dev_missing/telemetry/aggregate']) {
      const res = await get(other);
      expect(res.status, other).toBe(404);
      expect(await res.json()).toEqual({ error: expect.any(String) });
    }
    const ok = await get(path);
    expect(ok.headers.get('x-ratelimit-limit')).toBe('1200');
  });

  it('counts a reading the moment it is acknowledged, and a late reading in an hour already rolled up', async () => {
    const dev = (await server.services.devices.create(a.account, { name: 'late' })).device;
    await insertReadings(server, dev.seq, [{ time: NOW - 3 * HOUR, data: { v: 1 } }]);
    await server.services.rollups.runOnce();
    // Through the real ingest path: answered 200 only once committed.
    const { accessToken } = await server.services.devices.regenerateToken(dev);
    const res = await server.request('/api/devices/ingest', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${accessToken}` },
      body: JSON.stringify({ device_id: dev.id, data: { v: 5 } }),
    });
    expect(res.status).toBe(200);
    // Past the rolled-up mark: an hour that was already rolled up gets a late reading.
    expect(server.storage.repos.rollups.rolledUntil()).toBeGreaterThan(NOW - 3 * HOUR);
    await insertReadings(server, dev.seq, [{ time: NOW - 3 * HOUR + 1_000, data: { v: 3 } }]);
    const body = (await (await get(`/v1/devices/${dev.id}/telemetry/aggregate?range=6h&interval=1h`)).json()) as { data: Bucket[] };
    const all = body.data.flatMap((x) => Object.values(x.values));
    expect(all.reduce((n, v) => n + v.count, 0)).toBe(3);
    expect(Math.max(...all.map((v) => v.max))).toBe(5);
    const raw = await telemetryAll(server, a.key, dev.id, '6h');
    expectSameBuckets(body.data, expectedBuckets(raw, NOW, '6h', '1h', null).buckets);
  });

  it('readings near the double range: the average stays a finite number between min and max, before and after the rollup', async () => {
    const dev = (await server.services.devices.create(a.account, { name: 'huge' })).device;
    const huge = [1e308, 1e308, -1e308, 1e308];
    await insertReadings(
      server,
      dev.seq,
      huge.map((v, i) => ({ time: NOW - 3 * HOUR + i * 1_000, data: { huge: v, small: i } })),
    );
    const figures = async () => {
      const res = await get(`/v1/devices/${dev.id}/telemetry/aggregate?range=6h&interval=1h`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { data: Bucket[] };
      expect(body.data).toHaveLength(1);
      return body.data[0]!.values;
    };
    for (const when of ['from the readings', 'from the rollups']) {
      if (when === 'from the rollups') await server.services.rollups.runOnce();
      const values = await figures();
      const h = values.huge!;
      expect(h.count, when).toBe(4);
      expect([h.min, h.max], when).toEqual([-1e308, 1e308]);
      expect(Number.isFinite(h.avg), when).toBe(true);
      expect(h.avg, when).toBeGreaterThan(0);
      expect(h.avg, when).toBeLessThanOrEqual(1e308);
      // Other paths of the same readings are unaffected.
      expect(values.small, when).toEqual({ count: 4, min: 0, max: 3, avg: 1.5 });
    }
  });

  it('is in the OpenAPI document', async () => {
    const doc = (await (await server.request('/v1/openapi.json')).json()) as { paths: Record<string, { get?: unknown }> };
    const op = doc.paths['/v1/devices/{id}/telemetry/aggregate']?.get as { parameters: { name: string }[] } | undefined;
    expect(op).toBeDefined();
    expect(op!.parameters.map((p) => p.name).sort()).toEqual(['fields', 'id', 'interval', 'range']);
  });
});
