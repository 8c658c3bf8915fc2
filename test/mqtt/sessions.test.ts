import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import mqtt, { type MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runCliAsync } from '../helpers/cli.js';
import { seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import {
  certPath,
  closed,
  connectPacket,
  connectPlain,
  connectTls,
  type RawConnection,
  rawConnection,
  refusedCode,
  storedReadings,
  until,
} from './support.js';

const run = promisify(execFile);
/** MQTT 3.1.1 CONNACK, return code `code`, session present 0. */
const connack = (code: number) => Buffer.from([0x20, 0x02, 0x00, code]);

describe('MQTT sessions: who may connect, and when a connection is closed', () => {
  let server: TestServer;
  const open: MqttClient[] = [];
  const track = (c: MqttClient) => {
    open.push(c);
    return c;
  };

  beforeAll(async () => {
    server = await startTestServer({ 'mqtt-port': '0', 'mqtt-plain-port': '0' });
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((c) => c.endAsync(true)));
  });
  afterAll(() => server.stop());

  it('wrong token and unknown device get CONNACK 4 (bad username or password); no credentials too', async () => {
    const s = await seedAccount(server);
    expect(await refusedCode(connectTls(server, { username: s.device.id, password: `${s.token}x` }))).toBe(4);
    expect(await refusedCode(connectTls(server, { username: 'dev_doesnotexist', password: s.token }))).toBe(4);
    expect(await refusedCode(connectPlain(server, { username: s.device.id, password: 'nope' }))).toBe(4);
    expect(await refusedCode(mqtt.connectAsync(`mqtt://127.0.0.1:${server.mqttPlainPort}`, { reconnectPeriod: 0 }, false))).toBe(4);
  });

  it('a paused device and a suspended account get CONNACK 5 (not authorized)', async () => {
    const paused = await seedAccount(server);
    await server.services.devices.pause(paused.device);
    expect(await refusedCode(connectTls(server, { username: paused.device.id, password: paused.token }))).toBe(5);
    const suspended = await seedAccount(server, { email: 'suspended@example.com' });
    await server.services.accounts.setStatus('suspended@example.com', 'suspended');
    expect(await refusedCode(connectTls(server, { username: suspended.device.id, password: suspended.token }))).toBe(5);
  });

  it('clean=false is answered as a clean session (session present 0)', async () => {
    const s = await seedAccount(server);
    const client = track(
      mqtt.connect(`mqtts://127.0.0.1:${server.mqttPort}`, {
        ca: readFileSync(certPath(server)),
        username: s.device.id,
        password: s.token,
        clean: false,
        clientId: 'persist',
        reconnectPeriod: 0,
      }),
    );
    const connack = await new Promise<{ sessionPresent: boolean; returnCode?: number }>((resolve) => client.once('connect', resolve));
    expect(connack.returnCode).toBe(0);
    expect(connack.sessionPresent).toBe(false);
  });

  /** The first packet the server sent on `conn`, once whole (a CONNACK is 4 bytes). */
  const firstPacket = async (conn: RawConnection) => until(() => (conn.received().length >= 4 ? conn.received() : null));
  /** Waits for the server to close `conn`; fails after 5 s. */
  const closedByServer = (conn: RawConnection) => until(() => (conn.closed() ? true : null));

  it('an empty client id with clean session 0 gets CONNACK 2 and is closed; with clean session 1 it is served (MQTT 3.1.1 and 3.1)', async () => {
    const s = await seedAccount(server);
    const creds = { username: s.device.id, password: s.token };
    for (const version of [
      { protocolId: 'MQTT', level: 4 },
      { protocolId: 'MQIsdp', level: 3 },
    ] as const) {
      const refused = await rawConnection(server, connectPacket({ ...version, ...creds, clientId: '', clean: false }));
      expect(await firstPacket(refused), `level ${version.level}`).toEqual(connack(2));
      await closedByServer(refused);
      // Refused before the credentials are looked at.
      const wrongToken = await rawConnection(
        server,
        connectPacket({ ...version, ...creds, password: 'wrong', clientId: '', clean: false }),
      );
      expect(await firstPacket(wrongToken), `level ${version.level}`).toEqual(connack(2));
      await closedByServer(wrongToken);

      // The same credentials with clean session 1: the broker assigns an id, readings are stored.
      const served = await rawConnection(server, connectPacket({ ...version, ...creds, clientId: '', clean: true }));
      try {
        expect(await firstPacket(served), `level ${version.level}`).toEqual(connack(0));
        served.socket.write(
          mqttPacket.generate({
            cmd: 'publish',
            topic: `d/${s.device.id}/t`,
            payload: JSON.stringify({ level: version.level }),
            qos: 1,
            messageId: 1,
            retain: false,
            dup: false,
          }),
        );
        // PUBACK for message id 1, after the CONNACK.
        await until(() => (served.received().length >= 8 ? true : null));
        expect(served.received().subarray(4)).toEqual(Buffer.from([0x40, 0x02, 0x00, 0x01]));
        expect(served.closed()).toBe(false);
      } finally {
        served.socket.destroy();
      }
    }
    expect(await storedReadings(server, s.device.seq)).toEqual([{ level: 4 }, { level: 3 }]);
  });

  it('an empty client id refused with CONNACK 2 does not count towards the address lockout', async () => {
    const s = await seedAccount(server);
    // More than the 10 failures that lock an address out, all with a wrong token.
    for (let i = 0; i < 12; i++) {
      const refused = await rawConnection(
        server,
        connectPacket({ protocolId: 'MQTT', level: 4, username: s.device.id, password: 'wrong', clientId: '', clean: false }),
      );
      expect(await firstPacket(refused), `attempt ${i + 1}`).toEqual(connack(2));
      await closedByServer(refused);
    }
    // Not locked out: the credentials are still checked (4 for a wrong token, not 3), and good ones are served.
    const wrong = await rawConnection(
      server,
      connectPacket({ protocolId: 'MQTT', level: 4, username: s.device.id, password: 'wrong', clientId: 'c1', clean: true }),
    );
    expect(await firstPacket(wrong)).toEqual(connack(4));
    await closedByServer(wrong);
    const good = await rawConnection(
      server,
      connectPacket({ protocolId: 'MQTT', level: 4, username: s.device.id, password: s.token, clientId: 'c2', clean: true }),
    );
    try {
      expect(await firstPacket(good)).toEqual(connack(0));
    } finally {
      good.socket.destroy();
    }
  });

  it('MQTT 5 gets CONNACK 1 (unacceptable protocol version) and is closed, whatever the credentials', async () => {
    const s = await seedAccount(server);
    const creds = { username: s.device.id, password: s.token };
    expect(await refusedCode(connectTls(server, creds, { protocolVersion: 5 }))).toBe(1);
    expect(await refusedCode(connectTls(server, { ...creds, password: 'wrong' }, { protocolVersion: 5 }))).toBe(1);

    // The server closes the connection itself, for a client that would wait (and for an
    // empty client id with clean start 0, valid in MQTT 5: the version is refused first).
    for (const clean of [true, false]) {
      const conn = await rawConnection(server, connectPacket({ level: 5, ...creds, clientId: '', clean }));
      expect(await firstPacket(conn)).toEqual(connack(1));
      await closedByServer(conn);
    }

    // An MQTT 5 client library reads that CONNACK as "unsupported protocol version" and stops.
    const failed = await run(
      'mosquitto_pub',
      [
        ...['-V', 'mqttv5', '--cafile', certPath(server), '-h', 'localhost', '-p', String(server.mqttPort)],
        ...['-u', s.device.id, '-P', s.token, '-q', '1', '-t', `d/${s.device.id}/t`, '-m', '{"v":5}'],
      ],
      { timeout: 10_000 },
    ).then(
      () => null,
      (err: { killed?: boolean; stderr?: string }) => err,
    );
    expect(failed).not.toBeNull();
    expect(failed!.killed).toBe(false);
    expect(failed!.stderr).toMatch(/Unsupported Protocol Version/);
    expect(await storedReadings(server, s.device.seq)).toEqual([]);
  });

  it('a CONNECT naming any other protocol level, or another protocol name, is closed without a CONNACK', async () => {
    const s = await seedAccount(server);
    const creds = { username: s.device.id, password: s.token, clientId: 'x', clean: true };
    for (const packet of [connectPacket({ ...creds, level: 6 }), connectPacket({ ...creds, protocolId: 'MQTZ' })]) {
      const conn = await rawConnection(server, packet);
      await closedByServer(conn);
      expect(conn.received()).toEqual(Buffer.alloc(0));
    }
    // The same CONNECT as MQTT 3.1.1 is served: only the protocol made the difference.
    const served = await rawConnection(server, connectPacket({ ...creds, level: 4 }));
    expect(await firstPacket(served)).toEqual(connack(0));
    served.socket.destroy();
  });

  it('MQTT 3.1 client ids: up to 66 characters are served, a longer one gets CONNACK 2', async () => {
    const s = await seedAccount(server);
    const v31 = { protocolId: 'MQIsdp', protocolVersion: 3 } as const;
    track(await connectTls(server, { username: s.device.id, password: s.token }, { ...v31, clientId: 'c'.repeat(66) }));
    expect(await refusedCode(connectTls(server, { username: s.device.id, password: s.token }, { ...v31, clientId: 'c'.repeat(67) }))).toBe(
      2,
    );
    // MQTT 3.1.1 has no such limit.
    track(await connectTls(server, { username: s.device.id, password: s.token }, { clientId: 'c'.repeat(200) }));
  });

  it("the same client id used by two devices does not take over the other device's connection", async () => {
    const one = await seedAccount(server);
    const two = await seedAccount(server);
    const first = track(await connectTls(server, { username: one.device.id, password: one.token }, { clientId: 'sensor' }));
    track(await connectTls(server, { username: two.device.id, password: two.token }, { clientId: 'sensor' }));
    await new Promise((r) => setTimeout(r, 200));
    expect(first.connected).toBe(true);
    await first.publishAsync(`d/${one.device.id}/t`, '{"still":"here"}', { qos: 1 });
    expect(await storedReadings(server, one.device.seq)).toEqual([{ still: 'here' }]);
  });

  it('pausing a device through the service closes its open connections (TLS and plain)', async () => {
    const s = await seedAccount(server);
    const c1 = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const c2 = track(await connectPlain(server, { username: s.device.id, password: s.token }));
    const bystander = await seedAccount(server);
    const other = track(await connectTls(server, { username: bystander.device.id, password: bystander.token }));
    const gone = Promise.all([closed(c1), closed(c2)]);
    await server.services.devices.pause(s.device);
    await gone;
    expect(other.connected).toBe(true);
    expect(await refusedCode(connectTls(server, { username: s.device.id, password: s.token }))).toBe(5);
    await server.services.devices.resume(s.device);
    track(await connectTls(server, { username: s.device.id, password: s.token }));
  });

  it('pausing from the admin CLI (another process) closes the connection too', async () => {
    const s = await seedAccount(server);
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const gone = closed(client, 10_000);
    const r = await runCliAsync(['devices', 'pause', s.device.id, '--json'], { dataDir: server.dataDir });
    expect(r.status, r.stderr).toBe(0);
    await gone;
    expect(await refusedCode(connectTls(server, { username: s.device.id, password: s.token }))).toBe(5);
  });

  it('a regenerated token closes the connection made with the old one; the old token is refused, the new one works', async () => {
    const s = await seedAccount(server);
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const gone = closed(client);
    const { accessToken } = await server.services.devices.regenerateToken(s.device);
    await gone;
    expect(await refusedCode(connectTls(server, { username: s.device.id, password: s.token }))).toBe(4);
    const fresh = track(await connectTls(server, { username: s.device.id, password: accessToken }));
    await fresh.publishAsync(`d/${s.device.id}/t`, '{"after":"regen"}', { qos: 1 });
    expect(await storedReadings(server, s.device.seq)).toEqual([{ after: 'regen' }]);
  });

  it('a token regenerated from the CLI closes the old connection but not one made with the new token', async () => {
    const s = await seedAccount(server);
    const old = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const gone = closed(old, 10_000);
    const r = await runCliAsync(['devices', 'regenerate-token', s.device.id, '--json'], { dataDir: server.dataDir });
    expect(r.status, r.stderr).toBe(0);
    await gone;
    const fresh = track(await connectTls(server, { username: s.device.id, password: r.json.access_token }));
    // Another CLI commit re-checks every session: the one with the current token stays.
    const again = await runCliAsync(['devices', 'list', '--account', s.account.id, '--json'], { dataDir: server.dataDir });
    expect(again.status).toBe(0);
    await runCliAsync(['keys', 'create', '--account', s.account.id, '--name', 'poke', '--json'], { dataDir: server.dataDir });
    await new Promise((r) => setTimeout(r, 600));
    expect(fresh.connected).toBe(true);
  });

  it('deleting a device closes its connection and nothing more is stored', async () => {
    const s = await seedAccount(server);
    const client = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const gone = closed(client);
    await server.services.devices.remove(s.device);
    await gone;
    expect(await refusedCode(connectTls(server, { username: s.device.id, password: s.token }))).toBe(4);
  });

  it("suspending the account closes its devices' connections (service and CLI)", async () => {
    const s = await seedAccount(server, { email: 'to-suspend@example.com' });
    const second = await server.services.devices.create(s.account, { name: 'second' });
    const c1 = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const c2 = track(await connectTls(server, { username: second.device.id, password: second.accessToken }));
    const gone = Promise.all([closed(c1), closed(c2)]);
    await server.services.accounts.setStatus('to-suspend@example.com', 'suspended');
    await gone;
    await server.services.accounts.setStatus('to-suspend@example.com', 'active');

    const c3 = track(await connectTls(server, { username: s.device.id, password: s.token }));
    const gone3 = closed(c3, 10_000);
    const r = await runCliAsync(['accounts', 'suspend', 'to-suspend@example.com', '--json'], { dataDir: server.dataDir });
    expect(r.status, r.stderr).toBe(0);
    await gone3;
    expect(await refusedCode(connectTls(server, { username: s.device.id, password: s.token }))).toBe(5);
  });
});

