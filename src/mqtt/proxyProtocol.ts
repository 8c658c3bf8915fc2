/**
 * The PROXY protocol (versions 1 and 2), as haproxy, nginx and cloud load balancers send it at
 * the start of a TCP connection to say whose connection they forward (docs/operations.md,
 * "Behind a proxy"). Only the receiving side: the header is read from the raw socket before
 * anything else (TLS included) sees a byte, and the bytes after it are handed back untouched.
 *
 * Written here rather than taken from a package: the parsers on npm take a complete header,
 * while the part that needs care is knowing, chunk by chunk, where the header ends and when
 * the bytes so far can no longer become one, so garbage is refused at its first byte.
 */
import { isIPv4, isIPv6, type Socket } from 'node:net';

/** What a header says: the client's address, or (LOCAL, UNKNOWN, unix sockets) nothing usable. */
export type ProxyHeader =
  | { command: 'proxy'; version: 1 | 2; source: { address: string; port: number }; destination: { address: string; port: number } }
  | { command: 'local'; version: 1 | 2 };

export class ProxyHeaderError extends Error {}

const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
const V1_PREFIX = Buffer.from('PROXY ', 'latin1');
/** A v1 header is at most 107 bytes, CRLF included (the protocol's own bound). */
const V1_MAX_BYTES = 107;
const V2_FIXED_BYTES = 16;

/**
 * Parses a header at the start of `buf`. Returns null while `buf` is a proper prefix of a
 * header (more bytes needed), the header and its length once complete; throws
 * ProxyHeaderError as soon as the bytes cannot be the start of a header.
 */
export function parseProxyHeader(buf: Buffer): { header: ProxyHeader; length: number } | null {
  if (startsWithPrefixOf(buf, V2_SIGNATURE)) {
    return buf.length < V2_SIGNATURE.length ? null : parseV2(buf);
  }
  if (startsWithPrefixOf(buf, V1_PREFIX)) {
    return buf.length < V1_PREFIX.length ? null : parseV1(buf);
  }
  throw new ProxyHeaderError('connection does not start with a PROXY protocol header');
}

/** True when the shorter of `buf` and `signature` is a prefix of the other. */
function startsWithPrefixOf(buf: Buffer, signature: Buffer): boolean {
  const n = Math.min(buf.length, signature.length);
  return buf.subarray(0, n).equals(signature.subarray(0, n));
}

function parseV1(buf: Buffer): { header: ProxyHeader; length: number } | null {
  const end = buf.subarray(0, V1_MAX_BYTES).indexOf('\r\n', 0, 'latin1');
  if (end < 0) {
    if (buf.length >= V1_MAX_BYTES) throw new ProxyHeaderError('PROXY v1 header longer than 107 bytes');
    // Only printable ASCII belongs in a v1 header: a stray byte fails now, not 107 bytes later.
    for (let i = 0; i < buf.length; i++) {
      const c = buf[i]!;
      if ((c < 0x20 || c > 0x7e) && !(c === 0x0d && i === buf.length - 1)) throw new ProxyHeaderError('PROXY v1 header is not text');
    }
    return null;
  }
  const length = end + 2;
  const fields = buf.toString('latin1', V1_PREFIX.length, end).split(' ');
  const family = fields[0];
  if (family === 'UNKNOWN') return { header: { command: 'local', version: 1 }, length };
  if ((family !== 'TCP4' && family !== 'TCP6') || fields.length !== 5) {
    throw new ProxyHeaderError(`PROXY v1 header is malformed: ${JSON.stringify(buf.toString('latin1', 0, end))}`);
  }
  const isFamily = family === 'TCP4' ? isIPv4 : isIPv6;
  const [, srcAddress, dstAddress, srcPort, dstPort] = fields as [string, string, string, string, string];
  if (!isFamily(srcAddress) || !isFamily(dstAddress)) throw new ProxyHeaderError(`PROXY v1 header has an address that is not ${family}`);
  return {
    header: {
      command: 'proxy',
      version: 1,
      source: { address: srcAddress, port: v1Port(srcPort) },
      destination: { address: dstAddress, port: v1Port(dstPort) },
    },
    length,
  };
}

function v1Port(text: string): number {
  if (!/^(0|[1-9][0-9]{0,4})$/.test(text) || Number(text) > 65535) throw new ProxyHeaderError(`PROXY v1 header has a bad port "${text}"`);
  return Number(text);
}

