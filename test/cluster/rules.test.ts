/**
 * The cluster's rules (docs/cluster.md, "Once per cluster" and "What every node sees") end to
 * end: three nodes of the built bundle on one PostgreSQL behind haproxy, driven through
 * haproxy or each node's own listeners with mqtt.js, fetch, TLS sockets, a real webhook
 * receiver and the admin CLI. One cluster serves every test of the file; the leader's kill
 * comes last.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import mqtt, { type MqttClient } from 'mqtt';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startHttpReceiver } from '../alerts/helpers.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { type ClusterSeed, connectViaHaproxy, ingestVia, mqttConnectionsOn, seedViaCli } from './support.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resolves with how long the server took to close the client's connection; rejects after `timeoutMs`. */
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

/** Open MQTT connections of every node, each from its own /metrics. */
const connectionsPerNode = (cluster: Cluster) => Promise.all(cluster.nodes.map((n) => mqttConnectionsOn(n.url)));

/** Each node's `telemetryd_background_jobs_leader`, or null for a node that does not answer. */
const leaderGauges = (cluster: Cluster) =>
  Promise.all(
    cluster.nodes.map(async (n) => {
      try {
        const text = await (await fetch(`${n.url}/metrics`)).text();
        return Number(/^telemetryd_background_jobs_leader (\d)$/m.exec(text)?.[1] ?? Number.NaN);
      } catch {
        return null;
      }
    }),
  );

/**
 * The SHA-256 fingerprint of the certificate a node's MQTT over TLS listener presents. The
 * nodes run with --mqtt-proxy-protocol, so the connection opens with a PROXY v1 line as
 * haproxy would send it, and the TLS handshake follows on the same socket.
 */
function presentedByNode(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const raw = net.connect({ host: '127.0.0.1', port }, () => {
      raw.write(`PROXY TCP4 192.0.2.10 127.0.0.1 40000 ${port}\r\n`);
      const socket = tls.connect({ socket: raw, rejectUnauthorized: false, servername: 'localhost' }, () => {
        const fingerprint = socket.getPeerX509Certificate()?.fingerprint256 ?? '';
        socket.destroy();
        resolve(fingerprint);
      });
      socket.once('error', reject);
    });
    raw.once('error', reject);
  });
}

/** The certificate haproxy's MQTT over TLS frontend leads to (the node it picks presents it). */
function presentedThroughHaproxy(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, servername: 'localhost' }, () => {
      const fingerprint = socket.getPeerX509Certificate()?.fingerprint256 ?? '';
      socket.destroy();
      resolve(fingerprint);
    });
    socket.once('error', reject);
  });
}

/** Opens the dashboard's event stream on a node; collects its `reading` events. */
async function liveView(nodeUrl: string, cookie: string) {
  const controller = new AbortController();
  const res = await fetch(`${nodeUrl}/ui/api/events`, { headers: { cookie }, signal: controller.signal });
  expect(res.status).toBe(200);
  const readings: { device_id: string; reading: { id: string; data: Record<string, unknown> } }[] = [];
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
          if (event === 'reading' && data) readings.push(JSON.parse(data));
          end = buffer.indexOf('\n\n');
        }
      }
    } catch {
      // aborted by close()
    }
  })();
  return { readings, close: () => controller.abort() };
}

