/**
 * Three `serve` processes on one PostgreSQL and one snapshots folder behind haproxy are one
 * service (docs/cluster.md): what any node acknowledged, stored or signed in is there on every
 * node at once, and an admin change made with the CLI applies on every node within 1 s.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import { clusterHaproxyConfig } from '../helpers/clusterConfig.js';
import { runHaproxy } from '../helpers/haproxy.js';
import { freePort } from '../helpers/process.js';
import { tinyJpeg } from '../snapshots/images.js';
import { type ClusterSeed, connectViaHaproxy, historyOn, ingestVia, seedViaCli } from './support.js';

describe('a cluster of three nodes behind haproxy', () => {
  let cluster: Cluster;
  let seed: ClusterSeed;

  beforeAll(async () => {
    cluster = await startCluster({ nodes: 3 });
    seed = await seedViaCli(cluster);
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('serves readings ingested through haproxy (HTTP and MQTT QoS 1) from every node at once', async () => {
    // Round robin: six requests reach each of the three nodes twice.
    for (let n = 0; n < 6; n++) expect(await ingestVia(cluster.url, seed, { n, via: 'http' })).toBe(200);
    const clients = [];
    for (let i = 0; i < 3; i++) clients.push(await connectViaHaproxy(cluster, seed, `cluster-shared-${i}`));
    try {
      // publishAsync resolves on the PUBACK, sent only after the commit.
      await Promise.all(
        clients.map((c, i) => c.publishAsync(`d/${seed.deviceId}/t`, JSON.stringify({ n: 6 + i, via: 'mqtt' }), { qos: 1 })),
      );
    } finally {
      await Promise.all(clients.map((c) => c.endAsync()));
    }
    // Each node asked directly, right after the last acknowledgement.
    for (const node of cluster.nodes) {
      const rows = await historyOn(node.url, seed);
      expect(
        rows.map((r) => r.n).sort((a, b) => Number(a) - Number(b)),
        node.url,
      ).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }
  });

  it('serves a snapshot uploaded through one node from the others', async () => {
    const cam = await seedViaCli(cluster, ['--type', 'camera', '--snapshots']);
    const image = tinyJpeg('cluster snapshot');
    const up = await fetch(`${cluster.nodes[0]!.url}/api/devices/${cam.deviceId}/snapshot`, {
      method: 'POST',
      headers: { authorization: `Bearer ${cam.token}`, 'content-type': 'image/jpeg' },
      body: new Uint8Array(image),
    });
    expect(up.status).toBe(200);
    const { url } = (await up.json()) as { url: string };
    for (const node of cluster.nodes.slice(1)) {
      const got = await fetch(`${node.url}${url}`, { headers: { authorization: `Bearer ${cam.key}` } });
      expect(got.status, node.url).toBe(200);
      expect(Buffer.from(await got.arrayBuffer()).equals(image)).toBe(true);
    }
  });

  it('accepts a dashboard session created on one node on every other node', async () => {
    const email = `dash-${Math.random().toString(36).slice(2)}@example.com`;
    const acc = await cluster.cli(
      ['accounts', 'create', '--email', email, '--plan', 'business', '--password-stdin', '--json'],
      'password-123\n',
    );
    expect(acc.status, acc.stderr).toBe(0);
    const signIn = await fetch(`${cluster.nodes[1]!.url}/ui/api/sign-in`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' },
      body: JSON.stringify({ email, password: 'password-123' }),
    });
    expect(signIn.status).toBe(200);
    const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0]!;
    expect(cookie).toMatch(/=./);
    for (const node of cluster.nodes) {
      const me = await fetch(`${node.url}/ui/api/devices`, { headers: { cookie } });
      expect(me.status, node.url).toBe(200);
    }
    // And a request without the cookie is refused, so the 200s above are the session's doing.
    expect((await fetch(`${cluster.nodes[2]!.url}/ui/api/devices`)).status).toBe(401);
  });

  it('applies a device paused with the CLI on every node within 1 s (403 through each node)', async () => {
    const paused = await seedViaCli(cluster);
    for (const node of cluster.nodes) expect(await ingestVia(node.url, paused, { n: 1 })).toBe(200);
    const cli = await cluster.cli(['devices', 'pause', paused.deviceId, '--json']);
    expect(cli.status, cli.stderr).toBe(0);
    const pausedAt = Date.now();
    const refusedAt: number[] = [];
    for (const node of cluster.nodes) {
      for (;;) {
        const status = await ingestVia(node.url, paused, { n: 2 });
        if (status === 403) break;
        expect(status).toBe(200);
        expect(Date.now() - pausedAt, `${node.url} still accepts the paused device`).toBeLessThan(1_000);
        await new Promise((r) => setTimeout(r, 20));
      }
      refusedAt.push(Date.now() - pausedAt);
    }
    expect(Math.max(...refusedAt)).toBeLessThan(1_000);
    // Through haproxy too, whichever node it picks.
    for (let i = 0; i < 3; i++) expect(await ingestVia(cluster.url, paused, { n: 3 })).toBe(403);
  });

  it('runs the haproxy configuration of docs/cluster.md as written, addresses and ports aside', async () => {
    const doc = readFileSync('docs/cluster.md', 'utf8');
    const shown = /```haproxy\n([\s\S]*?)```/.exec(doc)?.[1] ?? '';
    // The text is the helper's configuration for three hosts, with production check intervals.
    const docNodes = [11, 12, 13].map((h) => ({ host: `10.0.0.${h}`, http: 8080, mqttTls: 8884, mqttPlain: 1884 }));
    expect(shown).toBe(clusterHaproxyConfig({ bind: { http: ':80', mqttTls: ':8883' }, nodes: docNodes, checkInterval: '5s' }));

    const ports = { http: await freePort(), mqtt: await freePort() };
    let config = replaceOnce(shown, 'bind :80\n', `bind 127.0.0.1:${ports.http}\n`);
    config = replaceOnce(config, 'bind :8883\n', `bind 127.0.0.1:${ports.mqtt}\n`);
    for (const [i, node] of cluster.nodes.entries()) {
      config = replaceOnce(config, `10.0.0.1${i + 1}:8080 `, `127.0.0.1:${node.ports.http} `);
      config = replaceOnce(
        config,
        `10.0.0.1${i + 1}:8884 send-proxy-v2 check port 8080 `,
        `127.0.0.1:${node.ports.mqttTls} send-proxy-v2 check port ${node.ports.http} `,
      );
    }
    config = config.replaceAll('inter 5s', 'inter 200');
    const proxy = await runHaproxy(config, ports);
    try {
      for (let n = 100; n < 103; n++) expect(await ingestVia(`http://127.0.0.1:${ports.http}`, seed, { n }), proxy.output()).toBe(200);
      // The nodes present the certificate generated for the cluster (no --tls-cert), written
      // into each data dir: the one this connection got must be it, so TLS ends at a node,
      // not at haproxy.
      const fingerprints = cluster.nodes.map(
        (n) => new X509Certificate(readFileSync(path.join(n.dataDir, 'tls', 'cert.pem'))).fingerprint256,
      );
      let presented = '';
      const client = new MqttClient(
        () => {
          const socket = tls.connect({ host: '127.0.0.1', port: ports.mqtt, rejectUnauthorized: false, servername: 'localhost' });
          socket.once('secureConnect', () => (presented = socket.getPeerX509Certificate()?.fingerprint256 ?? ''));
          return socket;
        },
        { username: seed.deviceId, password: seed.token, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 5_000 },
      );
      await new Promise<void>((resolve, reject) => {
        client.once('connect', () => resolve());
        client.once('error', reject);
      });
      await client.publishAsync(`d/${seed.deviceId}/t`, JSON.stringify({ n: 103 }), { qos: 1 });
      await client.endAsync();
      expect(fingerprints).toContain(presented);
      const stored = (await historyOn(cluster.nodes[0]!.url, seed)).map((r) => r.n);
      expect(stored).toEqual(expect.arrayContaining([100, 101, 102, 103]));
      // Rounds of checks (/healthz, for the MQTT backend too) ran against every node: none failed.
      await new Promise((r) => setTimeout(r, 1_000));
      expect(proxy.output()).not.toMatch(/is DOWN|Health check.*failed/i);
    } finally {
      await proxy.stop();
    }
  });

  it('gives in the systemd unit of docs/cluster.md options serve has, the database URL from its environment file', () => {
    const doc = readFileSync('docs/cluster.md', 'utf8');
    const unit = /```ini\n([\s\S]*?)```/.exec(doc)?.[1] ?? '';
    const envFile = /^EnvironmentFile=(\S+)$/m.exec(unit)?.[1];
    expect(envFile).toBe('/etc/telemetryd/cluster.env');
    // The database and the snapshots folder come from the file, which admin commands read too.
    expect(doc).toMatch(/^TELEMETRYD_DATABASE_URL=postgres:\/\/\S+$/m);
    expect(doc).toMatch(/^TELEMETRYD_SNAPSHOTS_DIR=\/\S+$/m);
    const execStart = /^ExecStart=((?:.*\\\n)*.*)$/m.exec(unit)?.[1] ?? '';
    const flags = execStart.match(/--[a-z-]+/g) ?? [];
    expect(flags).toEqual(expect.arrayContaining(['--trust-proxy', '--mqtt-proxy-protocol', '--data-dir']));
    expect(flags).not.toContain('--snapshots-dir');
    const help = runCli(['serve', '--help']).stdout.replace(/\s+/g, ' ');
    for (const flag of flags) expect(help, flag).toContain(`${flag} `);
    expect(help).toContain('env: TELEMETRYD_DATABASE_URL');
    expect(help).toContain('env: TELEMETRYD_SNAPSHOTS_DIR');
  });
});

/** Replaces the one occurrence of `from` (the test fails if the example no longer has it). */
function replaceOnce(text: string, from: string, to: string): string {
  expect(text.split(from).length - 1, `"${from}" in the example`).toBe(1);
  return text.replace(from, to);
}
