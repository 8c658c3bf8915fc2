/**
 * The embedded MQTT broker (docs/mqtt.md): aedes behind a TLS listener on --mqtt-port
 * (unless "off") and, only when asked for, a plain-TCP listener on --mqtt-plain-port.
 * Hooks (./hooks.ts) adapt packets to the domain; ./sessions.ts closes connections that a
 * change to their device or account no longer allows.
 */
import type { EventEmitter } from 'node:events';
import net, { type AddressInfo, type Socket } from 'node:net';
import tls from 'node:tls';
import { Aedes, type Client } from 'aedes';
import type { ServerConfig } from '../config.js';
import { MAX_INGEST_BYTES } from '../domain/ingest/pipeline.js';
import type { Services } from '../domain/services.js';
import { brokerHooks, skipTelemetryFanOut } from './hooks.js';
import { SessionRegistry } from './sessions.js';
import { loadTlsMaterial, type TlsMaterial } from './tls.js';

/**
 * Largest MQTT packet accepted (remaining length). Above the 65,536-byte payload limit by
 * room for the topic and header, so a payload slightly too large still arrives and is
 * rejected and counted by the pipeline like any other (docs/mqtt.md, "Rejections"); anything bigger
 * ends the connection before it is buffered. aedes/mqtt-packet have no such limit
 * (aedes issue #831), hence limitPacketSize below.
 */
export const MAX_PACKET_BYTES = MAX_INGEST_BYTES + 4_096;
/** A connection must send CONNECT this soon, and finish the TLS handshake this soon. */
const CONNECT_TIMEOUT_MS = 10_000;
/** TCP keep-alive probes find dead peers of clients that asked for MQTT keep-alive 0. */
const TCP_KEEPALIVE_MS = 60_000;

interface Log {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

export interface RunningMqtt {
  /** Bound TLS port (port 0 resolved), null when --mqtt-port off. */
  tlsPort: number | null;
  /** Bound plain-TCP port, null unless --mqtt-plain-port. */
  plainPort: number | null;
  tls: TlsMaterial | null;
  sessions: SessionRegistry;
  close(): Promise<void>;
}

/** Starts the broker and its listeners; returns null when both listeners are off. */
export async function startMqtt(
  config: ServerConfig,
  services: Services,
  log: Log,
  print: (line: string) => void,
): Promise<RunningMqtt | null> {
  if (config.mqttPort === null && config.mqttPlainPort === null) return null;

  const sessions = new SessionRegistry(services, log);
  let broker: Aedes | null = null;
  broker = await Aedes.createBroker({
    connectTimeout: CONNECT_TIMEOUT_MS,
    // Room for the device namespace preConnect prefixes to the client id (hooks.ts).
    maxClientsIdLength: 23 + 64,
    ...brokerHooks({ services, sessions, log, broker: () => broker! }),
  });
  skipTelemetryFanOut(broker);
  const stopWatching = sessions.watch();
  broker.on('clientError', (client: Client, err: Error) => log.debug({ clientId: client.id, err: err.message }, 'MQTT client error'));
  broker.on('connectionError', (_client: Client, err: Error) => log.debug({ err: err.message }, 'MQTT connection error'));
  // aedes emits 'error' on a persistence failure; unhandled it would end the process.
  (broker as EventEmitter).on('error', (err: Error) => log.error({ err }, 'MQTT broker error'));

  const sockets = new Set<Socket>();
  const accept = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.setNoDelay(true);
    socket.setKeepAlive(true, TCP_KEEPALIVE_MS);
    limitPacketSize(broker!.handle(socket), sessions, services);
  };

  const servers: net.Server[] = [];
  const close = async () => {
    stopWatching();
    const closing = servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve())));
    await new Promise<void>((resolve) => broker!.close(() => resolve()));
    // Connections that never completed CONNECT are not aedes clients yet.
    for (const socket of sockets) socket.destroy();
    await Promise.all(closing);
  };

  let material: TlsMaterial | null = null;
  let tlsPort: number | null = null;
  let plainPort: number | null = null;
  try {
    if (config.mqttPort !== null) {
      material = await loadTlsMaterial(config);
      const server = tls.createServer(
        { cert: material.cert, key: material.key, minVersion: 'TLSv1.2', handshakeTimeout: CONNECT_TIMEOUT_MS },
        accept,
      );
      server.on('tlsClientError', (err) => log.debug({ err: err.message }, 'MQTT TLS handshake failed'));
      servers.push(server);
      tlsPort = await listen(server, config.host, config.mqttPort);
      const origin = { generated: 'generated self-signed', reused: 'self-signed', configured: 'configured' }[material.source];
      print(
        `MQTT over TLS listening on ${config.host}:${tlsPort} (${origin} certificate ${material.certPath}, SHA-256 fingerprint ${material.fingerprint})`,
      );
    }
    if (config.mqttPlainPort !== null) {
      const server = net.createServer(accept);
      servers.push(server);
      plainPort = await listen(server, config.host, config.mqttPlainPort);
      print(`MQTT without TLS listening on ${config.host}:${plainPort}`);
      print('warning: plain MQTT sends device access tokens and readings unencrypted; use it only on a trusted network');
      log.warn({ port: plainPort }, 'plain MQTT listener enabled');
    }
  } catch (err) {
    await close();
    throw err;
  }
  return { tlsPort, plainPort, tls: material, sessions, close };
}

function listen(server: net.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** The parts of mqtt-packet's parser (aedes's client._parser) the size guard relies on. */
interface PacketParser {
  packet: { cmd?: string; length: number };
  _parseLength(): boolean;
  _emitError(err: Error): void;
}

/**
 * Ends a connection whose next packet announces a remaining length above MAX_PACKET_BYTES,
 * as soon as the fixed header is read, so an oversized packet is never buffered. An
 * authenticated device gets the refusal counted like any other rejected message.
 */
function limitPacketSize(client: Client, sessions: SessionRegistry, services: Services) {
  const parser = (client as unknown as { _parser?: PacketParser })._parser;
  if (!parser || typeof parser._parseLength !== 'function') return;
  const parseLength = parser._parseLength;
  parser._parseLength = function guardedParseLength(this: PacketParser) {
    const complete = parseLength.call(this);
    if (complete && this.packet.length > MAX_PACKET_BYTES) {
      const reason = `MQTT packet of ${this.packet.length} bytes exceeds the limit of ${MAX_PACKET_BYTES}`;
      const session = sessions.get(client);
      if (session && this.packet.cmd === 'publish') {
        try {
          const { device } = services.devices.authorizeSession(session.deviceId);
          services.ingest.recordRejection(device, `payload too large: ${reason}`, 'mqtt');
        } catch {
          // the device is gone or the database is busy: the connection ends all the same
        }
      }
      this._emitError(new Error(reason));
      return false;
    }
    return complete;
  };
}