describe('the cluster rules through haproxy (three nodes)', () => {
  let cluster: Cluster;
  /** What each node printed at its first start, before any account existed. */
  let firstOutputs: string[];
  let receiver: Awaited<ReturnType<typeof startHttpReceiver>>;
  const clients: MqttClient[] = [];

  beforeAll(async () => {
    // One public URL for the cluster, as behind a real proxy: the setup link is then the
    // same text on every node, not only the same token.
    [cluster, receiver] = await Promise.all([
      startCluster({ nodes: 3, serveArgs: ['--public-url', 'http://telemetry.example.test'] }),
      startHttpReceiver(),
    ]);
    firstOutputs = cluster.nodes.map((n) => n.output());
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.endAsync(true).catch(() => {})));
  });
  afterAll(async () => {
    await cluster?.stop();
    await receiver?.close();
  });

  const connect = async (seed: ClusterSeed, clientId?: string, password = seed.token) => {
    const client = await mqtt.connectAsync(
      `mqtt://127.0.0.1:${cluster.mqttPlainPort}`,
      { username: seed.deviceId, password, clientId, reconnectPeriod: 0, connectTimeout: 5_000 },
      false,
    );
    clients.push(client);
    return client;
  };

  it('presents one generated certificate on every node, and every node printed the same setup link', async () => {
    const fingerprints = await Promise.all(cluster.nodes.map((n) => presentedByNode(n.ports.mqttTls)));
    expect(fingerprints[0]).toMatch(/^[0-9A-F]{2}(:[0-9A-F]{2}){31}$/);
    expect(new Set(fingerprints).size, fingerprints.join('\n')).toBe(1);
    // Each node wrote that pair into its own data dir, and printed its fingerprint.
    for (const [i, node] of cluster.nodes.entries()) {
      const written = new X509Certificate(readFileSync(path.join(node.dataDir, 'tls', 'cert.pem'))).fingerprint256;
      expect(written, `node${i + 1}`).toBe(fingerprints[0]);
      expect(firstOutputs[i]).toContain(`SHA-256 fingerprint ${fingerprints[0]}`);
    }
    // Through haproxy, whichever node it picks.
    for (let i = 0; i < 3; i++) expect(await presentedThroughHaproxy(cluster.mqttTlsPort)).toBe(fingerprints[0]);

    const links = firstOutputs.map((out) => /^First run: open (\S+) /m.exec(out)?.[1]);
    expect(links[0]).toMatch(/^http:\/\/telemetry\.example\.test\/setup\?token=\w{32}$/);
    expect(links).toEqual([links[0], links[0], links[0]]);
  });

  it('closes the older session when the same MQTT client id connects again through haproxy to another node', async () => {
    const seed = await seedViaCli(cluster);
    // haproxy balances MQTT by least connections, so the second connection goes to another
    // node; should both still land on one node, that is the one-node takeover: try again.
    for (let attempt = 1; ; attempt++) {
      const clientId = `takeover-${attempt}`;
      const first = await connect(seed, clientId);
      await expect.poll(async () => (await connectionsPerNode(cluster)).reduce((a, b) => a + b), { timeout: 2_000 }).toBe(1);
      const before = await connectionsPerNode(cluster);
      const firstNode = before.indexOf(1);
      const second = await connect(seed, clientId);
      const after = await connectionsPerNode(cluster);
      const secondNode = after.findIndex((c, i) => i !== firstNode && c > before[i]!);
      if (secondNode < 0) {
        expect(attempt, 'both connections landed on one node every time').toBeLessThan(5);
        await Promise.all(clients.splice(0).map((c) => c.endAsync(true)));
        await expect.poll(async () => (await connectionsPerNode(cluster)).reduce((a, b) => a + b), { timeout: 2_000 }).toBe(0);
        continue;
      }
      // The older session, on the first node, is closed within a second; the newer one stays.
      expect(await closedWithin(first, 1_000)).toBeLessThan(1_000);
      await sleep(500);
      expect(second.connected).toBe(true);
      const now = await connectionsPerNode(cluster);
      expect(now[firstNode]).toBe(0);
      expect(now[secondNode]).toBe(1);
      // And it works: a QoS 1 reading is acknowledged (after its commit) through the second node.
      await second.publishAsync(`d/${seed.deviceId}/t`, JSON.stringify({ after: 'takeover' }), { qos: 1 });
      return;
    }
  });

  it('closes a device’s MQTT sessions on every node when its token is regenerated with the CLI', async () => {
    const seed = await seedViaCli(cluster);
    // Three client ids at once on idle nodes: least connections gives each node one.
    await expect.poll(() => connectionsPerNode(cluster), { timeout: 2_000 }).toEqual([0, 0, 0]);
    const sessions = await Promise.all([0, 1, 2].map((i) => connect(seed, `regen-${i}`)));
    await expect.poll(() => connectionsPerNode(cluster), { timeout: 2_000 }).toEqual([1, 1, 1]);
    const closed = sessions.map((c) => closedWithin(c, 10_000));
    const regen = await cluster.cli(['devices', 'regenerate-token', seed.deviceId, '--json']);
    expect(regen.status, regen.stderr).toBe(0);
    const committedAt = Date.now();
    await Promise.all(closed);
    expect(Date.now() - committedAt).toBeLessThan(1_000);
    expect(await connectionsPerNode(cluster)).toEqual([0, 0, 0]);
    // The old token is refused through haproxy; the new one is taken.
    await expect(connectViaHaproxy(cluster, seed, 'regen-old')).rejects.toThrow();
    const fresh = await connect(seed, 'regen-new', regen.json.access_token);
    expect(fresh.connected).toBe(true);
  });

  it('counts per-account rate limits across nodes: past the limit, 429 through haproxy and from every node', async () => {
    const perMinute = await seedViaCli(cluster);
    const perDay = await seedViaCli(cluster);
    for (const [seed, flags] of [
      [perMinute, ['--rate-per-minute', '5']],
      [perDay, ['--rate-per-minute', '1000', '--rate-per-day', '4']],
    ] as const) {
      const set = await cluster.cli(['accounts', 'set-plan', seed.accountId, 'business', ...flags, '--json']);
      expect(set.status, set.stderr).toBe(0);
    }
    await sleep(1_000); // an admin change applies on every node within 1 s
    // Stay inside one UTC minute: wait for the next one if this one is nearly over.
    if (60_000 - (Date.now() % 60_000) < 5_000) await sleep(60_000 - (Date.now() % 60_000) + 100);
    const get = async (url: string, seed: ClusterSeed) => {
      const res = await fetch(`${url}/v1/devices`, { headers: { authorization: `Bearer ${seed.key}` } });
      await res.arrayBuffer();
      return res;
    };

    // Round robin: nine requests reach each node three times; per node, none would be refused.
    const statuses: number[] = [];
    for (let i = 0; i < 9; i++) {
      const res = await get(cluster.url, perMinute);
      statuses.push(res.status);
      expect(res.headers.get('x-ratelimit-limit')).toBe('5');
      if (res.status === 429) expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429, 429, 429, 429]);
    for (const node of cluster.nodes) expect((await get(node.url, perMinute)).status, node.url).toBe(429);

    const daily: number[] = [];
    for (let i = 0; i < 6; i++) daily.push((await get(cluster.url, perDay)).status);
    expect(daily).toEqual([200, 200, 200, 200, 429, 429]);
    for (const node of cluster.nodes) expect((await get(node.url, perDay)).status, node.url).toBe(429);
  });

  it('fires an alert matched on several nodes once per cooldown, and delivers its webhook once', async () => {
    const seed = await seedViaCli(cluster);
    const created = await cluster.cli([
      'alerts',
      'create',
      '--device',
      seed.deviceId,
      '--name',
      'hot',
      '--field',
      'temp',
      '--operator',
      '>',
      '--value',
      '50',
      '--cooldown',
      '3',
      '--action',
      'webhook',
      '--webhook-url',
      `${receiver.base}/hook`,
      '--json',
    ]);
    expect(created.status, created.stderr).toBe(0);
    const alertId = created.json.id as string;
    await sleep(1_000); // the new alert reaches every node's cache
    const hooks = () =>
      receiver.received
        .map((r) => JSON.parse(r.body) as { type: string; alert: { id: string }; event: { id: string } })
        .filter((b) => b.type === 'triggered' && b.alert.id === alertId);
    const history = async () => {
      const res = await fetch(`${cluster.url}/v1/alerts/${alertId}/history`, { headers: { authorization: `Bearer ${seed.key}` } });
      expect(res.status).toBe(200);
      return ((await res.json()) as { data: { id: string; triggered_at: string }[] }).data.reverse();
    };
    // Six matching readings at once through haproxy (round robin: two per node), twice within the cooldown.
    const burst = (base: number) =>
      Promise.all(Array.from({ length: 6 }, (_, i) => ingestVia(cluster.url, seed, { temp: base + i }))).then((s) =>
        expect(s).toEqual([200, 200, 200, 200, 200, 200]),
      );
    const started = Date.now();
    await burst(60);
    await burst(70);
    await expect.poll(() => hooks().length, { timeout: 5_000 }).toBeGreaterThanOrEqual(1);
    // Past the cooldown: the next burst fires once more.
    await sleep(Math.max(0, started + 3_300 - Date.now()));
    await burst(80);
    await expect.poll(() => hooks().length, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
    await sleep(1_500);
    const events = await history();
    expect(events).toHaveLength(2);
    const gap = Date.parse(events[1]!.triggered_at) - Date.parse(events[0]!.triggered_at);
    expect(gap).toBeGreaterThanOrEqual(3_000);
    expect(
      hooks()
        .map((h) => h.event.id)
        .sort(),
    ).toEqual(events.map((e) => e.id).sort());
  });

  it('shows on one node’s live view the readings ingested through the other nodes, once each', async () => {
    const email = `live-${Math.random().toString(36).slice(2)}@example.com`;
    const acc = await cluster.cli(
      ['accounts', 'create', '--email', email, '--plan', 'business', '--password-stdin', '--json'],
      'password-123\n',
    );
    expect(acc.status, acc.stderr).toBe(0);
    const dev = await cluster.cli(['devices', 'create', '--account', acc.json.id, '--name', 'live device', '--json']);
    expect(dev.status, dev.stderr).toBe(0);
    const seed = { accountId: acc.json.id, email, key: '', deviceId: dev.json.id, token: dev.json.access_token } as ClusterSeed;
    const viewer = cluster.nodes[0]!;
    const signIn = await fetch(`${viewer.url}/ui/api/sign-in`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' },
      body: JSON.stringify({ email, password: 'password-123' }),
    });
    expect(signIn.status).toBe(200);
    const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0]!;
    const view = await liveView(viewer.url, cookie);
    try {
      await sleep(300); // the stream is subscribed once it answered; give it a moment
      const started = Date.now();
      expect(await ingestVia(cluster.nodes[1]!.url, seed, { from: 'node2' })).toBe(200);
      expect(await ingestVia(cluster.nodes[2]!.url, seed, { from: 'node3' })).toBe(200);
      await expect.poll(() => view.readings.length, { timeout: 1_000, interval: 20 }).toBe(2);
      expect(Date.now() - started).toBeLessThan(1_000);
      await sleep(500);
      const shown = view.readings
        .map((r) => [r.device_id, r.reading.data])
        .sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y)));
      expect(shown).toEqual([
        [seed.deviceId, { from: 'node2' }],
        [seed.deviceId, { from: 'node3' }],
      ]);
    } finally {
      view.close();
    }
  });

  it('runs the background jobs on exactly one node; killed with SIGKILL, another leads within seconds', async () => {
    await expect.poll(async () => (await leaderGauges(cluster)).filter((g) => g === 1).length, { timeout: 5_000 }).toBe(1);
    const gauges = await leaderGauges(cluster);
    expect([...gauges].sort()).toEqual([0, 0, 1]);
    const leader = gauges.indexOf(1);

    const killedAt = Date.now();
    await cluster.kill(leader);
    await expect
      .poll(async () => (await leaderGauges(cluster)).filter((g, i) => i !== leader && g === 1).length, { timeout: 5_000, interval: 100 })
      .toBe(1);
    const tookOverMs = Date.now() - killedAt;
    expect(tookOverMs).toBeLessThan(5_000);
    // Still one: the other survivor follows.
    await sleep(1_500);
    const survivors = (await leaderGauges(cluster)).filter((_, i) => i !== leader);
    expect([...survivors].sort()).toEqual([0, 1]);

    // The killed node, started again, only follows.
    await cluster.restart(leader);
    await sleep(1_500);
    const after = await leaderGauges(cluster);
    expect(after[leader]).toBe(0);
    expect(after.filter((g) => g === 1)).toHaveLength(1);
  });
});
