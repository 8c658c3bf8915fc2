/**
 * MQTT reliability and security (docs/reliability.md): malformed packets on the plain
 * listener close the connection and change nothing; failed CONNECTs are throttled per
 * client address; a reading the database cannot commit is not PUBACKed; MQTT ingest shows
 * in /metrics.
 */

import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import { afterEach, describe, expect, it } from 'vitest';
import { failReadingInserts, storedRows } from '../helpers/backend.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { closed, connectPlain, refusedCode } from '../mqtt/support.js';
import { readingsDigest } from './helpers.js';

let server: TestServer | null = null;
afterEach(async () => {
  await server?.stop();
  server = null;
});

/** Writes raw bytes to the plain MQTT port; resolves with what came back once it closes (or not). */
function rawMqtt(port: number, chunks: Buffer[], waitMs = 3_000): Promise<{ closed: boolean; reply: Buffer }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const received: Buffer[] = [];
    let done = false;
    const finish = (wasClosed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ closed: wasClosed, reply: Buffer.concat(received) });
    };
    const timer = setTimeout(() => finish(false), waitMs);
    socket.on('data', (d) => received.push(d));
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
    socket.on('connect', () => {
      for (const c of chunks) socket.write(c);
    });
  });
}

const connectPacket = (username: string, password: string, extra: Record<string, unknown> = {}) =>
  mqttPacket.generate({
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 4,
    clean: true,
    clientId: 'raw',
    keepalive: 30,
    username,
    password: Buffer.from(password),
    ...extra,
  } as mqttPacket.IConnectPacket);

