import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type ProxyHeader, ProxyHeaderError, parseProxyHeader, readProxyHeader } from '../../src/mqtt/proxyProtocol.js';

const SIGNATURE = Buffer.from('0d0a0d0a000d0a515549540a', 'hex');

/** A v2 header: version 2, `command` (0 LOCAL, 1 PROXY), `family` byte, then `block`. */
function v2(command: number, familyByte: number, block: Buffer): Buffer {
  const fixed = Buffer.alloc(4);
  fixed[0] = 0x20 | command;
  fixed[1] = familyByte;
  fixed.writeUInt16BE(block.length, 2);
  return Buffer.concat([SIGNATURE, fixed, block]);
}

function ipv4Block(src: number[], dst: number[], sport: number, dport: number): Buffer {
  const b = Buffer.alloc(12);
  Buffer.from(src).copy(b, 0);
  Buffer.from(dst).copy(b, 4);
  b.writeUInt16BE(sport, 8);
  b.writeUInt16BE(dport, 10);
  return b;
}

function ipv6Block(src: string, dst: string, sport: number, dport: number): Buffer {
  const b = Buffer.alloc(36);
  Buffer.from(src, 'hex').copy(b, 0);
  Buffer.from(dst, 'hex').copy(b, 16);
  b.writeUInt16BE(sport, 32);
  b.writeUInt16BE(dport, 34);
  return b;
}

const MQTT_CONNECT_START = Buffer.from([0x10, 0x1a, 0x00, 0x04, 0x4d, 0x51, 0x54, 0x54]);

