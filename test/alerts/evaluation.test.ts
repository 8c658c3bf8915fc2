import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../helpers/backend.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { history, send } from './helpers.js';

describe('alert evaluation on readings ingested over HTTP', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer();
  });
  afterAll(() => server.stop());

  async function fresh() {
    return seedAccount(server);
  }

  it('each operator triggers when the condition holds and not when it does not', async () => {
    const s = await fresh();
    const ops = { gt: '>', ge: '>=', lt: '<', le: '<=', eq: '==', ne: '!=' } as const;
    const alerts = Object.fromEntries(
      await Promise.all(
        Object.entries(ops).map(
          async ([field, operator]) =>
            [
              field,
              await server.services.alerts.create(s.device, { name: `op ${operator}`, field, operator, value: 20, cooldown: 0 }),
            ] as const,
        ),
      ),
    );
    // Every condition false...
    await send(server, s.device, s.token, { gt: 20, ge: 19.9, lt: 20, le: 20.1, eq: 20.5, ne: 20 });
    for (const [field, alert] of Object.entries(alerts)) expect((await history(server, s.key, alert.id)).body.data, field).toHaveLength(0);
    // ...then every condition true, with the value that met it recorded.
    const met = { gt: 20.5, ge: 20, lt: -3, le: 20, eq: 20, ne: 21 };
    await send(server, s.device, s.token, met);
    for (const [field, alert] of Object.entries(alerts)) {
      const events = (await history(server, s.key, alert.id)).body.data;
      expect(events, field).toHaveLength(1);
      expect(events[0]!.condition_value, field).toBe(met[field as keyof typeof met]);
    }
  });

  it('the trigger event has the Alert trigger event shape and last_triggered follows it', async () => {
    const s = await fresh();
    const alert = await server.services.alerts.create(s.device, {
      name: 'hot',
      field: 'temp',
      operator: '>',
      value: 30,
      severity: 'critical',
    });
    const before = await (await server.request(`/v1/alerts/${alert.id}`, { key: s.key })).json();
    expect(before.data.last_triggered).toBeNull();

    await send(server, s.device, s.token, { temp: 31.5 });
    const events = (await history(server, s.key, alert.id)).body.data;
    expect(events).toHaveLength(1);
    const event = events[0]!;
    expect(Object.keys(event).sort()).toEqual([
      'acknowledged',
      'acknowledged_at',
      'condition_value',
      'device_id',
      'id',
      'resolved_at',
      'severity',
      'triggered_at',
    ]);
    expect(event).toMatchObject({
      device_id: s.device.id,
      condition_value: 31.5,
      severity: 'critical',
      acknowledged: false,
      acknowledged_at: null,
    });
    expect(event.id).toMatch(/^evt_[0-9A-Za-z]{16}$/);
    expect(event.triggered_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    const latest = await (await server.request(`/v1/devices/${s.device.id}/telemetry/latest`, { key: s.key })).json();
    expect(event.triggered_at).toBe(latest.data.time);
    const after = await (await server.request(`/v1/alerts/${alert.id}`, { key: s.key })).json();
    expect(after.data.last_triggered).toBe(event.triggered_at);
    const list = await (await server.request('/v1/alerts', { key: s.key })).json();
    expect(list.data.find((a: { id: string }) => a.id === alert.id).last_triggered).toBe(event.triggered_at);

    // Acknowledging (a dashboard action) sets acknowledged and acknowledged_at.
    await server.services.alerts.acknowledge(s.account, event.id as string);
    const acked = (await history(server, s.key, alert.id)).body.data[0]!;
    expect(acked.acknowledged).toBe(true);
    expect(acked.acknowledged_at).toMatch(/Z$/);
  });

  it('dotted paths reach into nested data, and a key holding dots is read as the path it spells', async () => {
    const s = await fresh();
    const alert = await server.services.alerts.create(s.device, { name: 'env', field: 'env.temp', operator: '>=', value: 30, cooldown: 0 });
    const deep = await server.services.alerts.create(s.device, { name: 'deep', field: 'a.b.c', operator: '<', value: 0, cooldown: 0 });
    await send(server, s.device, s.token, { env: { temp: 29.9 }, a: { b: { c: 0 } } });
    expect((await history(server, s.key, alert.id)).body.data).toHaveLength(0);
    expect((await history(server, s.key, deep.id)).body.data).toHaveLength(0);
    await send(server, s.device, s.token, { env: { temp: 30, humidity: 40 }, a: { b: { c: -1.5 } } });
    expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value)).toEqual([30]);
    expect((await history(server, s.key, deep.id)).body.data.map((e) => e.condition_value)).toEqual([-1.5]);
    // What the charts and aggregates show under env.temp: a literal "env.temp" key, or a.b.c
    // spelled across levels; when both spellings are present the nested one counts.
    await send(server, s.device, s.token, { 'env.temp': 99, env: 31, 'a.b': { c: -2 } });
    await send(server, s.device, s.token, { 'env.temp': 98, env: { temp: 29 }, a: { 'b.c': -3 } });
    expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value).sort()).toEqual([30, 99]);
    expect((await history(server, s.key, deep.id)).body.data.map((e) => e.condition_value).sort()).toEqual([-1.5, -2, -3]);
  });

  it('a missing field or a non-numeric value never triggers (numeric strings included)', async () => {
    const s = await fresh();
    const above = await server.services.alerts.create(s.device, { name: 'above', field: 'temp', operator: '>', value: 30, cooldown: 0 });
    const notEqual = await server.services.alerts.create(s.device, { name: 'ne', field: 'temp', operator: '!=', value: 1, cooldown: 0 });
    for (const data of [{ other: 50 }, { temp: '35' }, { temp: true }, { temp: null }, { temp: { v: 40 } }, { temp: [40] }, {}]) {
      await send(server, s.device, s.token, data);
    }
    expect((await history(server, s.key, above.id)).body.data).toHaveLength(0);
    expect((await history(server, s.key, notEqual.id)).body.data).toHaveLength(0);
    await send(server, s.device, s.token, { temp: 35 });
    expect((await history(server, s.key, above.id)).body.data).toHaveLength(1);
    expect((await history(server, s.key, notEqual.id)).body.data).toHaveLength(1);
  });

  it('cooldown 0 records every matching reading; a long cooldown records only the first', async () => {
    const s = await fresh();
    const every = await server.services.alerts.create(s.device, { name: 'every', field: 'x', operator: '>', value: 0, cooldown: 0 });
    const once = await server.services.alerts.create(s.device, { name: 'once', field: 'x', operator: '>', value: 0, cooldown: 3600 });
    const byDefault = await server.services.alerts.create(s.device, { name: 'default cooldown', field: 'x', operator: '>', value: 0 });
    expect(byDefault.cooldown).toBe(300);
    await send(server, s.device, s.token, { x: 1 });
    await send(server, s.device, s.token, { x: 2 });
    expect((await history(server, s.key, every.id)).body.data.map((e) => e.condition_value)).toEqual([2, 1]);
    expect((await history(server, s.key, once.id)).body.data.map((e) => e.condition_value)).toEqual([1]);
    expect((await history(server, s.key, byDefault.id)).body.data).toHaveLength(1);
  });

  it('many readings of one device committed together pass a cooldown only once', async () => {
    const s = await fresh();
    const every = await server.services.alerts.create(s.device, { name: 'every', field: 'x', operator: '>', value: 0, cooldown: 0 });
    const once = await server.services.alerts.create(s.device, { name: 'once', field: 'x', operator: '>', value: 0, cooldown: 3600 });
    const n = 40;
    // Concurrent HTTP requests: how many share a commit depends on timing...
    await Promise.all(Array.from({ length: n }, (_, i) => send(server, s.device, s.token, { x: i + 1 })));
    expect((await history(server, s.key, every.id)).body.data).toHaveLength(n);
    expect((await history(server, s.key, once.id)).body.data).toHaveLength(1);
    // ...so also hand n readings to the one ingest pipeline (the path HTTP and MQTT share) in
    // one tick: they are certain to commit in one transaction and be evaluated back to back.
    const other = await server.services.devices.create(s.account, { name: 'batch' });
    const everyB = await server.services.alerts.create(other.device, { name: 'every', field: 'x', operator: '>', value: 0, cooldown: 0 });
    const onceB = await server.services.alerts.create(other.device, { name: 'once', field: 'x', operator: '>', value: 0, cooldown: 3600 });
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        server.services.ingest.ingestReading({
          transport: 'http',
          deviceId: other.device.id,
          token: other.accessToken,
          data: { x: i + 1 },
        }),
      ),
    );
    // On PostgreSQL the new device's first readings wait for the authentication cache to be
    // filled from the database, so they may reach the writer over more than one tick.
    if (!onPostgres) expect(server.storage.writer.maxBatch).toBeGreaterThanOrEqual(n);
    expect((await history(server, s.key, everyB.id)).body.data).toHaveLength(n);
    expect((await history(server, s.key, onceB.id)).body.data.map((e) => e.condition_value)).toEqual([1]);
  });

  it('a disabled alert records nothing; enabling and changing an alert apply to the next reading', async () => {
    const s = await fresh();
    let alert = await server.services.alerts.create(s.device, {
      name: 'off',
      field: 't',
      operator: '>',
      value: 10,
      cooldown: 0,
      enabled: false,
    });
    await send(server, s.device, s.token, { t: 11 });
    expect((await history(server, s.key, alert.id)).body.data).toHaveLength(0);
    alert = await server.services.alerts.setEnabled(alert, true);
    await send(server, s.device, s.token, { t: 12 });
    expect((await history(server, s.key, alert.id)).body.data).toHaveLength(1);
    alert = await server.services.alerts.update(alert, { value: 100 });
    await send(server, s.device, s.token, { t: 13 });
    expect((await history(server, s.key, alert.id)).body.data).toHaveLength(1);
    alert = await server.services.alerts.setEnabled(alert, false);
    await send(server, s.device, s.token, { t: 1000 });
    expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value)).toEqual([12]);
    const shown = await (await server.request(`/v1/alerts/${alert.id}`, { key: s.key })).json();
    expect(shown.data).toMatchObject({ enabled: false, condition: { field: 't', operator: '>', value: 100 } });
  });

  it('an alert deleted between evaluation and recording does not cost the other triggers', async () => {
    const s = await fresh();
    const doomed = await server.services.alerts.create(s.device, { name: 'doomed', field: 'v', operator: '>', value: 0 });
    const kept = await server.services.alerts.create(s.device, { name: 'kept', field: 'v', operator: '>', value: 0 });
    // 'reading.stored' runs right after evaluation, before the triggers are written.
    const off = server.services.events.on('reading.stored', async () => {
      off();
      await server.services.alerts.remove(doomed);
    });
    await send(server, s.device, s.token, { v: 1 });
    expect((await history(server, s.key, kept.id)).body.data.map((e) => e.condition_value)).toEqual([1]);
    expect((await server.request(`/v1/alerts/${doomed.id}`, { key: s.key })).status).toBe(404);
    await send(server, s.device, s.token, { v: 2 });
    expect((await history(server, s.key, kept.id)).body.data).toHaveLength(1);
  });

  it('alerts of another device are not evaluated against this device', async () => {
    const s = await fresh();
    const other = await server.services.devices.create(s.account, { name: 'other' });
    const alert = await server.services.alerts.create(other.device, {
      name: 'other dev',
      field: 't',
      operator: '>',
      value: 0,
      cooldown: 0,
    });
    await send(server, s.device, s.token, { t: 5 });
    expect((await history(server, s.key, alert.id)).body.data).toHaveLength(0);
    await send(server, other.device, other.accessToken, { t: 5 });
    expect((await history(server, s.key, alert.id)).body.data).toHaveLength(1);
  });

  it('history is newest first, 50 by default, clamped to 100, and limit=0 is 400', async () => {
    const s = await fresh();
    const alert = await server.services.alerts.create(s.device, { name: 'many', field: 'i', operator: '>=', value: 0, cooldown: 0 });
    for (let i = 0; i < 105; i++) await send(server, s.device, s.token, { i });
    const byDefault = (await history(server, s.key, alert.id)).body.data;
    expect(byDefault).toHaveLength(50);
    expect(byDefault.map((e) => e.condition_value)).toEqual(Array.from({ length: 50 }, (_, k) => 104 - k));
    const times = byDefault.map((e) => Date.parse(e.triggered_at as string));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    expect((await history(server, s.key, alert.id, '?limit=3')).body.data.map((e) => e.condition_value)).toEqual([104, 103, 102]);
    const clamped = await history(server, s.key, alert.id, '?limit=1000');
    expect(clamped.status).toBe(200);
    expect(clamped.body.data).toHaveLength(100);
    expect(clamped.body.data[99]!.condition_value).toBe(5);
    for (const bad of ['0', '-1', 'abc', '1.5']) {
      const res = await history(server, s.key, alert.id, `?limit=${bad}`);
      expect(res.status, bad).toBe(400);
      expect(Object.keys(res.body)).toEqual(['error']);
    }
  });
});