describe('malformed MQTT packets', () => {
  it('close the connection, leave the data unchanged, and the broker keeps serving', async () => {
    server = await startTestServer({ 'mqtt-plain-port': '0' });
    const { device, token } = await seedAccount(server);
    const port = server.mqttPlainPort!;
    const good = await connectPlain(server, { username: device.id, password: token });
    await good.publishAsync(`d/${device.id}/t`, '{"n":1}', { qos: 1 });
    const before = await readingsDigest(server.dataDir);

    const publish = (payload: string | Buffer, topic = `d/${device.id}/t`) =>
      mqttPacket.generate({ cmd: 'publish', topic, payload, qos: 1, messageId: 7, dup: false, retain: false } as mqttPacket.IPublishPacket);
    const connect = connectPacket(device.id, token);
    const cases: [string, Buffer[]][] = [
      ['HTTP on the MQTT port', [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')]],
      ['a remaining length of five bytes', [Buffer.from([0x10, 0xff, 0xff, 0xff, 0xff, 0x7f])]],
      ['a CONNECT announcing 200 MB', [Buffer.from([0x10, 0x80, 0x80, 0x80, 0x60])]],
      ['a PUBLISH before CONNECT', [publish('{"n":2}')]],
      [
        'a CONNECT with a bad protocol name',
        [Buffer.from(connectPacket(device.id, token).toString('latin1').replace('MQTT', 'MQXX'), 'latin1')],
      ],
      [
        'a CONNECT with reserved flag set',
        [Buffer.concat([Buffer.from([0x10]), connect.subarray(1)]).map((b, i) => (i === 9 ? b | 0x01 : b)) as Buffer],
      ],
      ['two CONNECTs', [connect, connect]],
      ['a PUBLISH whose topic length overruns the packet', [connect, Buffer.from([0x32, 0x05, 0x7f, 0xff, 0x61, 0x00, 0x01])]],
      ['a PUBLISH to a wildcard topic', [connect, publish('{"n":3}', 'd/+/t')]],
      ['a PUBLISH with QoS 3', [connect, Buffer.from([0x36, 0x03, 0x00, 0x01, 0x61])]],
      ['an unknown packet type 0', [connect, Buffer.from([0x00, 0x00])]],
      ['a packet type 15 (AUTH is MQTT 5 only)', [connect, Buffer.from([0xf0, 0x00])]],
    ];
    // Seeded random bytes, some after a valid CONNECT.
    let state = 42;
    const rand = () => {
      state = (state * 1103515245 + 12345) & 0x7fffffff;
      return state / 0x7fffffff;
    };
    for (let i = 0; i < 30; i++) {
      const junk = Buffer.from(Array.from({ length: 2 + Math.floor(rand() * 60) }, () => Math.floor(rand() * 256)));
      cases.push([`random bytes #${i}`, i % 2 ? [connect, junk] : [junk]]);
    }

    const stillOpen: string[] = [];
    for (const [name, chunks] of cases) {
      const r = await rawMqtt(port, chunks, name.startsWith('random') ? 1_000 : 3_000);
      if (!r.closed) stillOpen.push(name);
    }
    // Random junk may happen to parse as a PINGREQ or a valid packet; the named cases must close.
    expect(stillOpen.filter((n) => !n.startsWith('random'))).toEqual([]);

    // The broker still serves: the connected client publishes, a new one connects.
    await good.publishAsync(`d/${device.id}/t`, '{"n":4}', { qos: 1 });
    const again = await connectPlain(server, { username: device.id, password: token });
    await again.publishAsync(`d/${device.id}/t`, '{"n":5}', { qos: 1 });
    await Promise.all([good.endAsync(), again.endAsync()]);
    const stored = (await storedRows(server.storage, device.seq)).map((r) => JSON.parse(r.data).n);
    expect(stored).toEqual([1, 4, 5]);
    // Nothing else was stored by any malformed packet.
    expect(before.count).toBe(1);
    expect((await server.request('/healthz')).status).toBe(200);
  }, 60_000);
});

describe('MQTT authentication throttle', () => {
  it('locks an address out after 10 failed CONNECTs for a minute, even with the right token', async () => {
    let now = Date.UTC(2026, 5, 1);
    server = await startTestServer({ 'mqtt-plain-port': '0' }, { clock: { now: () => now } });
    const { device, token } = await seedAccount(server);
    // Nine failures: still allowed to try, and the right token still works.
    for (let i = 0; i < 9; i++) expect(await refusedCode(connectPlain(server, { username: device.id, password: `guess${i}` }))).toBe(4);
    const ok = await connectPlain(server, { username: device.id, password: token });
    await ok.endAsync();
    // A success clears the address; ten new failures lock it.
    for (let i = 0; i < 10; i++) expect(await refusedCode(connectPlain(server, { username: device.id, password: `guess${i}` }))).toBe(4);
    expect(await refusedCode(connectPlain(server, { username: device.id, password: token }))).toBe(3);
    expect(await refusedCode(connectPlain(server, { username: 'dev_unknown', password: 'x' }))).toBe(3);
    // HTTP ingest from the same address is not affected (HTTP has no throttle by design).
    // After the lockout the right token works again.
    now += 61_000;
    const back = await connectPlain(server, { username: device.id, password: token });
    await back.publishAsync(`d/${device.id}/t`, '{"ok":1}', { qos: 1 });
    await back.endAsync();
  }, 60_000);
});

describe('MQTT under a database write failure', () => {
  it('does not PUBACK a reading that cannot be committed, and counts MQTT ingest in /metrics', async () => {
    server = await startTestServer({ 'mqtt-plain-port': '0' });
    const { device, token } = await seedAccount(server);
    const client = await connectPlain(server, { username: device.id, password: token });
    await client.publishAsync(`d/${device.id}/t`, '{"n":1}', { qos: 1 });
    await client.publishAsync(`d/${device.id}/t`, '[1,2]', { qos: 1 }); // a rejection, still PUBACKed
    let metrics = await (await server.request('/metrics')).text();
    expect(metrics).toContain('telemetryd_ingest_readings_total{transport="mqtt"} 1');
    expect(metrics).toContain('telemetryd_ingest_rejected_total{transport="mqtt"} 1');
    expect(metrics).toContain('telemetryd_mqtt_connections 1');

    const heal = await failReadingInserts(server, device.seq);
    try {
      let acked = false;
      client.publish(`d/${device.id}/t`, '{"n":2}', { qos: 1 }, (err) => {
        if (!err) acked = true;
      });
      await closed(client);
      expect(acked).toBe(false);
    } finally {
      await heal();
    }
    await client.endAsync(true);
    const stored = (await storedRows(server.storage, device.seq)).map((r) => JSON.parse(r.data).n);
    expect(stored).toEqual([1]);
    // Recovered without a restart.
    const again = await connectPlain(server, { username: device.id, password: token });
    await again.publishAsync(`d/${device.id}/t`, '{"n":3}', { qos: 1 });
    await again.endAsync();
    metrics = await (await server.request('/metrics')).text();
    expect(metrics).toContain('telemetryd_ingest_readings_total{transport="mqtt"} 2');
  }, 60_000);
});
