/**
 * What every node of a cluster sees (docs/cluster.md, "What every node sees"): two or three
 * real servers on one throwaway PostgreSQL database, driven with mqtt.js, fetch, the
 * dashboard's event stream and the admin CLI (the built bundle): an MQTT client id taken over
 * across nodes, admin changes closing sessions on the node that holds them, readings of one
 * node on another's live view, rate limits counted across nodes, and one certificate and one
 * setup link per cluster.
 */
import { createHash } from 'node:crypto';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import mqtt, { type MqttClient } from 'mqtt';
import type { Pool } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres } from '../../src/storage/postgres/connect.js';
import { runCliAsync } from '../helpers/cli.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { ingest, seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';

const connectMqtt = (server: TestServer, username: string, password: string, clientId?: string): Promise<MqttClient> =>
  mqtt.connectAsync(
    `mqtt://127.0.0.1:${server.mqttPlainPort}`,
    { username, password, clientId, reconnectPeriod: 0, connectTimeout: 5_000 },
    false,
  );

/** Resolves with the time it took the server to close the client's connection; rejects after `timeoutMs`. */
function closedWithin(client: MqttClient, timeoutMs: number): Promise<number> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    if (!client.connected) return resolve(0);
    const timer = setTimeout(() => reject(new Error(`connection still open after ${timeoutMs} ms`)), timeoutMs);
    client.once('close', () => {
      clearTimeout(timer);
      resolve(Date.now() - started);
    });
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const json = { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' };

async function signIn(server: TestServer, email: string, password: string) {
  const res = await server.request('/ui/api/sign-in', { method: 'POST', headers: json, body: JSON.stringify({ email, password }) });
  expect(res.status).toBe(200);
  const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0]!;
  const body = (await res.json()) as { csrf_token: string };
  return { cookie, csrf: body.csrf_token };
}

