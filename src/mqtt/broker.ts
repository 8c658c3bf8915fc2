/**
 * The embedded MQTT broker (docs/mqtt.md): aedes behind a TLS listener on --mqtt-port
 * (unless "off") and, only when asked for, a plain-TCP listener on --mqtt-plain-port.
 * Hooks (./hooks.ts) adapt packets to the domain; ./sessions.ts closes connections that a
 * change to their device or account no longer allows.
 */
import type { EventEmitter } from 'node:events';
import net, { type AddressInfo, type Socket } from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { Aedes, type Client } from 'aedes';
import mqttPacket from 'mqtt-packet';
import type { Services } from '../composition.js';
import type { ServerConfig } from '../config.js';
import { SHARED_VALUES } from '../domain/cluster.js';
import { MAX_INGEST_BYTES } from '../domain/ingest/pipeline.js';
import { ThrottledLog } from '../domain/throttledLog.js';
import { MINUTE_MS } from '../time.js';
import { limitPacketSize, remoteAddressOf, skipFanOut } from './aedesInternals.js';
import { recordForwardedAddress } from './clientAddress.js';
import { brokerHooks, isTelemetryTopic, PublishesInFlight } from './hooks.js';
import { readProxyHeader } from './proxyProtocol.js';
import { SessionRegistry } from './sessions.js';
import { lanAddressesNotCovered, loadTlsMaterial, namesNotCovered, type TlsMaterial } from './tls.js';

/**
 * Largest MQTT packet accepted (remaining length). Above the 65,536-byte payload limit by
 * room for the topic and header, so a payload slightly too large still arrives and is
 * rejected and counted by the pipeline like any other (docs/mqtt.md, "Rejections"); anything bigger
 * ends the connection before it is buffered. mqtt-packet, aedes's parser, has no packet
 * size limit of its own (it buffers a packet of any announced length), hence limitPacketSize below.
 */
export const MAX_PACKET_BYTES = MAX_INGEST_BYTES + 4_096;
/**
 * A connection must send CONNECT this soon, and finish the TLS handshake this soon; behind a
 * proxy, the PROXY header must arrive this soon too (a proxy sends it at once).
 */
const CONNECT_TIMEOUT_MS = 10_000;
/**
 * How long a shutdown waits for publishes being committed before it closes the connections:
 * a commit takes milliseconds; past this the database is stuck, and the readings were not
 * acknowledged.
 */
