/**
 * Every use of aedes beyond its public API, in one place. aedes is pinned to the exact
 * version these were written against (package.json); test/mqtt/aedesInternals.test.ts
 * checks each one against the installed aedes, so an upgrade that moves them fails there
 * instead of silently losing the size guard or the duplicate check.
 *
 * - `broker.publish(packet, client, done)`: the fan-out after a PUBACK (subscription tries,
 *   the emitter, the 'publish' event);
 * - `broker.persistence.incomingGetPacket(client, { messageId })`: the QoS 2 inbound store;
 * - `client._parser`: mqtt-packet's parser of that connection (`_parseLength`,
 *   `_emitError`, `packet`);
 * - `client.conn.remoteAddress`: the peer address of the connection.
 */
import type { Aedes, Client, PublishPacket } from 'aedes';
import { addressOfConnection } from './clientAddress.js';

/** The aedes version the internals below were checked against. */
export const AEDES_VERSION = '1.2.0';

type FanOut = (packet: PublishPacket, client: Client | null, done?: (err?: Error | null) => void) => void;

/**
 * Skips aedes's fan-out for the publishes `skip` selects. Telemetry is never forwarded nor
 * retained, yet after the PUBACK aedes would still look each packet up in its subscription
 * tries for live and offline subscribers and run its emitter: work that delivers nothing,
 * on the broker's only thread. Publishes by the broker itself (client null) always go
 * through.
 */
export function skipFanOut(broker: Aedes, skip: (packet: PublishPacket) => boolean): void {
  const target = broker as unknown as { publish: FanOut };
  const fanOut = target.publish.bind(broker);
  target.publish = (packet, client, done) => {
    if (client && skip(packet)) {
      done?.(null);
      return;
    }
    fanOut(packet, client, done);
  };
}

/**
 * True when a QoS 2 PUBLISH re-sent before PUBREL (with DUP or without) is already in aedes's
 * inbound store for this session: it must not be ingested twice (aedes answers it with PUBREC again).
 */
export async function isStoredQos2Duplicate(broker: Aedes, client: Client, packet: PublishPacket): Promise<boolean> {
  const persistence = (broker as unknown as { persistence: { incomingGetPacket(c: Client, p: { messageId?: number }): Promise<unknown> } })
    .persistence;
  try {
    await persistence.incomingGetPacket(client, { messageId: packet.messageId });
    return true;
  } catch {
    return false;
  }
}

/** The parts of mqtt-packet's parser that the size guard relies on. */
interface PacketParser {
  packet: { cmd?: string; length: number };
  _parseLength(): boolean;
  _emitError(err: Error): void;
}

/**
 * Ends a connection whose next packet announces a remaining length above `maxBytes`, as
 * soon as the fixed header is read, so an oversized packet is never buffered (mqtt-packet
 * has no limit of its own). `onOversize` runs first, with the packet type and the reason.
 * Returns false when the connection has no parser to guard (the internals moved).
 */
export function limitPacketSize(client: Client, maxBytes: number, onOversize: (cmd: string | undefined, reason: string) => void): boolean {
  const parser = (client as unknown as { _parser?: PacketParser })._parser;
  if (!parser || typeof parser._parseLength !== 'function' || typeof parser._emitError !== 'function') return false;
  const parseLength = parser._parseLength;
  parser._parseLength = function guardedParseLength(this: PacketParser) {
    const complete = parseLength.call(this);
    if (complete && this.packet.length > maxBytes) {
      const reason = `MQTT packet of ${this.packet.length} bytes exceeds the limit of ${maxBytes}`;
      onOversize(this.packet.cmd, reason);
      this._emitError(new Error(reason));
      return false;
    }
    return complete;
  };
  return true;
}

/**
 * The client address of a client's connection, when it has one: the one a PROXY header named
 * (./clientAddress.ts), else the socket's peer.
 */
export function remoteAddressOf(client: Client): string | undefined {
  const conn = (client as unknown as { conn?: { remoteAddress?: string } }).conn;
  return conn ? addressOfConnection(conn) : undefined;
}
