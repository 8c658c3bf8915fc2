/**
 * --mqtt-proxy-protocol behind a real haproxy in TCP mode: `send-proxy` (v1) and
 * `send-proxy-v2` in front of the TLS and the plain listener. The MQTT auth throttle counts
 * failures per client address, so it tells which address the server saw. Clients bind
 * 127.0.0.2 / 127.0.0.3 so haproxy sees two different clients on one machine.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { promisify } from 'node:util';
import { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningHaproxy, startHaproxy } from '../helpers/haproxy.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { certPath } from './support.js';

const run = promisify(execFile);

/** Failed CONNECTs from one address before it is locked out (src/mqtt/authThrottle.ts). */
const MAX_FAILURES = 10;
/** CONNACK return code of a locked-out address: server unavailable. */
const SERVER_UNAVAILABLE = 3;

type Outcome = { connected: MqttClient } | { refused: number } | { closed: true };

/**
 * Connects mqtt.js from `localAddress` to `port` on 127.0.0.1 (over TLS when `ca` is given,
 * trusting only the server's certificate) and resolves with what happened: connected, a
 * CONNACK refusal with its code, or a connection closed without any CONNACK.
 */
function connectFrom(port: number, localAddress: string, creds: { username: string; password: string }, ca?: Buffer): Promise<Outcome> {
  const client = new MqttClient(
    () =>
      ca
        ? tls.connect({ socket: net.connect({ host: '127.0.0.1', port, localAddress }), ca, servername: 'localhost' })
        : net.connect({ host: '127.0.0.1', port, localAddress }),
    { ...creds, protocolVersion: 4, reconnectPeriod: 0, connectTimeout: 5_000, keepalive: 30 },
  );
  return new Promise((resolve) => {
    client.once('connect', () => resolve({ connected: client }));
    client.once('error', (err) => {
      const code = (err as { code?: unknown }).code;
      client.end(true);
      resolve(typeof code === 'number' ? { refused: code } : { closed: true });
    });
    client.once('close', () => {
      client.end(true);
      resolve({ closed: true });
    });
  });
}

