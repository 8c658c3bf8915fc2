import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import net from 'node:net';
import { promisify } from 'node:util';
import type { MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MAX_PACKET_BYTES } from '../../src/mqtt/broker.js';
import { failReadingInserts, storedRows } from '../helpers/backend.js';
import { runCliAsync } from '../helpers/cli.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { certPath, closed, connectPlain, connectTls, storedReadings, until } from './support.js';

const run = promisify(execFile);
const require = createRequire(import.meta.url);

describe('MQTT ingestion', () => {
  let server: TestServer;
  let a: Awaited<ReturnType<typeof seedAccount>>;
  const open: MqttClient[] = [];
  const track = (c: MqttClient) => {
    open.push(c);
    return c;
  };

  beforeAll(async () => {
    server = await startTestServer({ 'mqtt-port': '0', 'mqtt-plain-port': '0' });
    a = await seedAccount(server, { email: 'mqtt-a@example.com' });
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((c) => c.endAsync(true)));
  });
  afterAll(() => server.stop());

  const latest = async (deviceId: string, key = a.key) =>
    (await (await server.request(`/v1/devices/${deviceId}/telemetry/latest`, { key })).json()).data;
  const deviceRow = async (email: string, deviceId: string) => {
    const r = await runCliAsync(['devices', 'list', '--account', email, '--json'], { dataDir: server.dataDir });
    expect(r.status, r.stderr).toBe(0);
    return (r.json.data as Record<string, unknown>[]).find((d) => d.id === deviceId)!;
  };

  it('mosquitto_pub over TLS with --cafile stores a reading that /v1 …/telemetry/latest returns', async () => {
    const { device, token, key } = await seedAccount(server, { email: 'mosquitto@example.com' });
    await run('mosquitto_pub', [
      '--cafile',
      certPath(server),
      '-h',
      'localhost',
      '-p',
      String(server.mqttPort),
      '-u',
      device.id,
      '-P',
      token,
      '-t',
      `d/${device.id}/t`,
      '-m',
      '{"temp":21.5}',
      '-q',
      '1',
    ]);
    const data = await latest(device.id, key);
    expect(data).toMatchObject({ data: { temp: 21.5 } });
  });

  it('MQTT 3.1 (MQIsdp) clients are served like MQTT 3.1.1 ones: mqtt.js and mosquitto_pub -V mqttv31', async () => {
    const s = await seedAccount(server);
    const client = track(
      await connectTls(server, { username: s.device.id, password: s.token }, { protocolId: 'MQIsdp', protocolVersion: 3 }),
    );
    // Resolves only on the PUBACK.
    await client.publishAsync(`d/${s.device.id}/t`, '{"via":"mqtt.js"}', { qos: 1 });
    await run('mosquitto_pub', [
      ...['-V', 'mqttv31', '--cafile', certPath(server), '-h', 'localhost', '-p', String(server.mqttPort)],
      ...['-u', s.device.id, '-P', s.token, '-q', '1', '-t', `d/${s.device.id}/t`, '-m', '{"via":"mosquitto_pub"}'],
    ]);
    expect(await storedReadings(server, s.device.seq)).toEqual([{ via: 'mqtt.js' }, { via: 'mosquitto_pub' }]);
  });

  it('a reading over MQTT is indistinguishable through /v1 from one over HTTP', async () => {
    const viaHttp = await seedAccount(server, { email: 'shape@example.com' });
    const other = await server.services.devices.create(viaHttp.account, { name: 'mqtt twin' });
    expect(
      (
        await ingest(server, {
          device_id: viaHttp.device.id,
          access_token: viaHttp.token,
          data: { temp: 20, env: { hum: 40 }, label: 'x' },
        })
      ).status,
    ).toBe(200);
    const client = track(await connectTls(server, { username: other.device.id, password: other.accessToken }));
    await client.publishAsync(`d/${other.device.id}/t`, JSON.stringify({ temp: 20, env: { hum: 40 }, label: 'x' }), { qos: 1 });
    const h = await latest(viaHttp.device.id, viaHttp.key);
    const m = await latest(other.device.id, viaHttp.key);
    expect(Object.keys(m).sort()).toEqual(Object.keys(h).sort());
    expect(m.data).toEqual(h.data);
    expect(m.id).toMatch(/^tel_/);
    expect(m.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const list = await (await server.request(`/v1/devices/${other.device.id}/telemetry`, { key: viaHttp.key })).json();
    expect(list.data[0]).toEqual(m);
    const dev = await (await server.request(`/v1/devices/${other.device.id}`, { key: viaHttp.key })).json();
    expect(dev.data.last_seen).toBe(m.time);
  });

  it('QoS 1: the PUBACK arrives only once the reading is committed', async () => {
    const client = track(await connectTls(server, { username: a.device.id, password: a.token }));
    for (let i = 0; i < 5; i++) {
      // publishAsync resolves when the PUBACK arrives.
      await client.publishAsync(`d/${a.device.id}/t`, JSON.stringify({ n: i }), { qos: 1 });
      // Straight after the PUBACK, the row is in SQLite.
      expect((await storedReadings(server, a.device.seq)).at(-1)).toEqual({ n: i });
    }
  });

  it("PUBACKs leave mqtt-packet's table of 65,536 message-id Buffers unbuilt (about 6 MB of heap)", async () => {
    // The writer aedes uses is the one the broker configured: one copy of mqtt-packet.
    const ours = require.resolve('mqtt-packet/numbers');
    expect(createRequire(require.resolve('aedes')).resolve('mqtt-packet/numbers')).toBe(ours);
    const client = track(await connectTls(server, { username: a.device.id, password: a.token }));
    for (let i = 0; i < 3; i++) await client.publishAsync(`d/${a.device.id}/t`, JSON.stringify({ n: i }), { qos: 1 });
    expect((await storedReadings(server, a.device.seq)).at(-1)).toEqual({ n: 2 });
    expect(Object.keys(require(ours).cache)).toHaveLength(0);
  });

  it('a reading the database cannot commit is not PUBACKed: the client is disconnected and its resend is stored', async () => {
    const s = await seedAccount(server);
    // A real database failure on this device's inserts (a trigger), standing in for a full
    // disk or an I/O error.
    const heal = await failReadingInserts(server, s.device.seq);
    // A device that reconnects by itself and resends what was not acknowledged (mqtt.js
    // keeps the message across its automatic reconnects when clean is false).
    const client = track(
      await connectTls(server, { username: s.device.id, password: s.token }, { clean: false, clientId: 'resender', reconnectPeriod: 200 }),
    );
    let acked = false;
    const gone = closed(client);
    client.publish(`d/${s.device.id}/t`, '{"attempt":1}', { qos: 1 }, (err) => {
      if (!err) acked = true;
    });
    await gone;
    expect(acked).toBe(false);
    expect(await storedReadings(server, s.device.seq)).toEqual([]);
    // Not a rejection: nothing is counted against the device.
    expect((await server.services.devices.getAny(s.device.id)).rejectedCount).toBe(0);

    // While the failure lasts, each resend is refused the same way.
    await new Promise((r) => setTimeout(r, 600));
    expect(acked).toBe(false);
    expect(await storedReadings(server, s.device.seq)).toEqual([]);

    await heal();
    await until(() => (acked ? true : null));
    expect(await storedReadings(server, s.device.seq)).toEqual([{ attempt: 1 }]);
  });

  it('a payload is stored as its own JSON text; one with duplicate keys is re-serialized', async () => {
    const s = await seedAccount(server);
    const client = track(await connectPlain(server, { username: s.device.id, password: s.token }));
    const rawText = async (seq: number) => (await storedRows(server.storage, seq)).map((r) => r.data);
    const sent = '{ "temp" : 21.50, "env": {"hum": 40}, "label": "caf\\u00e9" }';
    await client.publishAsync(`d/${s.device.id}/t`, sent, { qos: 1 });
    expect(await rawText(s.device.seq)).toEqual([sent]);
    expect((await latest(s.device.id, s.key)).data).toEqual({ temp: 21.5, env: { hum: 40 }, label: 'café' });
    // JSON.parse keeps the last "a": the object passes the depth check, its text would not.
    // A colon inside a string only costs the shortcut: the reading is re-serialized.
    await client.publishAsync(`d/${s.device.id}/t`, '{ "at": "12:30" }', { qos: 1 });
    expect((await rawText(s.device.seq)).at(-1)).toBe('{"at":"12:30"}');
    const deep = `{"a":${'['.repeat(100)}${']'.repeat(100)},"a":1}`;
    await client.publishAsync(`d/${s.device.id}/t`, deep, { qos: 1 });
    expect((await rawText(s.device.seq)).at(-1)).toBe('{"a":1}');
  });

  it('QoS 0 over the plain port is stored too', async () => {
    const s = await seedAccount(server);
    const client = track(await connectPlain(server, { username: s.device.id, password: s.token }));
    await client.publishAsync(`d/${s.device.id}/t`, JSON.stringify({ volts: 3.3 }), { qos: 0 });
    const data = await until(async () => await latest(s.device.id, s.key));
    expect(data.data).toEqual({ volts: 3.3 });
  });

  it('QoS 2 is stored exactly once', async () => {
    const s = await seedAccount(server);
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    // Resolves once the PUBREC / PUBREL / PUBCOMP exchange completed.
    await client.publishAsync(`d/${s.device.id}/t`, JSON.stringify({ q: 2 }), { qos: 2 });
    expect(await storedReadings(server, s.device.seq)).toEqual([{ q: 2 }]);
  });

  it('QoS 2: a re-send before PUBREL, DUP or not, together with its original or after its PUBREC, is answered, not stored again', async () => {
    const s = await seedAccount(server);
    const socket = net.connect(server.mqttPlainPort!, '127.0.0.1');
    const parser = mqttPacket.parser();
    const received: mqttPacket.Packet[] = [];
    parser.on('packet', (p) => received.push(p));
    socket.on('data', (d) => parser.parse(d));
    const receivedCmds = (n: number) => until(() => (received.length >= n ? received.map((p) => p.cmd) : null));
    await once(socket, 'connect');
    socket.write(
      mqttPacket.generate({
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: 4,
        clean: true,
        clientId: 'raw-qos2',
        keepalive: 30,
        username: s.device.id,
        password: Buffer.from(s.token),
      }),
    );
    expect(await receivedCmds(1)).toEqual(['connack']);
    const publish = (dup: boolean) =>
      mqttPacket.generate({ cmd: 'publish', topic: `d/${s.device.id}/t`, payload: '{"q":2}', qos: 2, messageId: 9, dup, retain: false });
    // One write: both packets are read, and handed to the hooks, at once.
    socket.write(Buffer.concat([publish(false), publish(true)]));
    expect(await receivedCmds(3)).toEqual(['connack', 'pubrec', 'pubrec']);
    // Some clients re-send without DUP: until PUBREL, the packet id alone says it is the same
    // message (MQTT 3.1.1, 4.3.3), in the same read as the others or after the PUBRECs.
    socket.write(Buffer.concat([publish(false), publish(false)]));
    expect(await receivedCmds(5)).toEqual(['connack', 'pubrec', 'pubrec', 'pubrec', 'pubrec']);
    socket.write(publish(false));
    expect(await receivedCmds(6)).toEqual(['connack', 'pubrec', 'pubrec', 'pubrec', 'pubrec', 'pubrec']);
    socket.write(mqttPacket.generate({ cmd: 'pubrel', messageId: 9 }));
    expect(await receivedCmds(7)).toEqual(['connack', 'pubrec', 'pubrec', 'pubrec', 'pubrec', 'pubrec', 'pubcomp']);
    expect(await storedReadings(server, s.device.seq)).toEqual([{ q: 2 }]);
    // Released: the same id then starts a new message.
    socket.write(publish(false));
    expect(await receivedCmds(8)).toEqual(['connack', 'pubrec', 'pubrec', 'pubrec', 'pubrec', 'pubrec', 'pubcomp', 'pubrec']);
    socket.destroy();
    expect(await storedReadings(server, s.device.seq)).toEqual([{ q: 2 }, { q: 2 }]);
  });

  it('a retained publish is stored but not retained; clean=false is served as a clean session', async () => {
    const s = await seedAccount(server);
    const first = await connectTls(server, { username: s.device.id, password: s.token }, { clean: false, clientId: 'keepme' });
    await first.publishAsync(`d/${s.device.id}/t`, '{"r":1}', { qos: 1, retain: true });
    await first.endAsync();
    expect(await storedReadings(server, s.device.seq)).toEqual([{ r: 1 }]);
    const again = track(await connectTls(server, { username: s.device.id, password: s.token }, { clean: false, clientId: 'keepme' }));
    const received: string[] = [];
    again.on('message', (_t, payload) => received.push(payload.toString()));
    const granted = await again.subscribeAsync(`d/${s.device.id}/#`, { qos: 1 });
    expect(granted[0]!.qos).toBe(1);
    await new Promise((r) => setTimeout(r, 300));
    expect(received).toEqual([]);
  });

  it('a will message is not stored when the connection drops', async () => {
    const s = await seedAccount(server);
    const client = await connectTls(
      server,
      { username: s.device.id, password: s.token },
      { will: { topic: `d/${s.device.id}/t`, payload: Buffer.from('{"online":false}'), qos: 1, retain: false } },
    );
    await client.publishAsync(`d/${s.device.id}/t`, '{"online":true}', { qos: 1 });
    const gone = closed(client);
    client.stream.destroy();
    await gone;
    await new Promise((r) => setTimeout(r, 300));
    expect(await storedReadings(server, s.device.seq)).toEqual([{ online: true }]);
    await client.endAsync(true);
  });

  it('a payload that is not JSON is PUBACKed, not stored, counted as rejected (devices list), and the client stays connected', async () => {
    const s = await seedAccount(server, { email: 'nonjson@example.com' });
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    // Resolves only on the PUBACK.
    await client.publishAsync(`d/${s.device.id}/t`, 'temp=21.5', { qos: 1 });
    for (const bad of ['[1,2]', '"text"', 'null']) await client.publishAsync(`d/${s.device.id}/t`, bad, { qos: 1 });
    expect(client.connected).toBe(true);
    expect(await storedReadings(server, s.device.seq)).toEqual([]);
    const row = await deviceRow('nonjson@example.com', s.device.id);
    expect(row.rejected_count).toBe(4);
    expect(row.last_rejection_reason).toMatch(/object/);
    // Still connected and still able to send a good one.
    await client.publishAsync(`d/${s.device.id}/t`, '{"ok":true}', { qos: 1 });
    expect(await storedReadings(server, s.device.seq)).toEqual([{ ok: true }]);
    const human = await runCliAsync(['devices', 'list', '--account', 'nonjson@example.com'], { dataDir: server.dataDir });
    expect(human.stdout).toContain('rejected 4');
  });

  it('strict schema: undeclared fields are PUBACKed, not stored, and counted with the reason', async () => {
    const s = await seedAccount(server, {
      email: 'strict@example.com',
      device: { name: 'strict', schemaMode: 'strict', fields: [{ name: 'temp' }] },
    });
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    await client.publishAsync(`d/${s.device.id}/t`, '{"temp":1,"hum":2}', { qos: 1 });
    await client.publishAsync(`d/${s.device.id}/t`, '{"temp":3}', { qos: 1 });
    expect(await storedReadings(server, s.device.seq)).toEqual([{ temp: 3 }]);
    const row = await deviceRow('strict@example.com', s.device.id);
    expect(row.rejected_count).toBe(1);
    expect(row.last_rejection_reason).toContain('hum');
  });

  it('the flexible-mode field limit is a rejection too', async () => {
    const s = await seedAccount(server, { email: 'fields@example.com' });
    await server.services.accounts.setPlan('fields@example.com', 'starter', { fieldLimit: 2 });
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    await client.publishAsync(`d/${s.device.id}/t`, '{"a":1,"b":2,"c":3}', { qos: 1 });
    expect(await storedReadings(server, s.device.seq)).toEqual([]);
    expect((await deviceRow('fields@example.com', s.device.id)).rejected_count).toBe(1);
  });

  it('a payload of 65,537 bytes is PUBACKed and rejected; exactly 65,536 is stored', async () => {
    const s = await seedAccount(server, { email: 'big@example.com' });
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const body = (n: number) => {
      const prefix = '{"pad":"';
      return `${prefix + 'x'.repeat(n - prefix.length - 2)}"}`;
    };
    expect(Buffer.byteLength(body(65_536))).toBe(65_536);
    await client.publishAsync(`d/${s.device.id}/t`, body(65_537), { qos: 1 });
    expect(client.connected).toBe(true);
    expect(await storedReadings(server, s.device.seq)).toEqual([]);
    await client.publishAsync(`d/${s.device.id}/t`, body(65_536), { qos: 1 });
    expect(await storedReadings(server, s.device.seq)).toHaveLength(1);
    const row = await deviceRow('big@example.com', s.device.id);
    expect(row.rejected_count).toBe(1);
    expect(row.last_rejection_reason).toMatch(/65536|65,536/);
  });

  it('a packet above the broker limit ends the connection before it is buffered, and is counted', async () => {
    const s = await seedAccount(server, { email: 'huge@example.com' });
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const gone = closed(client);
    client.publish(`d/${s.device.id}/t`, Buffer.alloc(MAX_PACKET_BYTES + 1, 0x20), { qos: 1 });
    await gone;
    expect(await storedReadings(server, s.device.seq)).toEqual([]);
    const row = await deviceRow('huge@example.com', s.device.id);
    expect(row.rejected_count).toBe(1);
    expect(row.last_rejection_reason).toMatch(/too large/);
  });

  it("publishing to another device's topic (or any other topic) disconnects and stores nothing", async () => {
    const b = await seedAccount(server);
    for (const topic of [`d/${b.device.id}/t`, `d/${a.device.id}/x`, 'other/topic', '$SYS/x']) {
      const before = [(await storedReadings(server, a.device.seq)).length, (await storedReadings(server, b.device.seq)).length];
      const client = track(await connectTls(server, { username: a.device.id, password: a.token }));
      const gone = closed(client);
      client.publish(topic, '{"temp":99}', { qos: 1 });
      await gone;
      expect([(await storedReadings(server, a.device.seq)).length, (await storedReadings(server, b.device.seq)).length], topic).toEqual(
        before,
      );
    }
  });

  it("subscribing to another device's topics is refused (SUBACK 0x80), its own is granted", async () => {
    const b = await seedAccount(server);
    const client = track(await connectTls(server, { username: a.device.id, password: a.token }));
    // mqtt.js turns a SUBACK with a 0x80 into an error that carries the packet.
    const suback = await client.subscribeAsync([`d/${b.device.id}/t`, 'd/+/t', '#', '$SYS/#', `d/${a.device.id}/cmd`], { qos: 1 }).then(
      () => null,
      (err: { packet?: { granted: number[] } }) => err.packet,
    );
    expect(suback?.granted).toEqual([128, 128, 128, 128, 1]);
    expect(client.connected).toBe(true);
  });
});
