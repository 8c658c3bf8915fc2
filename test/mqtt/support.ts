import { readFileSync } from 'node:fs';
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