describe('what every node sees (PostgreSQL cluster)', () => {
  let pg: PostgresServer;
  let url: string;
  let a: TestServer;
  let b: TestServer;
  let observer: Pool;
  const clients: MqttClient[] = [];

  beforeAll(async () => {
    pg = await startPostgres();
    url = await createDatabase(pg);
    [a, b] = await Promise.all([
      startTestServer({ 'database-url': url, 'mqtt-plain-port': '0' }),
      startTestServer({ 'database-url': url, 'mqtt-plain-port': '0' }),
    ]);
    observer = await connectPostgres(url, { max: 2 });
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true).catch(() => {})));
  });
  afterAll(async () => {
    await a?.stop();
    await b?.stop();
    await observer?.end();
    await pg?.stop();
  });

  /** Connects and remembers the client for clean-up. */
  const connect = async (server: TestServer, username: string, password: string, clientId?: string) => {
    const client = await connectMqtt(server, username, password, clientId);
    clients.push(client);
    return client;
  };

  describe('MQTT client id taken over on another node', () => {
    it('closes the older session on the first node within 1 s; the newer one stays', async () => {
      const { device, token } = await seedAccount(a);
      const first = await connect(a, device.id, token, 'sensor-x');
      expect(first.connected).toBe(true);
      const second = await connect(b, device.id, token, 'sensor-x');
      expect(await closedWithin(first, 1_000)).toBeLessThan(1_000);
      await sleep(300);
      expect(second.connected).toBe(true);
      // The newer session works: a QoS 1 reading is acknowledged through node B.
      await second.publishAsync(`d/${device.id}/t`, JSON.stringify({ v: 1 }), { qos: 1 });
      const { rows } = await observer.query(
        'SELECT count(*)::int AS n FROM readings r JOIN devices d ON d.seq = r.device_seq WHERE d.id = $1',
        [device.id],
      );
      expect(rows[0].n).toBe(1);
    });

    it('keeps only the newest of quick reconnections that alternate between nodes', async () => {
      const { device, token } = await seedAccount(a);
      const first = await connect(a, device.id, token, 'flapping');
      const second = await connect(b, device.id, token, 'flapping');
      const third = await connect(a, device.id, token, 'flapping');
      await closedWithin(first, 1_000);
      await closedWithin(second, 1_000);
      await sleep(500);
      expect(third.connected).toBe(true);
    });

    it('leaves other client ids, and the same client id of another device, connected', async () => {
      const one = await seedAccount(a);
      const two = await seedAccount(a);
      const other = await connect(a, one.device.id, one.token, 'other-id');
      const sameIdOtherDevice = await connect(a, two.device.id, two.token, 'shared-id');
      await connect(b, one.device.id, one.token, 'shared-id');
      await sleep(500);
      expect(other.connected).toBe(true);
      expect(sameIdOtherDevice.connected).toBe(true);
    });
  });

  describe('admin changes close sessions on whichever node holds them', () => {
    /** A device with a password-signed account, connected to node B. */
    async function connectedOnB() {
      const seeded = await seedAccount(a);
      await a.services.accounts.setPassword(seeded.account.seq, 'password-123');
      const client = await connect(b, seeded.device.id, seeded.token);
      return { ...seeded, client };
    }

    it.each([
      ['pause', (id: string) => ({ path: `/ui/api/devices/${id}/pause`, body: {} })],
      ['regenerate-token', (id: string) => ({ path: `/ui/api/devices/${id}/regenerate-token`, body: {} })],
      ['delete', (id: string) => ({ path: `/ui/api/devices/${id}/delete`, body: { confirm_name: 'sensor 1' } })],
    ])('%s through node A’s dashboard closes the session on node B within 1 s', async (_name, action) => {
      const { account, device, client } = await connectedOnB();
      const { cookie, csrf } = await signIn(a, account.email, 'password-123');
      const { path: route, body } = action(device.id);
      const res = await a.request(route, {
        method: 'POST',
        headers: { 'content-type': 'application/json', cookie, 'x-csrf-token': csrf },
        body: JSON.stringify(body),
      });
      expect(res.status, await res.clone().text()).toBe(200);
      expect(await closedWithin(client, 1_000)).toBeLessThan(1_000);
    });

    const db = () => ['--database-url', url];

    it('pause, regenerate-token and delete through the admin CLI close the session on node B within 1 s', async () => {
      for (const command of [['pause'], ['regenerate-token'], ['delete', '--yes']]) {
        const { device, client } = await connectedOnB();
        const [name, ...flags] = command;
        const result = await runCliAsync(['devices', name!, device.id, ...flags, '--json', ...db()]);
        expect(result.status, result.stderr).toBe(0);
        expect(await closedWithin(client, 1_000), name).toBeLessThan(1_000);
      }
    });

    it('suspending the account through the admin CLI closes the session on node B within 1 s', async () => {
      const { account, client } = await connectedOnB();
      const result = await runCliAsync(['accounts', 'suspend', account.id, '--json', ...db()]);
      expect(result.status, result.stderr).toBe(0);
      expect(await closedWithin(client, 1_000)).toBeLessThan(1_000);
    });
  });

  describe('the dashboard’s live view', () => {
    /** Opens the dashboard's event stream on `server`; collects its `reading` events. */
    async function liveView(server: TestServer, cookie: string) {
      const controller = new AbortController();
      const res = await server.request('/ui/api/events', { headers: { cookie }, signal: controller.signal });
      expect(res.status).toBe(200);
      const readings: { device_id: string; reading: { id: string; data: Record<string, unknown> } }[] = [];
      const waiters: (() => void)[] = [];
      void (async () => {
        const decoder = new TextDecoder();
        let buffer = '';
        try {
          for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
            buffer += decoder.decode(chunk, { stream: true });
            let end = buffer.indexOf('\n\n');
            while (end >= 0) {
              const frame = buffer.slice(0, end);
              buffer = buffer.slice(end + 2);
              const event = /^event: (.*)$/m.exec(frame)?.[1];
              const data = /^data: (.*)$/m.exec(frame)?.[1];
              if (event === 'reading' && data) {
                readings.push(JSON.parse(data));
                for (const w of waiters.splice(0)) w();
              }
              end = buffer.indexOf('\n\n');
            }
          }
        } catch {
          // aborted
        }
      })();
      /** Resolves once `count` readings have arrived (at once if they already have). */
      const received = (count: number, timeoutMs: number) =>
        new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`${readings.length} of ${count} readings within ${timeoutMs} ms`)), timeoutMs);
          const check = () => {
            if (readings.length < count) return void waiters.push(check);
            clearTimeout(timer);
            resolve();
          };
          check();
        });
      return { readings, received, close: () => controller.abort() };
    }

    it('shows on node A a reading ingested on node B within 1 s, once', async () => {
      const seeded = await seedAccount(a);
      await a.services.accounts.setPassword(seeded.account.seq, 'password-123');
      const { cookie } = await signIn(a, seeded.account.email, 'password-123');
      const viewA = await liveView(a, cookie);
      const viewB = await liveView(b, cookie);
      try {
        await sleep(200); // the streams are subscribed once their first bytes arrived; give the follow a moment
        const arrived = viewA.received(1, 1_000);
        const started = Date.now();
        const stored = await ingest(b, { device_id: seeded.device.id, access_token: seeded.token, data: { temp: 21.5 } });
        expect(stored.status).toBe(200);
        await arrived;
        expect(Date.now() - started).toBeLessThan(1_000);
        expect(viewA.readings).toEqual([
          { device_id: seeded.device.id, reading: expect.objectContaining({ id: expect.stringMatching(/^tel_/), data: { temp: 21.5 } }) },
        ]);
        // Node B's own view shows it from its own event, not a second time from the notification.
        await sleep(500);
        expect(viewB.readings.map((r) => r.reading.id)).toEqual([viewA.readings[0]!.reading.id]);
        expect(viewA.readings).toHaveLength(1);
      } finally {
        viewA.close();
        viewB.close();
      }
    });

    it('costs one notification per committed batch, not one per reading', async () => {
      const { account, device } = await seedAccount(a);
      const listener = await observer.connect();
      const payloads: string[] = [];
      listener.on('notification', (n) => {
        if (n.channel === 'telemetryd_readings') payloads.push(n.payload ?? '');
      });
      try {
        await listener.query('LISTEN telemetryd_readings');
        const now = Date.now();
        // Appended in one pass of the event loop: one batch, one statement.
        const seqs = await Promise.all(
          Array.from({ length: 100 }, (_, i) =>
            b.storage.writer.append({ deviceSeq: device.seq, accountSeq: account.seq, time: now - i, data: JSON.stringify({ i }) }),
          ),
        );
        await sleep(300);
        expect(payloads).toHaveLength(1);
        const [, minTime, maxTime, minSeq, maxSeq, devices] = payloads[0]!.split(' ');
        expect([Number(minTime), Number(maxTime)]).toEqual([now - 99, now]);
        expect([Number(minSeq), Number(maxSeq)]).toEqual([Math.min(...seqs), Math.max(...seqs)]);
        expect(devices).toBe(String(device.seq));
      } finally {
        await listener.query('UNLISTEN *');
        listener.release();
      }
    });

    it('shows every reading of a burst of batches once, and none of its own node’s batches in between', async () => {
      const { account, device } = await seedAccount(a);
      await a.services.accounts.setPassword(account.seq, 'password-123');
      const { cookie } = await signIn(a, account.email, 'password-123');
      const view = await liveView(a, cookie);
      try {
        await sleep(200);
        // Written straight to each node's writer: node A's own batches raise no event on A, so
        // any of them on A's view would have come from a fetch that took too much.
        for (let batch = 0; batch < 5; batch++) {
          const now = Date.now();
          await Promise.all(
            ['a', 'b'].flatMap((node) =>
              Array.from({ length: 20 }, (_, i) =>
                (node === 'a' ? a : b).storage.writer.append({
                  deviceSeq: device.seq,
                  accountSeq: account.seq,
                  time: now - i,
                  data: JSON.stringify({ node, batch, i }),
                }),
              ),
            ),
          );
        }
        await view.received(100, 2_000);
        await sleep(300);
        expect(view.readings).toHaveLength(100);
        expect(new Set(view.readings.map((r) => r.reading.id)).size).toBe(100);
        expect(view.readings.every((r) => r.reading.data.node === 'b')).toBe(true);
      } finally {
        view.close();
      }
    });

    it('does not show another account’s readings', async () => {
      const mine = await seedAccount(a);
      const theirs = await seedAccount(a);
      await a.services.accounts.setPassword(mine.account.seq, 'password-123');
      const { cookie } = await signIn(a, mine.account.email, 'password-123');
      const view = await liveView(a, cookie);
      try {
        await sleep(200);
        expect((await ingest(b, { device_id: theirs.device.id, access_token: theirs.token, data: { v: 1 } })).status).toBe(200);
        await ingest(b, { device_id: mine.device.id, access_token: mine.token, data: { v: 2 } });
        await view.received(1, 1_000);
        await sleep(300);
        expect(view.readings.map((r) => [r.device_id, r.reading.data])).toEqual([[mine.device.id, { v: 2 }]]);
      } finally {
        view.close();
      }
    });
  });

  describe('rate limits per account across nodes', () => {
    it('allows exactly the per-minute limit over both nodes, then 429 on both, with the same headers', async () => {
      const { account, key } = await seedAccount(a);
      // A low limit on the account's row (as a plan change stores it), heard by both nodes.
      await observer.query('UPDATE accounts SET rate_per_minute = 5 WHERE seq = $1', [account.seq]);
      await sleep(300);
      // Stay inside one UTC minute: wait for the next one if this one is nearly over.
      if (60_000 - (Date.now() % 60_000) < 5_000) await sleep(60_000 - (Date.now() % 60_000) + 100);
      const statuses: number[] = [];
      const remaining: string[] = [];
      for (let i = 0; i < 8; i++) {
        const node = i % 2 === 0 ? a : b;
        const res = await node.request('/v1/devices', { key });
        statuses.push(res.status);
        remaining.push(res.headers.get('x-ratelimit-remaining') ?? '');
        if (res.status === 429) {
          expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
          expect(res.headers.get('x-ratelimit-limit')).toBe('5');
        }
      }
      expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429]);
      expect(remaining).toEqual(['4', '3', '2', '1', '0', '0', '0', '0']);
    });
  });

  it('counts concurrent requests on both nodes exactly: the limit succeeds, the rest get 429', async () => {
    const { account, key } = await seedAccount(a);
    await observer.query('UPDATE accounts SET rate_per_minute = 7 WHERE seq = $1', [account.seq]);
    await sleep(300);
    if (60_000 - (Date.now() % 60_000) < 5_000) await sleep(60_000 - (Date.now() % 60_000) + 100);
    const statuses = await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).request('/v1/devices', { key }).then((r) => r.status)),
    );
    expect(statuses.filter((s) => s === 200)).toHaveLength(7);
    expect(statuses.filter((s) => s === 429)).toHaveLength(13);
    // The day window counted the same 7.
    const { rows } = await observer.query("SELECT n FROM rate_limit_counts WHERE account_seq = $1 AND window_kind = 'd'", [account.seq]);
    expect(rows).toEqual([{ n: 7 }]);
  });

  describe('one certificate and one setup link per cluster', () => {
    it('gives nodes with different data dirs the same certificate and setup link; the link works on node B', async () => {
      const fresh = await createDatabase(pg);
      const printed: string[][] = [[], []];
      const [c, d] = await Promise.all(
        [0, 1].map((i) => startTestServer({ 'database-url': fresh, 'mqtt-port': '0' }, { print: (line) => printed[i]!.push(line) })),
      );
      try {
        expect(c!.dataDir).not.toBe(d!.dataDir);
        expect(c!.mqttFingerprint).toMatch(/^[0-9A-F:]+$/);
        expect(d!.mqttFingerprint).toBe(c!.mqttFingerprint);
        // What each TLS listener presents, and what each node wrote into its own data dir.
        for (const node of [c!, d!]) {
          const presented = await presentedFingerprint(node.mqttPort!);
          expect(presented).toBe(c!.mqttFingerprint);
          const written = new (await import('node:crypto')).X509Certificate(readFileSync(path.join(node.dataDir, 'tls', 'cert.pem')));
          expect(written.fingerprint256).toBe(c!.mqttFingerprint);
        }
        const link = (lines: string[]) => lines.find((l) => l.startsWith('First run: open '))?.split(' ')[3];
        expect(link(printed[0]!)).toMatch(/\/setup\?token=\w{32}$/);
        const tokenC = new URL(link(printed[0]!)!).searchParams.get('token')!;
        const tokenD = new URL(link(printed[1]!)!).searchParams.get('token')!;
        expect(tokenD).toBe(tokenC);

        // The link printed by node C works on node D.
        const valid = await d!.request(`/ui/api/setup?token=${tokenC}`);
        expect(await valid.json()).toEqual({ valid: true });
        const setup = await d!.request('/ui/api/setup', {
          method: 'POST',
          headers: json,
          body: JSON.stringify({ token: tokenC, email: 'first@example.com', password: 'password-123' }),
        });
        expect(setup.status, await setup.clone().text()).toBe(200);
        // Used once: refused on node C too now, and the cluster's copy is gone.
        expect(await (await c!.request(`/ui/api/setup?token=${tokenC}`)).json()).toEqual({ valid: false });
        const probe = await connectPostgres(fresh, { max: 1 });
        try {
          const { rows } = await probe.query("SELECT name FROM cluster_settings WHERE name = 'setup_token'");
          expect(rows).toEqual([]);
        } finally {
          await probe.end();
        }
      } finally {
        await Promise.all([c?.stop(), d?.stop()]);
      }
    });
  });
});