function parseV2(buf: Buffer): { header: ProxyHeader; length: number } | null {
  if (buf.length < V2_FIXED_BYTES) {
    // The version nibble is known at byte 13: refuse another version without waiting.
    if (buf.length > 12 && buf[12]! >> 4 !== 2) throw new ProxyHeaderError('PROXY v2 header with an unknown version');
    return null;
  }
  const versionCommand = buf[12]!;
  if (versionCommand >> 4 !== 2) throw new ProxyHeaderError('PROXY v2 header with an unknown version');
  const command = versionCommand & 0x0f;
  if (command > 1) throw new ProxyHeaderError(`PROXY v2 header with an unknown command ${command}`);
  const family = buf[13]! >> 4;
  const addressBytes = buf.readUInt16BE(14);
  const length = V2_FIXED_BYTES + addressBytes;
  if (buf.length < length) return null;
  // LOCAL: the proxy's own connection (a health check); the addresses, if any, mean nothing.
  if (command === 0) return { header: { command: 'local', version: 2 }, length };
  const block = buf.subarray(V2_FIXED_BYTES, length);
  if (family === 1) {
    if (block.length < 12) throw new ProxyHeaderError('PROXY v2 header too short for IPv4 addresses');
    return {
      header: {
        command: 'proxy',
        version: 2,
        source: { address: ipv4(block, 0), port: block.readUInt16BE(8) },
        destination: { address: ipv4(block, 4), port: block.readUInt16BE(10) },
      },
      length,
    };
  }
  if (family === 2) {
    if (block.length < 36) throw new ProxyHeaderError('PROXY v2 header too short for IPv6 addresses');
    return {
      header: {
        command: 'proxy',
        version: 2,
        source: { address: ipv6(block, 0), port: block.readUInt16BE(32) },
        destination: { address: ipv6(block, 16), port: block.readUInt16BE(34) },
      },
      length,
    };
  }
  if (family === 0 || family === 3) {
    // UNSPEC or a unix socket: no client address to take; the connection's own is used.
    return { header: { command: 'local', version: 2 }, length };
  }
  throw new ProxyHeaderError(`PROXY v2 header with an unknown address family ${family}`);
}

function ipv4(block: Buffer, at: number): string {
  return `${block[at]}.${block[at + 1]}.${block[at + 2]}.${block[at + 3]}`;
}

/** RFC 5952 text (what Node reports for a socket's address): zeros compressed, lower case. */
function ipv6(block: Buffer, at: number): string {
  const groups: string[] = [];
  for (let i = 0; i < 8; i++) groups.push(block.readUInt16BE(at + i * 2).toString(16));
  // The WHATWG URL parser serializes an IPv6 host in exactly that canonical form.
  return new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1);
}

/** The header read off a connection, and the client address it comes to. */
export interface ProxiedConnection {
  header: ProxyHeader;
  /** The source address from the header, or the socket's own peer for LOCAL/UNKNOWN. */
  clientAddress: string | undefined;
}

/**
 * Reads the PROXY header off a fresh socket. The bytes after it are put back (unshift), so the
 * next reader (the MQTT parser, or a TLS socket wrapping this one) starts exactly after the
 * header. Rejects on a bad header, on a connection that ends first, and after `timeoutMs`;
 * the caller destroys the socket then.
 */
export function readProxyHeader(socket: Socket, timeoutMs: number): Promise<ProxiedConnection> {
  return new Promise((resolve, reject) => {
    let received: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => finish(new ProxyHeaderError(`no PROXY header within ${timeoutMs} ms`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
      let parsed: ReturnType<typeof parseProxyHeader>;
      try {
        parsed = parseProxyHeader(received);
      } catch (err) {
        return finish(err as Error);
      }
      if (!parsed) return;
      socket.pause();
      finish(null);
      if (received.length > parsed.length) socket.unshift(received.subarray(parsed.length));
      const { header } = parsed;
      resolve({ header, clientAddress: header.command === 'proxy' ? header.source.address : socket.remoteAddress });
    };
    const onEnd = (err?: Error) =>
      finish(new ProxyHeaderError(`connection closed before a complete PROXY header${err instanceof Error ? `: ${err.message}` : ''}`));
    const finish = (err: Error | null) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('error', onEnd);
      socket.off('close', onEnd);
      if (err) reject(err);
    };
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('error', onEnd);
    socket.on('close', onEnd);
  });
}
