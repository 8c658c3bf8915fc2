/**
 * The haproxy configuration in docs/operations.md ("haproxy in front of one node") runs as
 * written, ports aside, in front of a server started with the options shown there: HTTP and
 * MQTT over TLS pass through it, and haproxy's health checks keep both backends up.
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningHaproxy, runHaproxy } from '../helpers/haproxy.js';
import { freePort } from '../helpers/process.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { certPath } from '../mqtt/support.js';

const doc = readFileSync('docs/operations.md', 'utf8');
const section = doc.slice(doc.indexOf('### haproxy in front of one node'));
const exampleConfig = /```haproxy\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
const exampleCommand = /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? '';

/** Replaces the one occurrence of `from` (the test fails if the example no longer has it). */
function replaceOnce(text: string, from: string, to: string): string {
  expect(text.split(from).length - 1, `"${from}" in the example`).toBe(1);
  return text.replace(from, to);
}

describe('the haproxy example in docs/operations.md', () => {
  let server: TestServer;
  let proxy: RunningHaproxy;
  let a: Awaited<ReturnType<typeof seedAccount>>;

  beforeAll(async () => {
    // The options the example's command line gives, on ephemeral ports.
    for (const flag of ['--host 127.0.0.1', '--http-port 8080', '--mqtt-port 8884', '--trust-proxy', '--mqtt-proxy-protocol']) {
      expect(exampleCommand).toContain(flag);
    }
    server = await startTestServer({ 'mqtt-port': '0', 'trust-proxy': true, 'mqtt-proxy-protocol': true });
    a = await seedAccount(server);
    const ports = { http: await freePort(), mqtt: await freePort() };
    let config = replaceOnce(exampleConfig, 'bind :80\n', `bind 127.0.0.1:${ports.http}\n`);
    config = replaceOnce(config, 'bind :8883\n', `bind 127.0.0.1:${ports.mqtt}\n`);
    config = replaceOnce(config, '127.0.0.1:8080 ', `127.0.0.1:${new URL(server.httpUrl).port} `);
    config = replaceOnce(config, '127.0.0.1:8884 ', `127.0.0.1:${server.mqttPort} `);
    // Checks often enough that a failing one shows within the test.
    config = config.replaceAll('inter 5s', 'inter 200');
    proxy = await runHaproxy(config, ports);
  });
  afterAll(async () => {
    await proxy?.stop();
    await server?.stop();
  });

  it('passes HTTP ingest and MQTT over TLS through, with health checks passing', async () => {
    const res = await fetch(`http://127.0.0.1:${proxy.ports.http}/api/devices/ingest`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ device_id: a.device.id, access_token: a.token, data: { via: 'http' } }),
    });
    expect(res.status, proxy.output()).toBe(200);

    const client = new MqttClient(
      () =>
        tls.connect({
          socket: net.connect({ host: '127.0.0.1', port: proxy.ports.mqtt!, localAddress: '127.0.0.2' }),
          ca: readFileSync(certPath(server)),
          servername: 'localhost',
        }),
      { username: a.device.id, password: a.token, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 5_000 },
    );
    await new Promise<void>((resolve, reject) => {
      client.once('connect', () => resolve());
      client.once('error', reject);
    });
    await client.publishAsync(`d/${a.device.id}/t`, JSON.stringify({ via: 'mqtt' }), { qos: 1 });
    await client.endAsync();
    const latest = await (await server.request(`/v1/devices/${a.device.id}/telemetry/latest`, { key: a.key })).json();
    expect(latest.data).toMatchObject({ data: { via: 'mqtt' } });

    // Several rounds of checks have run (HTTP /healthz, MQTT with a LOCAL header): none failed.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(proxy.output()).not.toMatch(/is DOWN|Health check.*failed/i);
  });
});