describe('a single node’s certificate becoming the cluster’s', () => {
  it('is offered by the first node that has one, so devices that pinned it keep working on every node', async () => {
    const pg = await startPostgres();
    const dataDir = tempDir();
    try {
      // A node that ran alone on SQLite first: its data dir holds a generated pair.
      const alone = await startTestServer({ 'data-dir': dataDir, 'mqtt-port': '0' });
      const pinned = alone.mqttFingerprint;
      await alone.stop();
      expect(pinned).toMatch(/^[0-9A-F:]+$/);

      const url = await createDatabase(pg);
      const first = await startTestServer({ 'data-dir': dataDir, 'database-url': url, 'mqtt-port': '0' });
      const second = await startTestServer({ 'database-url': url, 'mqtt-port': '0' });
      try {
        expect(first.mqttFingerprint).toBe(pinned);
        expect(second.mqttFingerprint).toBe(pinned);
        expect(await presentedFingerprint(second.mqttPort!)).toBe(pinned);
      } finally {
        await Promise.all([first.stop(), second.stop()]);
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
      await pg.stop();
    }
  });
});

/** The SHA-256 fingerprint of the certificate a TLS listener presents, as node:crypto formats it. */
function presentedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false }, () => {
      const raw = socket.getPeerCertificate().raw;
      socket.destroy();
      resolve(createHash('sha256').update(raw).digest('hex').toUpperCase().match(/../g)!.join(':'));
    });
    socket.once('error', reject);
  });
}
