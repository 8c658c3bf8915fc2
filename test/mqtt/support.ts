import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { storedRows } from '../helpers/backend.js';
import type { TestServer } from '../helpers/server.js';

/** The certificate the server generated into <data-dir>/tls/, trusted as the CA. */
export const certPath = (server: TestServer) => path.join(server.dataDir, 'tls', 'cert.pem');

export interface Creds {
  username: string;
  password: string;
}

/** mqtt.js options that never reconnect on their own, so a closed session stays closed. */
function options(creds: Creds, extra: IClientOptions): IClientOptions {
  return { username: creds.username, password: creds.password, reconnectPeriod: 0, connectTimeout: 5_000, ...extra };
}

/** Connects over TLS on 127.0.0.1, trusting only the server's generated certificate. */
export function connectTls(server: TestServer, creds: Creds, extra: IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(
    `mqtts://127.0.0.1:${server.mqttPort}`,
    options(creds, { ca: readFileSync(certPath(server)), rejectUnauthorized: true, ...extra }),
    false,
  );
}

export function connectPlain(server: TestServer, creds: Creds, extra: IClientOptions = {}): Promise<MqttClient> {
  return mqtt.connectAsync(`mqtt://127.0.0.1:${server.mqttPlainPort}`, options(creds, extra), false);
}

/** The CONNACK return code of a refused connection (mqtt.js rejects with err.code = code). */
export async function refusedCode(connecting: Promise<MqttClient>): Promise<number> {
  try {
    const client = await connecting;
    await client.endAsync(true);
    throw new Error('connection was accepted');
  } catch (err) {
    const code = (err as { code?: number }).code;
    if (typeof code !== 'number') throw err;
    return code;
  }
}

/** Resolves when the server closes the client's connection. */
export function closed(client: MqttClient, timeoutMs = 5_000): Promise<void> {
  return new Promise((resolve, reject) => {
    if (!client.connected && client.disconnected) return resolve();
    const timer = setTimeout(() => reject(new Error('connection still open')), timeoutMs);
    client.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

export const until = async <T>(probe: () => Promise<T | null | undefined> | T | null | undefined, timeoutMs = 5_000): Promise<T> => {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null && value !== undefined) return value;
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
};

/** Stored readings of a device, through the storage interface (what is committed, nothing else). */
export async function storedReadings(server: TestServer, deviceSeq: number): Promise<Record<string, unknown>[]> {
  return (await storedRows(server.storage, deviceSeq)).map((r) => JSON.parse(r.data));
}

/**
 * A CONNECT packet built byte by byte (username, password, keep-alive 30 s), for what mqtt.js
 * and mosquitto_pub refuse to send: an empty client id with clean session 0, MQTT 3.1
 * without a client id, a protocol level nobody speaks.
 */
export function connectPacket(o: {
  protocolId?: string;
  level?: number;
  clientId: string;
  clean: boolean;
  username: string;
  password: string;
}): Buffer {
  const level = o.level ?? 4;
  const str = (text: string) => {
    const bytes = Buffer.from(text, 'utf8');
    return Buffer.concat([Buffer.from([bytes.length >> 8, bytes.length & 0xff]), bytes]);
  };
  const flags = 0x80 | 0x40 | (o.clean ? 0x02 : 0); // user name, password, clean session
  const body = Buffer.concat([
    str(o.protocolId ?? 'MQTT'),
    Buffer.from([level, flags, 0, 30]),
    // MQTT 5 puts the CONNECT properties here: none.
    Buffer.from(level === 5 ? [0] : []),
    str(o.clientId),
    str(o.username),
    str(o.password),
  ]);
  const remaining: number[] = [];
  let n = body.length;
  do {
    remaining.push((n % 128) | (n >= 128 ? 0x80 : 0));
    n = Math.floor(n / 128);
  } while (n > 0);
  return Buffer.concat([Buffer.from([0x10, ...remaining]), body]);
}

export interface RawConnection {
  socket: net.Socket;
  /** Every byte the server sent so far. */
  received(): Buffer;
  /** True once the connection closed; the test never closes it before it looks. */
  closed(): boolean;
}

/** A plain-port connection that sent `packet` and never closes by itself. */
export async function rawConnection(server: TestServer, packet: Buffer): Promise<RawConnection> {
  const socket = net.connect(server.mqttPlainPort!, '127.0.0.1');
  let received = Buffer.alloc(0);
  let isClosed = false;
  socket.on('data', (chunk) => {
    received = Buffer.concat([received, chunk]);
  });
  socket.on('error', () => {});
  socket.once('close', () => {
    isClosed = true;
  });
  await once(socket, 'connect');
  socket.write(packet);
  return { socket, received: () => received, closed: () => isClosed };
}