const PUBLISH_DRAIN_MS = 2_000;
/** TCP keep-alive probes find dead peers of clients that asked for MQTT keep-alive 0. */
const TCP_KEEPALIVE_MS = MINUTE_MS;

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

  // mqtt-packet (aedes's writer) otherwise builds, at its first packet, 65,536 two-byte
  // Buffers, one per message id, to write PUBACKs from: about 6 MB of heap, held for good. Two
  // bytes made per PUBACK cost nothing beside the reading's commit.
  mqttPacket.writeToStream.cacheNumbers = false;
  const sessions = new SessionRegistry(services, log);
  const publishes = new PublishesInFlight();
  let broker: Aedes | null = null;
  broker = await Aedes.createBroker({
    connectTimeout: CONNECT_TIMEOUT_MS,
    // Room for the device namespace preConnect prefixes to the client id (hooks.ts).
    maxClientsIdLength: 23 + 64,
    ...brokerHooks({ services, sessions, log, broker: () => broker!, publishes }),
  });
  // Telemetry ends at the store: never forwarded (authorizeForward), never retained.
  skipFanOut(broker, (packet) => isTelemetryTopic(packet.topic));
  const stopWatching = sessions.watch();
  broker.on('clientError', (client: Client, err: Error) =>
    log.debug({ clientId: client.id, address: remoteAddressOf(client), err: err.message }, 'MQTT client error'),
  );
  broker.on('connectionError', (client: Client, err: Error) =>
    log.debug({ address: remoteAddressOf(client), err: err.message }, 'MQTT connection error'),
  );
  // aedes emits 'error' on a persistence failure; unhandled it would end the process.
  (broker as EventEmitter).on('error', (err: Error) => log.error({ err }, 'MQTT broker error'));

  const sockets = new Set<Socket>();
  /** Held in `sockets` until it closes, so close() can end it. */
  const remember = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const track = (socket: Socket) => {
    remember(socket);
    socket.setNoDelay(true);
    socket.setKeepAlive(true, TCP_KEEPALIVE_MS);
  };
  const accept = (socket: Socket) => {
    track(socket);
    handOver(socket);
  };
  const handOver = (socket: Socket) => {
    const client = broker!.handle(socket);
    limitPacketSize(client, MAX_PACKET_BYTES, (cmd, reason) => {
      // An authenticated device gets the refusal counted like any other rejected message.
      const session = sessions.get(client);
      if (session && cmd === 'publish')
        void services.ingest.recordTransportRejection(session.deviceId, `payload too large: ${reason}`, 'mqtt');
    });
  };

  const servers: net.Server[] = [];
  const close = async () => {
    stopWatching();
    for (const stop of stopFlushingLogs) stop();
    const closing = servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve())));
    // Readings being committed are acknowledged before their connections close: closed
    // first, their devices would send them again after the restart, and they would be
    // stored twice. The writer still takes them (the server closes it after the broker).
    publishes.closing = true;
    await publishes.settled(PUBLISH_DRAIN_MS);
    // The last PUBACKs are written; a TLS socket passes them on to the network a turn of the
    // event loop later, and aedes destroys the connections it closes, dropping what is unsent.
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise<void>((resolve) => broker!.close(() => resolve()));
    // Connections that never completed CONNECT are not aedes clients yet.
    for (const socket of sockets) socket.destroy();
    await Promise.all(closing);
  };

  /**
   * --mqtt-proxy-protocol: every connection starts with a PROXY header from the proxy, read off
   * the raw socket before anything else (before TLS: the header precedes the ClientHello). A
   * connection without a valid one is closed: a proxy always sends it, so its absence means
   * someone bypassed the proxy and might otherwise pose as any client. Those closures are
   * warned about at most once a minute (a port scan must not flood the log), since a stream of
   * them usually means a proxy that was not told to send the header.
   */
  const headerlessLog = new ThrottledLog(MINUTE_MS);
  const notTlsLog = new ThrottledLog(MINUTE_MS);
  const stopFlushingLogs = [headerlessLog.flushEveryWindow(), notTlsLog.flushEveryWindow()];
  const acceptProxied = (next: (socket: Socket, address: string | undefined) => void) => (socket: Socket) => {
    track(socket);
    readProxyHeader(socket, CONNECT_TIMEOUT_MS).then(
      ({ clientAddress }) => next(socket, clientAddress),
      (err: Error) => {
        headerlessLog.report(
          (details, message) => log.warn(details, message),
          'no-proxy-header',
          'MQTT connection without a valid PROXY header closed (--mqtt-proxy-protocol; does the proxy send one?)',
          { peer: socket.remoteAddress, reason: err.message },
        );
        socket.destroy();
      },
    );
  };
  const handOverForwarded = (socket: Socket, address: string | undefined) => {
    if (address !== undefined) recordForwardedAddress(socket, address);
    handOver(socket);
  };

  let material: TlsMaterial | null = null;
  let tlsPort: number | null = null;
  let plainPort: number | null = null;
  try {
    if (config.mqttPort !== null) {
      material = await loadTlsMaterial(config, (create) => services.cluster.sharedValue(SHARED_VALUES.mqttTls, create));
      const tlsOptions = { cert: material.cert, key: material.key, minVersion: 'TLSv1.2' as const };
      let server: net.Server;
      if (config.mqttProxyProtocol) {
        const secureContext = tls.createSecureContext(tlsOptions);
        server = net.createServer(
          acceptProxied((raw, address) => {
            // The TLS socket takes over the raw one's handle, and with it the bytes put back
            // after the header (the start of the ClientHello).
            const socket = new tls.TLSSocket(raw, { isServer: true, secureContext });
            track(socket);
            const handshakeTimer = setTimeout(() => socket.destroy(), CONNECT_TIMEOUT_MS);
            const onHandshakeError = (err: Error) => {
              log.debug({ address, err: err.message }, 'MQTT TLS handshake failed');
              socket.destroy();
            };
            socket.on('error', onHandshakeError);
            socket.once('close', () => clearTimeout(handshakeTimer));
            socket.once('secure', () => {
              clearTimeout(handshakeTimer);
              // From here on aedes handles the connection's errors.
              socket.off('error', onHandshakeError);
              handOverForwarded(socket, address);
            });
          }),
        );
      } else {
        server = tls.createServer({ ...tlsOptions, handshakeTimeout: CONNECT_TIMEOUT_MS }, accept);
        // A connection is tracked from its first byte, not only once its handshake is done: one
        // that never finishes it would otherwise hold the server's close (and a shutdown) open.
        server.on('connection', remember);
        server.on('tlsClientError', (err, socket) => {
          log.debug({ address: socket.remoteAddress, err: err.message }, 'MQTT TLS handshake failed');
          // Node only reports a failed or timed-out handshake; the connection stays open
          // until it is destroyed.
          socket.destroy();
          // Bytes that are no TLS record at all: a plain MQTT client on the TLS port, or a
          // proxy sending PROXY headers to a node started without --mqtt-proxy-protocol. Both
          // leave the client with only "a TLS error occurred"; said here at most once a minute.
          if ((err as NodeJS.ErrnoException).code === 'ERR_SSL_WRONG_VERSION_NUMBER')
            notTlsLog.report(
              (details, message) => log.warn(details, message),
              'not-tls',
              'MQTT connection to the TLS port that did not start with TLS closed (a plain MQTT client, or a proxy sending PROXY headers: --mqtt-proxy-protocol?)',
              { peer: socket.remoteAddress },
            );
        });
      }
      servers.push(server);
      tlsPort = await listen(server, config.host, config.mqttPort);
      const origin = { generated: 'generated self-signed', reused: 'self-signed', configured: 'configured' }[material.source];
      print(
        `MQTT over TLS listening on ${config.host}:${tlsPort} (${origin} certificate ${material.certPath}, SHA-256 fingerprint ${material.fingerprint})`,
      );
      const uncovered = material.source === 'reused' ? namesNotCovered(material.cert, config) : [];
      // On PostgreSQL the pair is the cluster's, made by one node with its own addresses, so the
      // other nodes' LAN addresses are never in it: only names given to every node are checked.
      const newAddresses = material.source === 'reused' && config.databaseUrl === null ? lanAddressesNotCovered(material.cert, config) : [];
      // On PostgreSQL the pair is kept in the database: a new tls/ folder would get it back.
      const renew =
        config.databaseUrl === null
          ? `stop the server, delete ${path.dirname(material.certPath)} and start again to generate one that does (devices pinning the old fingerprint then need the new one), or give --tls-cert/--tls-key`
          : 'give --tls-cert/--tls-key a certificate that does';
      if (uncovered.length > 0) {
        print(
          `warning: the self-signed MQTT certificate was generated for other names and does not name ${uncovered.join(', ')} (--public-url/--host): devices that check it by that name fail the TLS handshake; ${renew}`,
        );
        log.warn({ names: uncovered }, 'the MQTT certificate does not name the --public-url/--host host');
      }
      if (newAddresses.length > 0) {
        print(
          `warning: the self-signed MQTT certificate was generated before this machine had the address ${newAddresses.join(', ')}: devices given it that check the certificate fail the TLS handshake; ${renew}`,
        );
        log.warn({ addresses: newAddresses }, 'the MQTT certificate does not name an address of this machine');
      }
    }
    if (config.mqttProxyProtocol) print('MQTT listeners expect a PROXY protocol header on every connection (--mqtt-proxy-protocol)');
    if (config.mqttPlainPort !== null) {
      const server = net.createServer(config.mqttProxyProtocol ? acceptProxied(handOverForwarded) : accept);
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
