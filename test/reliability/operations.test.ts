/**
 * Operations (docs/reliability.md): /metrics in Prometheus text format, scrapeable from this
 * machine only; /healthz reports database reachability.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isLoopback } from '../../src/http/metrics.js';
import { onPostgres, sqliteDb } from '../helpers/backend.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

let server: TestServer | null = null;
afterEach(async () => {
  await server?.stop();
  server = null;
});

const metricValue = (text: string, series: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

describe('/metrics', () => {
  it('counts ingest by transport, rejections, latency by route, DB size and writer state', async () => {
    server = await startTestServer();
    const { device, token } = await seedAccount(server, { device: { name: 'strict', schemaMode: 'strict', fields: [{ name: 'temp' }] } });
    for (let i = 0; i < 5; i++)
      expect((await ingest(server, { device_id: device.id, access_token: token, data: { temp: i } })).status).toBe(200);
    // A permanent rejection (unknown field in strict mode) and an auth failure (not a rejection).
    expect((await ingest(server, { device_id: device.id, access_token: token, data: { humidity: 1 } })).status).toBe(400);
    expect((await ingest(server, { device_id: device.id, access_token: 'wrong', data: { temp: 1 } })).status).toBe(401);

    const res = await server.request('/metrics');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    expect(metricValue(text, 'telemetryd_ingest_readings_total{transport="http"}')).toBe(5);
    expect(metricValue(text, 'telemetryd_ingest_readings_total{transport="mqtt"}')).toBe(0);
    expect(metricValue(text, 'telemetryd_ingest_rejected_total{transport="http"}')).toBe(1);
    expect(
      metricValue(text, 'telemetryd_http_request_duration_seconds_count{method="POST",route="/api/devices/ingest",status="2xx"}'),
    ).toBe(5);
    expect(
      metricValue(text, 'telemetryd_http_request_duration_seconds_count{method="POST",route="/api/devices/ingest",status="4xx"}'),
    ).toBe(2);
    expect(metricValue(text, 'telemetryd_database_size_bytes')).toBeGreaterThan(4096);
    expect(metricValue(text, 'telemetryd_writer_queue_depth')).toBe(0);
    expect(metricValue(text, 'telemetryd_writer_max_batch')).toBeGreaterThanOrEqual(1);
    // Each reading above was answered before the next was sent: one commit each.
    expect(metricValue(text, 'telemetryd_writer_commits_total')).toBe(5);
    expect(metricValue(text, 'telemetryd_mqtt_connections')).toBe(0);
  });

  it('is served to direct loopback connections only, not through a proxy', async () => {
    server = await startTestServer();
    for (const header of ['x-forwarded-for', 'forwarded', 'x-real-ip']) {
      const res = await server.request('/metrics', { headers: { [header]: '203.0.113.7' } });
      expect(res.status).toBe(404);
    }
    expect(isLoopback('127.0.0.1')).toBe(true);
    expect(isLoopback('::ffff:127.0.0.1')).toBe(true);
    expect(isLoopback('::1')).toBe(true);
    expect(isLoopback('10.0.0.5')).toBe(false);
    expect(isLoopback('::ffff:192.168.1.2')).toBe(false);
    expect(isLoopback('1270.0.0.1')).toBe(false);
    expect(isLoopback(undefined)).toBe(false);
  });
});

describe('/healthz', () => {
  // Makes the database unreachable by closing the server's SQLite connection under it.
  it.skipIf(onPostgres)('reports the database reachable, and 503 once it is not', async () => {
    server = await startTestServer();
    const ok = await server.request('/healthz');
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ status: 'ok', database: 'ok' });
    sqliteDb(server.storage).close();
    const down = await server.request('/healthz');
    expect(down.status).toBe(503);
    expect(await down.json()).toMatchObject({ status: 'unavailable' });
    // The background timers (change watcher every 250 ms) hit the dead database too: the
    // process must keep answering, not die of an uncaught exception.
    await new Promise((r) => setTimeout(r, 800));
    expect((await server.request('/healthz')).status).toBe(503);
  });
});