describe('cooldown boundary (injected clock)', () => {
  let server: TestServer;
  let now = Date.UTC(2026, 0, 1, 12, 0, 0);

  beforeAll(async () => {
    server = await startTestServer({}, { clock: { now: () => now } });
  });
  afterAll(() => server.stop());

  it('matches before T + cooldown record nothing; at T + cooldown the alert triggers again', async () => {
    const s = await seedAccount(server);
    const alert = await server.services.alerts.create(s.device, { name: 'cool', field: 'v', operator: '>', value: 0, cooldown: 60 });
    const t0 = now;
    await send(server, s.device, s.token, { v: 1 });
    now = t0 + 59_999;
    await send(server, s.device, s.token, { v: 2 });
    expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value)).toEqual([1]);
    now = t0 + 60_000;
    await send(server, s.device, s.token, { v: 3 });
    const events = (await history(server, s.key, alert.id)).body.data;
    expect(events.map((e) => e.condition_value)).toEqual([3, 1]);
    expect(events.map((e) => e.triggered_at)).toEqual([new Date(t0 + 60_000).toISOString(), new Date(t0).toISOString()]);
    // A reading that does not meet the condition does not start a cooldown.
    now = t0 + 200_000;
    await send(server, s.device, s.token, { v: -1 });
    now = t0 + 200_001;
    await send(server, s.device, s.token, { v: 4 });
    expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value)).toEqual([4, 3, 1]);
  });

  it('cooldown 0 triggers on a reading stamped before the last trigger, and last_triggered stays the latest', async () => {
    // Readings committed out of arrival order (batches in flight together on PostgreSQL)
    // reach the evaluator so; a clock stepped back is the same case made certain.
    const s = await seedAccount(server);
    const alert = await server.services.alerts.create(s.device, { name: 'every', field: 'v', operator: '>', value: 0, cooldown: 0 });
    const t0 = now;
    await send(server, s.device, s.token, { v: 1 });
    now = t0 - 5_000;
    await send(server, s.device, s.token, { v: 2 });
    now = t0 + 1_000;
    expect((await history(server, s.key, alert.id)).body.data.map((e) => e.condition_value).sort()).toEqual([1, 2]);
    expect((await server.services.alerts.getAny(alert.id)).lastTriggered).toBe(t0);
  });
});
