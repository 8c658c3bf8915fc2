/**
 * `serve` on PostgreSQL (docs/postgres.md, "Running on PostgreSQL"): the real server started
 * with a database URL on a throwaway PostgreSQL server, driven through HTTP, MQTT QoS 1, the
 * Public API, the dashboard's sign-in and the admin CLI (the built bundle) with
 * --database-url, whose changes the running server hears through change notifications.
 */
import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import mqtt, { type MqttClient } from 'mqtt';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/storage/db.js';
import { connectPostgres } from '../../src/storage/postgres/connect.js';
import { runCliAsync } from '../helpers/cli.js';
import { dashboardSession } from '../helpers/dashboard.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { ingest, seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { startChildServer, stopChild } from '../reliability/helpers.js';

const connectMqtt = (server: TestServer, username: string, password: string): Promise<MqttClient> =>
  mqtt.connectAsync(`mqtt://127.0.0.1:${server.mqttPlainPort}`, { username, password, reconnectPeriod: 0, connectTimeout: 5_000 }, false);

/** Resolves when the server closes the client's connection; rejects after `timeoutMs`. */
function closedWithin(client: MqttClient, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    if (client.disconnected || !client.connected) return resolve();
    const timer = setTimeout(() => reject(new Error(`connection still open after ${timeoutMs} ms`)), timeoutMs);
    client.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

describe('serve on PostgreSQL', () => {
  let pg: PostgresServer;
  let url: string;
  let server: TestServer;
  /** Another connection, to see what is committed. */
  let observer: Pool;

  beforeAll(async () => {
    pg = await startPostgres();
    url = await createDatabase(pg);
    server = await startTestServer({ 'database-url': url, 'mqtt-plain-port': '0' });
    observer = await connectPostgres(url, { max: 2 });
  });
  afterAll(async () => {
    await server?.stop();
    await observer?.end();
    await pg?.stop();
  });

  it('runs on PostgreSQL: no SQLite handle, the schema with change notifications', async () => {
    expect(server.storage.backend).toBe('postgres');
    expect(server.storage.db).toBeUndefined();
    const triggers = await observer.query<{ name: string }>(
      "SELECT tgname AS name FROM pg_trigger WHERE tgname LIKE '%_notify_change' ORDER BY 1",
    );
    expect(triggers.rows.map((r) => r.name)).toEqual([
      'accounts_notify_change',
      'alerts_notify_change',
      'api_keys_notify_change',
      'devices_notify_change',
    ]);
  });

  it('takes readings over HTTP and MQTT QoS 1 and answers history, latest, aggregates and usage from PostgreSQL', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    for (const temp of [20, 21, 22]) {
      const r = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { temp } });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
    }
    const client = await connectMqtt(server, s.device.id, s.token);
    try {
      // publishAsync resolves on the PUBACK, which comes only after the commit.
      for (const temp of [23, 24]) await client.publishAsync(`d/${s.device.id}/t`, JSON.stringify({ temp }), { qos: 1 });
    } finally {
      await client.endAsync();
    }
    const stored = await observer.query<{ data: string }>(
      'SELECT r.data FROM readings r JOIN devices d ON d.seq = r.device_seq WHERE d.id = $1 ORDER BY r.seq',
      [s.device.id],
    );
    expect(stored.rows.map((r) => JSON.parse(r.data).temp)).toEqual([20, 21, 22, 23, 24]);
    // They came through the writer's own connections (generic plans: src/storage/postgres/connect.ts).
    const writers = await observer.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'telemetryd writer'",
    );
    expect(writers.rows[0]!.n).toBeGreaterThanOrEqual(1);

    const latest = await server.request(`/v1/devices/${s.device.id}/telemetry/latest`, { key: s.key });
    expect(latest.status).toBe(200);
    expect(((await latest.json()) as { data: { data: unknown } }).data.data).toEqual({ temp: 24 });

    const history = await server.request(`/v1/devices/${s.device.id}/telemetry?range=1h`, { key: s.key });
    expect(history.status).toBe(200);
    const rows = ((await history.json()) as { data: { data: { temp: number } }[] }).data;
    expect(rows.map((r) => r.data.temp)).toEqual([24, 23, 22, 21, 20]);

    const aggregate = await server.request(`/v1/devices/${s.device.id}/telemetry/aggregate?range=1h&interval=1h&fields=temp`, {
      key: s.key,
    });
    expect(aggregate.status).toBe(200);
    const buckets = (
      (await aggregate.json()) as { data: { values: { temp?: { count: number; min: number; max: number; avg: number } } }[] }
    ).data;
    const temp = buckets.flatMap((b) => (b.values.temp ? [b.values.temp] : []));
    expect(temp.reduce((n, t) => n + t.count, 0)).toBe(5);
    expect(Math.min(...temp.map((t) => t.min))).toBe(20);
    expect(Math.max(...temp.map((t) => t.max))).toBe(24);

    const usage = await server.request('/v1/account/usage', { key: s.key });
    expect(usage.status).toBe(200);
    expect(((await usage.json()) as { data: unknown }).data).toMatchObject({
      devices: { total: 1, active: 1, paused: 0 },
      telemetry: { data_points_24h: 5 },
      alerts: { total: 0, active: 0 },
    });
    // The leading node folds the counts each batch appended into one row per minute within
    // about a second; usage reads the same after.
    const counts = async () =>
      (
        await observer.query<{ folded: number; appended: number }>(
          `SELECT (SELECT coalesce(sum(n), 0)::int FROM reading_counts WHERE account_seq = $1) AS folded,
                  (SELECT count(*)::int FROM reading_count_deltas WHERE account_seq = $1) AS appended`,
          [s.account.seq],
        )
      ).rows[0]!;
    for (let i = 0; i < 50 && (await counts()).appended > 0; i++) await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await counts()).toEqual({ folded: 5, appended: 0 });
    const folded = await server.request('/v1/account/usage', { key: s.key });
    expect(((await folded.json()) as { data: { telemetry: unknown } }).data.telemetry).toMatchObject({ data_points_24h: 5 });

    const device = await server.request(`/v1/devices/${s.device.id}`, { key: s.key });
    expect(((await device.json()) as { data: { last_seen: string | null } }).data.last_seen).not.toBeNull();
  });

  it('signs in to the dashboard and shows the account’s devices', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    await server.services.accounts.setPassword(s.account.seq, 'password-123');
    const { cookie } = await dashboardSession(server.httpUrl, s.account.email, 'password-123');
    expect(cookie).toMatch(/=/);
    // A read needs the session cookie alone.
    const devices = await server.request('/ui/api/devices', { headers: { cookie } });
    expect(devices.status).toBe(200);
    expect(JSON.stringify(await devices.json())).toContain(s.device.id);
    const session = await observer.query('SELECT count(*)::int AS n FROM sessions WHERE account_seq = $1', [s.account.seq]);
    expect(session.rows[0].n).toBe(1);
  });

  it('runs the admin CLI with --database-url; a device paused from it is refused by the running server within 1 s', async () => {
    const db = ['--database-url', url];
    const email = `cli-${Math.random().toString(36).slice(2)}@example.com`;
    const account = await runCliAsync(['accounts', 'create', '--email', email, '--plan', 'business', '--json', ...db]);
    expect(account.status, account.stderr).toBe(0);
    const key = await runCliAsync(['keys', 'create', '--account', email, '--name', 'cli key', '--json', ...db]);
    expect(key.status, key.stderr).toBe(0);
    const device = await runCliAsync(['devices', 'create', '--account', account.json.id, '--name', 'cli device', '--json', ...db]);
    expect(device.status, device.stderr).toBe(0);
    const list = await runCliAsync(['accounts', 'list', '--json', ...db]);
    expect(list.status, list.stderr).toBe(0);
    expect(JSON.stringify(list.json)).toContain(email);

    // What the CLI created is what the running server serves.
    const listed = await server.request('/v1/devices', { key: key.json.key });
    expect(listed.status).toBe(200);
    expect(JSON.stringify(await listed.json())).toContain(device.json.id);
    const ok = await ingest(server, { device_id: device.json.id, access_token: device.json.access_token, data: { v: 1 } });
    expect(ok.status).toBe(200);
    const client = await connectMqtt(server, device.json.id, device.json.access_token);
    await client.publishAsync(`d/${device.json.id}/t`, '{"v":2}', { qos: 1 });

    const pause = await runCliAsync(['devices', 'pause', device.json.id, '--json', ...db]);
    expect(pause.status, pause.stderr).toBe(0);
    const pausedAt = Date.now();
    await closedWithin(client, 1_000);
    const refused = await ingest(server, { device_id: device.json.id, access_token: device.json.access_token, data: { v: 3 } });
    expect(refused.status).toBe(403);
    expect(Date.now() - pausedAt).toBeLessThan(1_000);
    await client.endAsync(true);

    // Resumed from the CLI: taken again, and a regenerated token refuses the old one.
    expect((await runCliAsync(['devices', 'resume', device.json.id, ...db])).status).toBe(0);
    await expect
      .poll(
        async () => (await ingest(server, { device_id: device.json.id, access_token: device.json.access_token, data: { v: 4 } })).status,
        {
          timeout: 1_000,
          interval: 50,
        },
      )
      .toBe(200);
    const regenerated = await runCliAsync(['devices', 'regenerate-token', device.json.id, '--json', ...db]);
    expect(regenerated.status, regenerated.stderr).toBe(0);
    await expect
      .poll(
        async () => (await ingest(server, { device_id: device.json.id, access_token: device.json.access_token, data: { v: 5 } })).status,
        {
          timeout: 1_000,
          interval: 50,
        },
      )
      .toBe(401);
  });

  it('runs every admin command group with --database-url, each change seen by the running server at once', async () => {
    const db = ['--database-url', url];
    const cli = async (...args: string[]) => {
      const r = await runCliAsync([...args, '--json', ...db]);
      expect(r.status, `${args.join(' ')}: ${r.stderr}`).toBe(0);
      return r.json;
    };
    const email = `all-${Math.random().toString(36).slice(2)}@example.com`;
    const account = await cli('accounts', 'create', '--email', email, '--plan', 'business');
    const key = await cli('keys', 'create', '--account', email, '--name', 'k');
    expect(JSON.stringify(await cli('keys', 'list', '--account', email))).toContain(key.id);
    const kept = await cli('devices', 'create', '--account', account.id, '--name', 'kept');
    const doomed = await cli('devices', 'create', '--account', account.id, '--name', 'doomed');
    expect(JSON.stringify(await cli('devices', 'list', '--account', email))).toContain(doomed.id);
    const rotated = await cli('accounts', 'webhook-secret', email, '--rotate');
    expect((await cli('accounts', 'webhook-secret', email)).webhook_secret).toBe(rotated.webhook_secret);

    const api = async (pathname: string) => {
      const res = await server.request(pathname, { key: key.key });
      return { status: res.status, body: (await res.json()) as { data?: Record<string, unknown> } };
    };
    const alert = await cli(
      'alerts',
      'create',
      '--device',
      kept.id,
      '--name',
      'hot',
      '--field',
      'temp',
      '--operator',
      '>',
      '--value',
      '30',
    );
    expect((await api(`/v1/alerts/${alert.id}`)).body.data).toMatchObject({ name: 'hot', enabled: true });
    await cli('alerts', 'disable', alert.id);
    expect((await api(`/v1/alerts/${alert.id}`)).body.data).toMatchObject({ enabled: false });

    await cli('accounts', 'set-plan', email, 'scale');
    expect((await api('/v1/account/usage')).body.data).toMatchObject({ plan: { plan: 'scale' } });

    await cli('devices', 'delete', doomed.id, '--yes');
    expect((await api(`/v1/devices/${doomed.id}`)).status).toBe(404);
    const deletedIngest = await ingest(server, { device_id: doomed.id, access_token: doomed.access_token, data: { v: 1 } });
    expect(deletedIngest.status).toBeGreaterThanOrEqual(401);
    expect(deletedIngest.status).toBeLessThanOrEqual(404);

    // A suspension closes the account's MQTT sessions and refuses its devices at once.
    const client = await connectMqtt(server, kept.id, kept.access_token);
    await cli('accounts', 'suspend', email);
    await closedWithin(client, 1_000);
    expect((await ingest(server, { device_id: kept.id, access_token: kept.access_token, data: { temp: 1 } })).status).toBe(403);
    await client.endAsync(true);
    await cli('accounts', 'resume', email);
    await expect
      .poll(async () => (await ingest(server, { device_id: kept.id, access_token: kept.access_token, data: { temp: 2 } })).status, {
        timeout: 1_000,
        interval: 50,
      })
      .toBe(200);

    // Keys are cached by hash: the revocation's change notice drops the cached one.
    await cli('keys', 'revoke', key.id);
    await expect.poll(async () => (await api('/v1/devices')).status, { timeout: 1_000, interval: 50 }).toBe(401);
  });

  it('listens again after its connection is dropped, counting the reconnect as a change, and hears changes from then on', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    const client = await connectMqtt(server, s.device.id, s.token);
    let heard = 0;
    const off = server.services.events.on('external.change', () => heard++);
    try {
      const dropped = await observer.query(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE query = 'LISTEN telemetryd_changes' AND pid <> pg_backend_pid()",
      );
      expect(dropped.rows).toEqual([{ ok: true }]);
      // Notifications sent while it was gone are lost: the reconnect itself is the change.
      await expect.poll(() => heard, { timeout: 3_000, interval: 20 }).toBeGreaterThan(0);
      await expect
        .poll(
          async () =>
            (await observer.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = 'LISTEN telemetryd_changes'")).rows[0].n,
        )
        .toBe(1);
      // A change committed by another process (another node name) on the new connection.
      await observer.query("UPDATE devices SET status = 'paused' WHERE id = $1", [s.device.id]);
      await closedWithin(client, 1_000);
      expect((await ingest(server, { device_id: s.device.id, access_token: s.token, data: { v: 1 } })).status).toBe(403);
    } finally {
      off();
      await client.endAsync(true);
    }
  });

  it('as the built executable: the same start-up lines without the password, ingest, and a clean exit on SIGTERM', async () => {
    const password = new URL(url).password;
    const dataDir = tempDir();
    const child = await startChildServer(dataDir, ['--database-url', url, '--log-level', 'info']);
    try {
      expect(child.output()).toMatch(
        /^telemetryd \S+: HTTP listening on 127\.0\.0\.1:\d+ \(dashboard http:\/\/127\.0\.0\.1:\d+\/, Public API http:\/\/127\.0\.0\.1:\d+\/v1\)$/m,
      );
      const { username, hostname, port, pathname } = new URL(url);
      expect(child.output()).toContain(
        `Storage: PostgreSQL ${username}@${hostname}:${port}${pathname}, snapshots in ${path.join(dataDir, 'snapshots')}\n`,
      );
      expect(child.output()).not.toContain('is a SQLite database this server does not use');
      const s = await seedAccount(server, { plan: 'business' });
      const res = await fetch(`${child.url}/api/devices/ingest`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ device_id: s.device.id, access_token: s.token, data: { from: 'child' } }),
      });
      expect(res.status).toBe(200);
      const stored = await observer.query('SELECT count(*)::int AS n FROM readings WHERE device_seq = $1 AND data = \'{"from":"child"}\'', [
        s.device.seq,
      ]);
      expect(stored.rows[0].n).toBe(1);
      // Nothing of the database lives in the data dir.
      expect(existsSync(path.join(dataDir, 'telemetryd.db'))).toBe(false);
    } finally {
      expect((await stopChild(child)).code).toBe(0);
      rmSync(dataDir, { recursive: true, force: true });
    }
    expect(child.output()).not.toContain(password);
  });

  it('warns of a SQLite database left in its data dir, which a start without --database-url would serve', async () => {
    const dataDir = tempDir();
    const left = openDatabase(dataDir);
    left.close();
    const printed: string[] = [];
    const node = await startTestServer({ 'database-url': url, 'data-dir': dataDir }, { print: (line) => printed.push(line) });
    try {
      expect(printed[0]).toMatch(/^Storage: PostgreSQL /);
      expect(printed[1]).toBe(
        `warning: ${path.join(dataDir, 'telemetryd.db')} is a SQLite database this server does not use; move it aside, or a start without --database-url serves it instead`,
      );
      expect(printed[2]).toMatch(/HTTP listening on/);
    } finally {
      await node.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('exits 1 with one line, never the password, when the database cannot be reached', async () => {
    const password = new URL(url).password;
    const bad = url.replace(/:\d+\//, ':1/');
    const r = await runCliAsync(['serve', '--http-port', '0', '--mqtt-port', 'off', '--database-url', bad]);
    expect(r.status).toBe(1);
    expect(r.stderr).toBe('telemetryd: PostgreSQL at 127.0.0.1:1: connection refused\n');
    expect(r.stderr + r.stdout).not.toContain(password);
  });

  it('retention drops whole weekly partitions past every account’s retention, then deletes the rest per account', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    const now = Date.now();
    const old = now - 800 * 24 * 3_600_000;
    const { writer } = server.storage;
    // Readings far past every plan's retention (two weeks of them), one within it.
    for (const time of [old, old + 3_600_000, old + 8 * 24 * 3_600_000])
      await writer.append({ deviceSeq: s.device.seq, time, data: '{"old":true}' });
    await writer.append({ deviceSeq: s.device.seq, time: now - 60_000, data: '{"old":false}' });
    const partitionsBefore = await observer.query("SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = 'readings'::regclass");

    const run = await server.retention.runOnce();
    // The two weeks with readings, and the empty week(s) the writer made ahead of them.
    expect(run.partitions).toBeGreaterThanOrEqual(2);
    const partitionsAfter = await observer.query("SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = 'readings'::regclass");
    expect(partitionsAfter.rows[0].n).toBe(partitionsBefore.rows[0].n - run.partitions);
    // Nothing was left for the per-device deletes of this device.
    expect(run.deleted).toBe(0);
    const left = await observer.query<{ data: string }>('SELECT data FROM readings WHERE device_seq = $1', [s.device.seq]);
    expect(left.rows.map((r) => r.data)).toEqual(['{"old":false}']);
  });

  it('restore --database-url refuses the database while a server runs on it, even with --force', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'live.tar.gz');
    try {
      const backup = await runCliAsync(['backup', file, '--database-url', url]);
      expect(backup.status, backup.stderr).toBe(0);
      const accountsBefore = (await observer.query('SELECT count(*)::int AS n FROM accounts')).rows[0].n;
      const restore = await runCliAsync(['restore', file, '--database-url', url, '--force']);
      expect(restore.status).toBe(1);
      expect(restore.stderr).toMatch(/is in use by a running server; stop it first\n$/);
      expect((await observer.query('SELECT count(*)::int AS n FROM accounts')).rows[0].n).toBe(accountsBefore);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('retention deletes again a reading committed after its device’s deletion, and its usage count', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    await server.services.devices.remove(s.device);
    // What a batch already on its way, or another node not yet told, commits behind the deletion.
    await observer.query(
      `WITH r AS (INSERT INTO readings (device_seq, time, seq, data) VALUES ($1, $2, nextval('reading_seq'), '{"late":true}'))
       INSERT INTO reading_count_deltas (account_seq, minute, n) VALUES ($3, $2 / 60000, 1)`,
      [s.device.seq, Date.now(), s.account.seq],
    );
    const run = await server.retention.runOnce();
    expect(run.readingsOfRemovedDevices).toBe(1);
    expect((await observer.query('SELECT count(*)::int AS n FROM readings WHERE device_seq = $1', [s.device.seq])).rows[0].n).toBe(0);
    const usage = await server.request('/v1/account/usage', { key: s.key });
    expect(((await usage.json()) as { data: { telemetry: { data_points_24h: number } } }).data.telemetry.data_points_24h).toBe(0);
  });

  // Last in this file: it stops the database server (and starts it again).
  it('stopped under load: 503 and no PUBACK while down, /healthz degraded, recovery without a restart, every acknowledged reading stored once', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    const acknowledged: number[] = [];
    const statuses: { status: number; error?: string; retryAfter: string | null }[] = [];
    let next = 0;
    let running = true;

    const httpLoop = async () => {
      while (running) {
        const n = next++;
        const r = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { n } });
        if (r.status === 200) acknowledged.push(n);
        else {
          statuses.push({ status: r.status, error: r.body.error as string | undefined, retryAfter: r.headers.get('retry-after') });
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      }
    };
    /** QoS 1 publishes; a PUBACK counts as acknowledged, a closed connection as not, then it reconnects. */
    let mqttRefused = 0;
    const mqttLoop = async () => {
      while (running) {
        let client: MqttClient;
        try {
          client = await connectMqtt(server, s.device.id, s.token);
        } catch {
          await new Promise((resolve) => setTimeout(resolve, 50));
          continue;
        }
        const closed = new Promise<'closed'>((resolve) => client.once('close', () => resolve('closed')));
        while (running && client.connected) {
          const n = next++;
          const outcome = await Promise.race([
            client.publishAsync(`d/${s.device.id}/t`, JSON.stringify({ n }), { qos: 1 }).then(() => 'puback' as const),
            closed,
          ]);
          if (outcome === 'puback') acknowledged.push(n);
          else mqttRefused++;
        }
        await client.endAsync(true);
      }
    };
    const health = async () => {
      const res = await server.request('/healthz');
      return { code: res.status, body: (await res.json()) as { status: string; reason?: string } };
    };

    const loops = [httpLoop(), httpLoop(), httpLoop(), mqttLoop()];
    try {
      await expect.poll(() => acknowledged.length, { timeout: 5_000 }).toBeGreaterThan(50);
      expect((await health()).body.status).toBe('ok');
      await pg.kill();
      const ackedAtKill = acknowledged.length;

      await expect.poll(() => statuses.length, { timeout: 5_000 }).toBeGreaterThan(5);
      await expect.poll(() => mqttRefused, { timeout: 5_000 }).toBeGreaterThan(0);
      const down = await health();
      expect(down.code).toBe(503);
      expect(down.body).toMatchObject({ status: 'degraded', reason: 'database unreachable' });
      for (const refusal of statuses)
        expect(refusal).toEqual({ status: 503, error: 'storage unavailable: database unreachable', retryAfter: '10' });
      // Readings in flight when it stopped may still have been acknowledged; none after that.
      const ackedWhileDown = acknowledged.length;
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(acknowledged.length).toBe(ackedWhileDown);
      expect(ackedWhileDown - ackedAtKill).toBeLessThan(50);

      await pg.start();
      const ackedAtStart = acknowledged.length;
      await expect.poll(() => acknowledged.length, { timeout: 15_000 }).toBeGreaterThan(ackedAtStart + 50);
      await expect.poll(async () => (await health()).code, { timeout: 5_000 }).toBe(200);
      expect((await health()).body.status).toBe('ok');
      // /metrics: the refusals by reason, the snapshots folder's free space (the database's disk
      // is its server's), PostgreSQL's figure of the database size.
      await expect
        .poll(async () => Number(/telemetryd_database_size_bytes (\d+)/.exec(await (await server.request('/metrics')).text())?.[1]), {
          timeout: 15_000,
        })
        .toBeGreaterThan(1_000_000);
      const metrics = await (await server.request('/metrics')).text();
      const refusedMetric = Number(/telemetryd_storage_refused_writes_total\{reason="unreachable"\} (\d+)/.exec(metrics)?.[1]);
      expect(refusedMetric).toBeGreaterThanOrEqual(statuses.length);
      expect(metrics).toMatch(/telemetryd_storage_free_bytes\{dir="snapshots"\} \d+/);
      expect(metrics).not.toMatch(/telemetryd_storage_free_bytes\{dir="data"\}/);
      expect(metrics).toMatch(/telemetryd_storage_writable 1/);
    } finally {
      running = false;
      await Promise.all(loops);
    }

    const stored = await observer.query<{ n: number; copies: number }>(
      "SELECT (data::jsonb ->> 'n')::int AS n, count(*)::int AS copies FROM readings WHERE device_seq = $1 GROUP BY 1",
      [s.device.seq],
    );
    const copies = new Map(stored.rows.map((r) => [r.n, r.copies]));
    const missing = acknowledged.filter((n) => copies.get(n) !== 1);
    expect(missing).toEqual([]);
    expect(acknowledged.length).toBeGreaterThan(100);
  });

  it('a read that cannot reach the database makes /healthz degraded until the database answers again', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    const health = async () => (await server.request('/healthz')).status;
    expect(await health()).toBe(200);
    await pg.kill();
    const read = await server.request(`/v1/devices/${s.device.id}/telemetry/latest`, { key: s.key });
    expect(read.status).toBe(503);
    expect(await health()).toBe(503);
    await pg.start();
    await expect.poll(health, { timeout: 10_000, interval: 250 }).toBe(200);
  });

  it('stopped with no load: every request is 503 while down, then healthy again without any write once it answers', async () => {
    const s = await seedAccount(server, { plan: 'business' });
    // A device never seen by this node: its authentication needs the database.
    const unseen = await server.services.devices.create(s.account, { name: 'not in the cache' });
    expect((await ingest(server, { device_id: s.device.id, access_token: s.token, data: { n: 1 } })).status).toBe(200);
    const health = async () => (await server.request('/healthz')).status;
    expect(await health()).toBe(200);

    await pg.kill();
    const unavailable = { error: 'storage unavailable: database unreachable', retryAfter: '10' };
    const cached = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { n: 2 } });
    const uncached = await ingest(server, { device_id: unseen.device.id, access_token: unseen.accessToken, data: { n: 3 } });
    const read = await server.request(`/v1/devices/${s.device.id}/telemetry/latest`, { key: s.key });
    for (const r of [
      { status: cached.status, error: cached.body.error, retryAfter: cached.headers.get('retry-after') },
      { status: uncached.status, error: uncached.body.error, retryAfter: uncached.headers.get('retry-after') },
      { status: read.status, error: ((await read.json()) as { error: string }).error, retryAfter: read.headers.get('retry-after') },
    ])
      expect(r).toEqual({ status: 503, ...unavailable });
    expect(await health()).toBe(503);

    // Nothing is sent to the server from here on but /healthz, as from a load balancer's check.
    await pg.start();
    await expect.poll(health, { timeout: 10_000, interval: 250 }).toBe(200);
    expect((await ingest(server, { device_id: unseen.device.id, access_token: unseen.accessToken, data: { n: 4 } })).status).toBe(200);
  });
});
