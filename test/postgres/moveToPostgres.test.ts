/**
 * Moving an installation from SQLite to PostgreSQL and serving from it (docs/operations.md,
 * "Moving between SQLite and PostgreSQL"): a SQLite data dir with devices, readings over
 * several days, alerts with events and an API key goes `backup` → `restore --database-url`
 * (the built CLI), and the Public API of `serve --database-url` answers exactly what `serve`
 * on the SQLite data dir answers, response by response. Both servers run on the same fixed
 * clock, so relative ranges cover the same readings.
 */
import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCliAsync } from '../helpers/cli.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { ingest, seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { insertReadings, type Reading, seededRandom } from '../http/aggregateHelpers.js';

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
/** A fixed "now" for both servers: whole minutes, a little in the past. */
const NOW = Math.floor((Date.now() - 10 * MINUTE) / MINUTE) * MINUTE;
const clock = { now: () => NOW };

describe('backup of a SQLite data dir → restore --database-url → serve --database-url', () => {
  let pg: PostgresServer;
  let url: string;
  let dataDir: string;
  let key: string;
  let deviceIds: string[];
  let alertIds: string[];
  const servers: TestServer[] = [];

  beforeAll(async () => {
    pg = await startPostgres();
    url = await createDatabase(pg);
    dataDir = tempDir();

    // The SQLite installation: two devices of one account with a key, readings over six
    // days (numbers, nested numbers, strings), two alerts, one of which fired and resolved.
    const sqlite = await startTestServer({ 'data-dir': dataDir }, { clock });
    servers.push(sqlite);
    const seed = await seedAccount(sqlite, { plan: 'business', device: { name: 'greenhouse' } });
    key = seed.key;
    const second = await sqlite.services.devices.create(seed.account, { name: 'cellar', description: 'under the stairs' });
    deviceIds = [seed.device.id, second.device.id];
    const random = seededRandom(7);
    const a: Reading[] = [];
    for (let t = NOW - 6 * DAY; t < NOW - HOUR; t += 10 * MINUTE + Math.floor(random() * 1_000)) {
      a.push({ time: t, data: { temp: Math.round(random() * 400) / 10, env: { hum: Math.floor(random() * 100) }, label: 'g' } });
    }
    const b: Reading[] = [];
    for (let t = NOW - 3 * DAY; t < NOW - 2 * HOUR; t += 30 * MINUTE)
      b.push({ time: t, data: { v: Math.floor(random() * 1_000), ok: true } });
    insertReadings(sqlite, seed.device.seq, a);
    insertReadings(sqlite, second.device.seq, b);

    const hot = await sqlite.services.alerts.create(seed.device, { name: 'hot', field: 'temp', operator: '>', value: 30, cooldown: 0 });
    const silent = await sqlite.services.alerts.create(second.device, { name: 'quiet cellar', field: 'v', operator: '<', value: 5 });
    alertIds = [hot.id, silent.id];
    for (const temp of [35, 36, 20, 21.5]) {
      const r = await ingest(sqlite, { device_id: seed.device.id, access_token: seed.token, data: { temp, env: { hum: 50 } } });
      expect(r.status).toBe(200);
    }
    expect((await ingest(sqlite, { device_id: second.device.id, access_token: second.accessToken, data: { v: 3 } })).status).toBe(200);
    await sqlite.stop();
    servers.length = 0;

    const archive = path.join(tempDir(), 'move.tar.gz');
    const backup = await runCliAsync(['backup', archive, '--json'], { dataDir });
    expect(backup.status, backup.stderr).toBe(0);
    // On PostgreSQL the data dir holds only the snapshot files, and this archive has none.
    const snapshotsHome = path.join(tempDir(), 'data');
    const restore = await runCliAsync(['restore', archive, '--database-url', url, '--json'], { dataDir: snapshotsHome });
    expect(restore.status, restore.stderr).toBe(0);
    expect(restore.json.readings).toBe(a.length + b.length + 5);
    // Made only to stage the archive in, the data dir does not stay behind empty.
    expect(existsSync(snapshotsHome)).toBe(false);
  });

  afterAll(async () => {
    for (const s of servers) await s.stop();
    await pg?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  /** Every Public API read this installation offers, in one fixed order. */
  function paths(): string[] {
    const out = ['/v1/devices', '/v1/devices?status=active', '/v1/account/usage', '/v1/alerts'];
    for (const id of deviceIds) {
      out.push(`/v1/devices/${id}`, `/v1/devices/${id}/telemetry/latest`);
      for (const range of ['1h', '6h', '24h', '7d', '30d']) {
        out.push(`/v1/devices/${id}/telemetry?range=${range}&limit=1000`, `/v1/devices/${id}/telemetry/aggregate?range=${range}`);
      }
      out.push(
        `/v1/devices/${id}/telemetry/aggregate?range=24h&interval=1h`,
        `/v1/devices/${id}/telemetry/aggregate?range=7d&interval=1d&fields=temp,env.hum`,
        `/v1/devices/${id}/telemetry/aggregate?range=30d&interval=6h&fields=v`,
      );
    }
    for (const id of alertIds) out.push(`/v1/alerts/${id}`, `/v1/alerts/${id}/history`);
    return out;
  }

  async function answers(server: TestServer): Promise<{ path: string; status: number; body: unknown }[]> {
    const out = [];
    for (const p of paths()) {
      const res = await server.request(p, { key });
      out.push({ path: p, status: res.status, body: await res.json() });
    }
    return out;
  }

  it('answers every Public API read on PostgreSQL exactly as on the SQLite data dir', async () => {
    const sqlite = await startTestServer({ 'data-dir': dataDir }, { clock });
    servers.push(sqlite);
    const fromSqlite = await answers(sqlite);
    await sqlite.stop();
    servers.length = 0;

    const postgres = await startTestServer({ 'database-url': url }, { clock });
    servers.push(postgres);
    expect(postgres.storage.backend).toBe('postgres');
    const fromPostgres = await answers(postgres);

    // The answers are not empty: readings, buckets, an alert event.
    const body = (p: string) => fromSqlite.find((a) => a.path === p)!.body as { data: unknown[] };
    expect(body(`/v1/devices/${deviceIds[0]}/telemetry?range=7d&limit=1000`).data.length).toBeGreaterThan(700);
    expect(body(`/v1/devices/${deviceIds[1]}/telemetry?range=7d&limit=1000`).data.length).toBeGreaterThan(100);
    expect(body(`/v1/devices/${deviceIds[0]}/telemetry/aggregate?range=7d`).data.length).toBeGreaterThan(100);
    expect(body(`/v1/alerts/${alertIds[0]}/history`).data.length).toBeGreaterThan(0);
    for (const a of fromSqlite) expect(a.status, a.path).toBe(200);

    for (let i = 0; i < fromSqlite.length; i++) expect(fromPostgres[i], fromSqlite[i]!.path).toEqual(fromSqlite[i]);
  });
});
