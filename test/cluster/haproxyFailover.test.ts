/**
 * The cluster's haproxy configuration (docs/cluster.md) sends a connection that a dead node
 * refuses on to a live one, for HTTP and for MQTT, in the seconds before haproxy's checks
 * mark the node down. Least connections would otherwise send every new MQTT device to the
 * dead node, which holds none.
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterHaproxyConfig } from '../helpers/clusterConfig.js';
import { type RunningHaproxy, runHaproxy } from '../helpers/haproxy.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { freePort } from '../helpers/process.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { certPath } from '../mqtt/support.js';

describe('haproxy in front of a cluster with a node that died before its check noticed', () => {
  let pg: PostgresServer;
  let live: TestServer;
  let proxy: RunningHaproxy;
  let a: Awaited<ReturnType<typeof seedAccount>>;

  beforeAll(async () => {
    // A cluster's node: its checks expect PostgreSQL storage.
    pg = await startPostgres();
    live = await startTestServer({
      'database-url': await createDatabase(pg),
      'mqtt-port': '0',
      'trust-proxy': true,
      'mqtt-proxy-protocol': true,
    });
    a = await seedAccount(live);
    // Nothing listens on the dead node's ports; its checks run once a minute, so haproxy
    // still takes it for up during the test.
    const dead = { http: await freePort(), mqttTls: await freePort(), mqttPlain: await freePort() };
    const ports = { http: await freePort(), mqttTls: await freePort() };
    const config = clusterHaproxyConfig({
      bind: { http: `127.0.0.1:${ports.http}`, mqttTls: `127.0.0.1:${ports.mqttTls}` },
      nodes: [dead, { http: Number(new URL(live.httpUrl).port), mqttTls: live.mqttPort!, mqttPlain: 0 }],
      checkInterval: '60s',
    });
    proxy = await runHaproxy(config, ports);
  });
  afterAll(async () => {
    await proxy?.stop();
    await live?.stop();
    await pg?.stop();
  });

  it('connects every MQTT device and answers every request through the live node', async () => {
    const connect = () =>
      new Promise<MqttClient>((resolve, reject) => {
        const client = new MqttClient(
          () =>
            tls.connect({
              socket: net.connect({ host: '127.0.0.1', port: proxy.ports.mqttTls! }),
              ca: readFileSync(certPath(live)),
              servername: 'localhost',
            }),
          { username: a.device.id, password: a.token, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 5_000, clean: true },
        );
        client.once('connect', () => resolve(client));
        client.once('error', reject);
        client.once('close', () => reject(new Error(`closed before CONNACK: ${proxy.output()}`)));
      });
    // One after the other: with no connections left on either node, least connections
    // rotates between them, so about half of these go to the dead node first.
    for (let i = 0; i < 4; i++) {
      const client = await connect();
      await client.publishAsync(`d/${a.device.id}/t`, JSON.stringify({ i }), { qos: 1 });
      await client.endAsync();
    }
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`http://127.0.0.1:${proxy.ports.http}/api/devices/ingest`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ device_id: a.device.id, access_token: a.token, data: { h: i } }),
      });
      expect(res.status, proxy.output()).toBe(200);
    }
    const history = await (await live.request(`/v1/devices/${a.device.id}/telemetry?range=1h`, { key: a.key })).json();
    expect(history.data).toHaveLength(8);
  });
});

describe('haproxy in front of a cluster with a node started without its database URL', () => {
  let pg: PostgresServer;
  let node: TestServer;
  let stray: TestServer;
  let proxy: RunningHaproxy;

  beforeAll(async () => {
    pg = await startPostgres();
    const options = { 'mqtt-port': '0', 'trust-proxy': true, 'mqtt-proxy-protocol': true };
    node = await startTestServer({ 'database-url': await createDatabase(pg), ...options });
    // Same flags but no database URL: a SQLite file in its own data dir.
    stray = await startTestServer(options);
    const ports = { http: await freePort(), mqttTls: await freePort() };
    const portsOf = (s: TestServer) => ({ http: Number(new URL(s.httpUrl).port), mqttTls: s.mqttPort!, mqttPlain: 0 });
    proxy = await runHaproxy(
      clusterHaproxyConfig({
        bind: { http: `127.0.0.1:${ports.http}`, mqttTls: `127.0.0.1:${ports.mqttTls}` },
        nodes: [portsOf(node), portsOf(stray)],
        checkInterval: '100',
      }),
      ports,
    );
  });
  afterAll(async () => {
    await proxy?.stop();
    await stray?.stop();
    await node?.stop();
    await pg?.stop();
  });

  it('takes it out of both backends, so it acknowledges nothing the cluster does not see', async () => {
    for (let i = 0; i < 100 && (proxy.output().match(/node2 is DOWN/g) ?? []).length < 2; i++) await new Promise((r) => setTimeout(r, 50));
    expect(proxy.output()).toMatch(/telemetryd_http\/node2 is DOWN/);
    expect(proxy.output()).toMatch(/telemetryd_mqtt\/node2 is DOWN/);
    expect(proxy.output()).not.toMatch(/node1 is DOWN/);
    // Round robin would send half of these to the stray node, which does not know the device.
    const a = await seedAccount(node);
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`http://127.0.0.1:${proxy.ports.http}/api/devices/ingest`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ device_id: a.device.id, access_token: a.token, data: { i } }),
      });
      expect(res.status, proxy.output()).toBe(200);
    }
    const history = await (await node.request(`/v1/devices/${a.device.id}/telemetry?range=1h`, { key: a.key })).json();
    expect(history.data).toHaveLength(4);
  });
});