describe('MQTT listeners and certificate', () => {
  it('the self-signed certificate is generated once and reused across restarts, with the same fingerprint printed', async () => {
    const dataDir = tempDir();
    const lines: string[] = [];
    const first = await startTestServer({ 'data-dir': dataDir, 'mqtt-port': '0' }, { print: (l) => lines.push(l) });
    const pem = readFileSync(path.join(dataDir, 'tls', 'cert.pem'), 'utf8');
    const fingerprint = first.mqttFingerprint!;
    expect(fingerprint).toMatch(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
    expect(lines.find((l) => l.includes('MQTT over TLS'))).toContain(`127.0.0.1:${first.mqttPort}`);
    expect(lines.find((l) => l.includes('MQTT over TLS'))).toContain(fingerprint);
    await first.stop();

    const again: string[] = [];
    const second = await startTestServer({ 'data-dir': dataDir, 'mqtt-port': '0' }, { print: (l) => again.push(l) });
    try {
      expect(second.mqttFingerprint).toBe(fingerprint);
      expect(readFileSync(path.join(dataDir, 'tls', 'cert.pem'), 'utf8')).toBe(pem);
      expect(again.find((l) => l.includes('MQTT over TLS'))).toContain(fingerprint);
      // And the reused certificate still serves a real client.
      const s = await seedAccount(second);
      const client = await connectTls(second as TestServer & { dataDir: string }, { username: s.device.id, password: s.token });
      await client.endAsync();
    } finally {
      await second.stop();
    }
  });

  it('--tls-cert/--tls-key are used instead of a generated certificate', async () => {
    const source = tempDir();
    const generated = await startTestServer({ 'data-dir': source, 'mqtt-port': '0' });
    const fingerprint = generated.mqttFingerprint;
    await generated.stop();
    const dataDir = tempDir();
    const lines: string[] = [];
    const server = await startTestServer(
      {
        'data-dir': dataDir,
        'mqtt-port': '0',
        'tls-cert': path.join(source, 'tls', 'cert.pem'),
        'tls-key': path.join(source, 'tls', 'key.pem'),
      },
      { print: (l) => lines.push(l) },
    );
    try {
      expect(server.mqttFingerprint).toBe(fingerprint);
      expect(existsSync(path.join(dataDir, 'tls'))).toBe(false);
      expect(lines.join('\n')).toContain('configured certificate');
    } finally {
      await server.stop();
    }
  });

  it('--mqtt-port off starts no MQTT listener; the plain port is off unless asked for, and warns when on', async () => {
    const lines: string[] = [];
    const off = await startTestServer({ 'mqtt-port': 'off' }, { print: (l) => lines.push(l) });
    try {
      expect(off.mqttPort).toBeNull();
      expect(off.mqttPlainPort).toBeNull();
      expect(lines.some((l) => l.includes('MQTT'))).toBe(false);
      expect(existsSync(path.join(off.dataDir, 'tls'))).toBe(false);
    } finally {
      await off.stop();
    }
    const tlsOnly = await startTestServer({ 'mqtt-port': '0' });
    try {
      expect(tlsOnly.mqttPort).toBeGreaterThan(0);
      expect(tlsOnly.mqttPlainPort).toBeNull();
    } finally {
      await tlsOnly.stop();
    }
    const plain: string[] = [];
    const both = await startTestServer({ 'mqtt-port': 'off', 'mqtt-plain-port': '0' }, { print: (l) => plain.push(l) });
    try {
      expect(both.mqttPort).toBeNull();
      expect(plain.find((l) => l.includes('without TLS'))).toContain(`127.0.0.1:${both.mqttPlainPort}`);
      expect(plain.some((l) => l.startsWith('warning:'))).toBe(true);
    } finally {
      await both.stop();
    }
  });

  it('close() shuts the broker down cleanly with clients connected, and a connection that never sent CONNECT', async () => {
    const server = await startTestServer({ 'mqtt-port': '0', 'mqtt-plain-port': '0' });
    const s = await seedAccount(server);
    const client = await connectTls(server, { username: s.device.id, password: s.token });
    const gone = closed(client);
    const { connect } = await import('node:net');
    const idle = connect(server.mqttPlainPort!, '127.0.0.1');
    await new Promise((r) => idle.once('connect', r));
    const idleClosed = new Promise((r) => idle.once('close', r));
    const started = Date.now();
    await server.stop();
    await gone;
    await idleClosed;
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

describe('MQTT over TLS: connections that never finish the handshake', () => {
  it('are closed when the handshake fails, and do not hold a shutdown open', async () => {
    const server = await startTestServer({ 'mqtt-port': '0' });
    const connect = () =>
      new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect(server.mqttPort!, '127.0.0.1', () => resolve(s));
        s.on('error', reject);
      });
    const whenClosed = (s: net.Socket) => new Promise<void>((resolve) => s.once('close', () => resolve()));
    let stopped = false;
    try {
      // Bytes that are no TLS record: the handshake fails and the server closes the connection.
      const garbage = await connect();
      garbage.on('error', () => {});
      const garbageClosed = whenClosed(garbage);
      garbage.write('not a TLS ClientHello at all\r\n\r\n');
      await garbageClosed;

      // A connection that sends half a record header and waits: the server's stop closes it.
      const idle = await connect();
      idle.on('error', () => {});
      const idleClosed = whenClosed(idle);
      idle.write(Buffer.from([0x16, 0x03, 0x01]));
      const t0 = Date.now();
      await server.stop();
      stopped = true;
      await idleClosed;
      // Well inside the handshake timeout (10 s): the stop did not wait for it.
      expect(Date.now() - t0).toBeLessThan(5_000);
    } finally {
      if (!stopped) await server.stop();
    }
  });
});