describe('parseProxyHeader', () => {
  it('reads a v1 TCP4 header and says where it ends', () => {
    const text = 'PROXY TCP4 203.0.113.7 192.0.2.1 51234 8883\r\n';
    const parsed = parseProxyHeader(Buffer.concat([Buffer.from(text), MQTT_CONNECT_START]));
    expect(parsed).toEqual({
      header: {
        command: 'proxy',
        version: 1,
        source: { address: '203.0.113.7', port: 51234 },
        destination: { address: '192.0.2.1', port: 8883 },
      },
      length: text.length,
    });
  });

  it('reads a v1 TCP6 header', () => {
    const parsed = parseProxyHeader(Buffer.from('PROXY TCP6 2001:db8::7 2001:db8::1 40000 1883\r\n'));
    expect(parsed?.header).toMatchObject({ command: 'proxy', source: { address: '2001:db8::7', port: 40000 } });
  });

  it('takes v1 UNKNOWN as a header without a client address', () => {
    expect(parseProxyHeader(Buffer.from('PROXY UNKNOWN\r\n'))).toEqual({ header: { command: 'local', version: 1 }, length: 15 });
    const withJunk = 'PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n';
    expect(parseProxyHeader(Buffer.from(withJunk))?.length).toBe(withJunk.length);
  });

  it('refuses malformed v1 headers', () => {
    for (const text of [
      'PROXY TCP4 203.0.113.7 192.0.2.1 51234\r\n', // a field missing
      'PROXY TCP4 2001:db8::7 192.0.2.1 1 2\r\n', // IPv6 address under TCP4
      'PROXY TCP4 203.0.113.999 192.0.2.1 1 2\r\n',
      'PROXY TCP4 203.0.113.7 192.0.2.1 65536 2\r\n', // port out of range
      'PROXY TCP4 203.0.113.7 192.0.2.1 0x10 2\r\n',
      'PROXY UDP4 203.0.113.7 192.0.2.1 1 2\r\n',
      'PROXY  TCP4 203.0.113.7 192.0.2.1 1 2\r\n', // double space
    ]) {
      expect(() => parseProxyHeader(Buffer.from(text)), text).toThrow(ProxyHeaderError);
    }
  });

  it('refuses a v1 header without CRLF within 107 bytes, and binary bytes at once', () => {
    expect(() => parseProxyHeader(Buffer.from(`PROXY TCP4 ${'1'.repeat(120)}`))).toThrow(/107 bytes/);
    expect(parseProxyHeader(Buffer.from(`PROXY TCP4 ${'1'.repeat(80)}`))).toBeNull();
    expect(() => parseProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4\0'))).toThrow(ProxyHeaderError);
  });

  it('reads a v2 PROXY header over IPv4, skipping its TLVs', () => {
    const tlv = Buffer.from([0x05, 0x00, 0x03, 0x61, 0x62, 0x63]); // PP2_TYPE_UNIQUE_ID "abc"
    const header = v2(1, 0x11, Buffer.concat([ipv4Block([198, 51, 100, 23], [10, 0, 0, 2], 40001, 8883), tlv]));
    const parsed = parseProxyHeader(Buffer.concat([header, MQTT_CONNECT_START]));
    expect(parsed).toEqual({
      header: {
        command: 'proxy',
        version: 2,
        source: { address: '198.51.100.23', port: 40001 },
        destination: { address: '10.0.0.2', port: 8883 },
      },
      length: header.length,
    });
  });

  it('reads a v2 PROXY header over IPv6, in the form Node reports addresses', () => {
    const header = v2(1, 0x21, ipv6Block('20010db8000000000000000000000007', '00000000000000000000ffff7f000001', 40002, 1883));
    expect(parseProxyHeader(header)?.header).toEqual({
      command: 'proxy',
      version: 2,
      source: { address: '2001:db8::7', port: 40002 },
      destination: { address: '::ffff:7f00:1', port: 1883 },
    });
  });

  it('takes a v2 LOCAL header (a health check) as one without a client address', () => {
    expect(parseProxyHeader(v2(0, 0x00, Buffer.alloc(0)))).toEqual({ header: { command: 'local', version: 2 }, length: 16 });
    // LOCAL with addresses present: still LOCAL, and the whole block is consumed.
    const withAddresses = v2(0, 0x11, ipv4Block([1, 2, 3, 4], [5, 6, 7, 8], 1, 2));
    expect(parseProxyHeader(withAddresses)).toEqual({ header: { command: 'local', version: 2 }, length: 28 });
    // PROXY over a unix socket or UNSPEC: no usable address either.
    expect(parseProxyHeader(v2(1, 0x31, Buffer.alloc(216)))?.header).toEqual({ command: 'local', version: 2 });
  });

  it('refuses bad v2 headers', () => {
    const good = v2(1, 0x11, ipv4Block([1, 2, 3, 4], [5, 6, 7, 8], 1, 2));
    const badVersion = Buffer.from(good);
    badVersion[12] = 0x11;
    expect(() => parseProxyHeader(badVersion)).toThrow(/version/);
    expect(() => parseProxyHeader(badVersion.subarray(0, 13))).toThrow(/version/);
    const badCommand = Buffer.from(good);
    badCommand[12] = 0x22;
    expect(() => parseProxyHeader(badCommand)).toThrow(/command/);
    expect(() => parseProxyHeader(v2(1, 0x11, Buffer.alloc(8)))).toThrow(/too short for IPv4/);
    expect(() => parseProxyHeader(v2(1, 0x21, Buffer.alloc(12)))).toThrow(/too short for IPv6/);
    expect(() => parseProxyHeader(v2(1, 0x41, Buffer.alloc(12)))).toThrow(/family/);
  });

  it('asks for more bytes on every proper prefix of a header, and only then', () => {
    const headers = [
      Buffer.from('PROXY TCP4 203.0.113.7 192.0.2.1 51234 8883\r\n'),
      v2(1, 0x11, ipv4Block([1, 2, 3, 4], [5, 6, 7, 8], 1, 2)),
      v2(1, 0x21, ipv6Block('20010db8000000000000000000000007', '20010db8000000000000000000000001', 1, 2)),
    ];
    for (const header of headers) {
      for (let n = 0; n < header.length; n++) expect(parseProxyHeader(header.subarray(0, n)), `${n} bytes`).toBeNull();
      expect(parseProxyHeader(header)?.length).toBe(header.length);
    }
  });

  it('refuses a connection that starts with anything else at its first byte', () => {
    expect(() => parseProxyHeader(MQTT_CONNECT_START.subarray(0, 1))).toThrow(/does not start with a PROXY protocol header/);
    expect(() => parseProxyHeader(Buffer.from([0x16, 0x03, 0x01]))).toThrow(ProxyHeaderError); // a TLS ClientHello
    expect(() => parseProxyHeader(Buffer.from('PROXX'))).toThrow(ProxyHeaderError);
    expect(() => parseProxyHeader(Buffer.from('GET / HTTP/1.1\r\n'))).toThrow(ProxyHeaderError);
    expect(() => parseProxyHeader(Buffer.concat([SIGNATURE.subarray(0, 5), Buffer.from([0x42])]))).toThrow(ProxyHeaderError);
  });
});

describe('readProxyHeader on a real socket', () => {
  const servers: net.Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  /**
   * A server whose connections run readProxyHeader; resolves with its outcome and the
   * first bytes read after it. The client sends `chunks`, one write per chunk with a pause
   * between, so each arrives as its own TCP read, then ends the connection if `endAfter`.
   */
  async function exchange(
    chunks: Buffer[],
    timeoutMs = 2_000,
    endAfter = false,
  ): Promise<{ result: Awaited<ReturnType<typeof readProxyHeader>> | Error; after: Buffer }> {
    let settle!: (value: { result: Awaited<ReturnType<typeof readProxyHeader>> | Error; after: Buffer }) => void;
    const outcome = new Promise<{ result: Awaited<ReturnType<typeof readProxyHeader>> | Error; after: Buffer }>((r) => (settle = r));
    const server = net.createServer((socket) => {
      readProxyHeader(socket, timeoutMs).then(
        (result) => {
          let after = Buffer.alloc(0);
          socket.on('data', (d: Buffer) => {
            after = Buffer.concat([after, d]);
            if (after.length >= MQTT_CONNECT_START.length) settle({ result, after });
          });
          socket.resume();
        },
        (err: Error) => {
          socket.destroy();
          settle({ result: err, after: Buffer.alloc(0) });
        },
      );
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
    client.on('error', () => {});
    await new Promise((r) => client.once('connect', r));
    client.setNoDelay(true);
    for (const chunk of chunks) {
      client.write(chunk);
      await new Promise((r) => setTimeout(r, 20));
    }
    if (endAfter) client.end();
    const result = await outcome;
    client.destroy();
    return result;
  }

  it('assembles a v1 header split over several TCP reads and hands back the bytes after it', async () => {
    const header = 'PROXY TCP4 203.0.113.7 192.0.2.1 51234 8883\r\n';
    const { result, after } = await exchange([
      Buffer.from(header.slice(0, 3)),
      Buffer.from(header.slice(3, 20)),
      Buffer.from(header.slice(20, -1)),
      Buffer.concat([Buffer.from(header.slice(-1)), MQTT_CONNECT_START.subarray(0, 3)]),
      MQTT_CONNECT_START.subarray(3),
    ]);
    expect(result).not.toBeInstanceOf(Error);
    expect((result as { clientAddress: string }).clientAddress).toBe('203.0.113.7');
    expect(after.equals(MQTT_CONNECT_START)).toBe(true);
  });

  it('assembles a v2 header split inside its signature and its address block', async () => {
    const header = v2(1, 0x21, ipv6Block('20010db8000000000000000000000007', '20010db8000000000000000000000001', 5, 6));
    const { result, after } = await exchange([
      header.subarray(0, 7),
      header.subarray(7, 15),
      header.subarray(15, 30),
      Buffer.concat([header.subarray(30), MQTT_CONNECT_START]),
    ]);
    expect((result as { clientAddress: string }).clientAddress).toBe('2001:db8::7');
    expect(after.equals(MQTT_CONNECT_START)).toBe(true);
  });

  it("uses the socket's own peer for a LOCAL header", async () => {
    const { result } = await exchange([Buffer.concat([v2(0, 0x00, Buffer.alloc(0)), MQTT_CONNECT_START])]);
    expect(result).toMatchObject({ header: { command: 'local' } as ProxyHeader, clientAddress: '127.0.0.1' });
  });

  it('rejects garbage, a truncated header and silence', async () => {
    expect((await exchange([MQTT_CONNECT_START])).result).toBeInstanceOf(ProxyHeaderError);
    // The client stops mid-header and closes: rejected, not left waiting.
    const truncated = await exchange([Buffer.from('PROXY TCP4 203.0.113.7 192.0.2.1 512')], 5_000, true);
    expect((truncated.result as Error).message).toMatch(/closed before a complete PROXY header/);
    const silent = await exchange([], 300);
    expect((silent.result as Error).message).toMatch(/no PROXY header within 300 ms/);
  });
});