describe('MQTT behind haproxy with --mqtt-proxy-protocol', () => {
  let server: TestServer;
  let proxy: RunningHaproxy;
  let ca: Buffer;
  let a: Awaited<ReturnType<typeof seedAccount>>;

  beforeAll(async () => {
    server = await startTestServer({ 'mqtt-port': '0', 'mqtt-plain-port': '0', 'mqtt-proxy-protocol': true });
    ca = readFileSync(certPath(server));
    a = await seedAccount(server, { email: 'proxied@example.com' });
    proxy = await startHaproxy([
      { name: 'tls_v1', mode: 'tcp', server: `127.0.0.1:${server.mqttPort} send-proxy` },
      // With health checks, which send a LOCAL header of their own, as a real setup would.
      { name: 'tls_v2', mode: 'tcp', server: `127.0.0.1:${server.mqttPort} send-proxy-v2 check inter 300` },
      { name: 'plain_v1', mode: 'tcp', server: `127.0.0.1:${server.mqttPlainPort} send-proxy` },
      { name: 'plain_v2', mode: 'tcp', server: `127.0.0.1:${server.mqttPlainPort} send-proxy-v2` },
    ]);
  });
  afterAll(async () => {
    await proxy?.stop();
    await server?.stop();
  });

  const latest = async (deviceId: string) =>
    (await (await server.request(`/v1/devices/${deviceId}/telemetry/latest`, { key: a.key })).json()).data;

  it('stores readings published through every listener and header version', async () => {
    const creds = { username: a.device.id, password: a.token };
    for (const [name, useTls] of [
      ['tls_v1', true],
      ['tls_v2', true],
      ['plain_v1', false],
      ['plain_v2', false],
    ] as const) {
      const outcome = await connectFrom(proxy.ports[name]!, '127.0.0.2', creds, useTls ? ca : undefined);
      expect(outcome, `${name}\n${proxy.output()}`).toHaveProperty('connected');
      const client = (outcome as { connected: MqttClient }).connected;
      await client.publishAsync(`d/${a.device.id}/t`, JSON.stringify({ via: name }), { qos: 1 });
      // QoS 1: the PUBACK came after the commit, so the reading is there now.
      expect(await latest(a.device.id)).toMatchObject({ data: { via: name } });
      await client.endAsync();
    }
  });

  it('mosquitto_pub through haproxy over TLS stores a reading', async () => {
    const { device, token, key } = await seedAccount(server, { email: 'mosquitto-proxied@example.com' });
    for (const [name, temp] of [
      ['tls_v1', 1],
      ['tls_v2', 2],
    ] as const) {
      await run('mosquitto_pub', [
        ...['--cafile', certPath(server), '-h', 'localhost', '-p', String(proxy.ports[name]), '-A', '127.0.0.3'],
        ...['-u', device.id, '-P', token, '-t', `d/${device.id}/t`, '-m', JSON.stringify({ temp }), '-q', '1'],
      ]);
      const res = await server.request(`/v1/devices/${device.id}/telemetry/latest`, { key });
      expect((await res.json()).data).toMatchObject({ data: { temp } });
    }
  });

  it('locks out the client haproxy names, on every listener, and not the other clients', async () => {
    const victim = await seedAccount(server, { email: 'throttled@example.com' });
    const wrong = { username: victim.device.id, password: 'not-the-token' };
    const right = { username: victim.device.id, password: victim.token };
    for (let i = 0; i < MAX_FAILURES; i++) {
      const outcome = await connectFrom(proxy.ports.tls_v2!, '127.0.0.4', wrong, ca);
      expect(outcome).toHaveProperty('refused');
      expect((outcome as { refused: number }).refused).not.toBe(SERVER_UNAVAILABLE);
    }
    // 127.0.0.4 is locked out, right credentials or not, whichever listener and header version.
    expect(await connectFrom(proxy.ports.tls_v2!, '127.0.0.4', right, ca)).toEqual({ refused: SERVER_UNAVAILABLE });
    expect(await connectFrom(proxy.ports.plain_v1!, '127.0.0.4', right)).toEqual({ refused: SERVER_UNAVAILABLE });
    // Another client behind the same haproxy (which connects from 127.0.0.1 for both) is not.
    const other = await connectFrom(proxy.ports.tls_v1!, '127.0.0.5', right, ca);
    expect(other).toHaveProperty('connected');
    await (other as { connected: MqttClient }).connected.endAsync();
  });

  it('closes connections that bypass haproxy and send no PROXY header', async () => {
    const creds = { username: a.device.id, password: a.token };
    expect(await connectFrom(server.mqttPort!, '127.0.0.2', creds, ca)).toEqual({ closed: true });
    expect(await connectFrom(server.mqttPlainPort!, '127.0.0.2', creds)).toEqual({ closed: true });
    // A malformed header is refused the same way: the server closes the connection.
    const forged = net.connect({ host: '127.0.0.1', port: server.mqttPlainPort! });
    forged.on('error', () => {});
    forged.resume();
    const closedByServer = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 5_000);
      forged.once('close', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    forged.write('PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n');
    expect(await closedByServer).toBe(true);
    // mosquitto_pub straight at the plain listener fails too.
    await expect(
      run('mosquitto_pub', [
        '-h',
        '127.0.0.1',
        '-p',
        String(server.mqttPlainPort),
        '-u',
        a.device.id,
        '-P',
        a.token,
        '-t',
        `d/${a.device.id}/t`,
        '-m',
        '{}',
        '-q',
        '1',
      ]),
    ).rejects.toThrow();
  });
});

describe('MQTT without --mqtt-proxy-protocol', () => {
  it('is unchanged: direct clients connect, and a PROXY header is not MQTT', async () => {
    const server = await startTestServer({ 'mqtt-port': '0', 'mqtt-plain-port': '0' });
    const proxy = await startHaproxy([{ name: 'plain_v2', mode: 'tcp', server: `127.0.0.1:${server.mqttPlainPort} send-proxy-v2` }]);
    try {
      const a = await seedAccount(server);
      const creds = { username: a.device.id, password: a.token };
      const direct = await connectFrom(server.mqttPlainPort!, '127.0.0.2', creds);
      expect(direct).toHaveProperty('connected');
      await (direct as { connected: MqttClient }).connected.endAsync();
      const tlsDirect = await connectFrom(server.mqttPort!, '127.0.0.2', creds, readFileSync(certPath(server)));
      expect(tlsDirect).toHaveProperty('connected');
      await (tlsDirect as { connected: MqttClient }).connected.endAsync();
      expect(await connectFrom(proxy.ports.plain_v2!, '127.0.0.2', creds)).toEqual({ closed: true });
    } finally {
      await proxy.stop();
      await server.stop();
    }
  });
});
