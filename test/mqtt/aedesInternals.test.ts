import { readFileSync } from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import { Aedes, type Client, type PublishPacket } from 'aedes';
import { afterEach, describe, expect, it } from 'vitest';
import { AEDES_VERSION, isStoredQos2Duplicate, limitPacketSize, remoteAddressOf, skipFanOut } from '../../src/mqtt/aedesInternals.js';

/**
 * The aedes internals src/mqtt/aedesInternals.ts relies on, checked against the installed
 * aedes: an upgrade that moves any of them fails here.
 */
describe('aedes internals', () => {
  let broker: Aedes | null = null;
  let server: net.Server | null = null;
  afterEach(async () => {
    if (server) await new Promise<void>((resolve) => server!.close(() => resolve()));
    await new Promise<void>((resolve) => (broker ? broker.close(() => resolve()) : resolve()));
    broker = null;
    server = null;
  });

  const packet = (topic: string, messageId = 1): PublishPacket => ({
    cmd: 'publish',
    topic,
    payload: Buffer.from('{"t":1}'),
    qos: 1,
    retain: false,
    dup: false,
    messageId,
  });
  const publish = (b: Aedes, p: PublishPacket, client: Client | null) =>
    new Promise<void>((resolve, reject) =>
      (b as unknown as { publish(p: PublishPacket, c: Client | null, done: (err?: Error | null) => void): void }).publish(
        p,
        client,
        (err) => (err ? reject(err) : resolve()),
      ),
    );

  /** A real aedes client on a real loopback connection, with the raw socket of its peer. */
  async function connectedClient(b: Aedes, onClient: (client: Client) => void) {
    server = net.createServer((socket) => onClient(b.handle(socket)));
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const peer = net.connect((server.address() as AddressInfo).port, '127.0.0.1');
    await new Promise<void>((resolve) => peer.once('connect', resolve));
    return peer;
  }

  it('aedes is pinned to the exact version these internals were checked against', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    const installed = JSON.parse(readFileSync(new URL('../../node_modules/aedes/package.json', import.meta.url), 'utf8'));
    expect(pkg.dependencies.aedes).toBe(AEDES_VERSION);
    expect(installed.version).toBe(AEDES_VERSION);
  });

  it('skipFanOut skips the selected client publishes and fans out everything else', async () => {
    broker = await Aedes.createBroker();
    skipFanOut(broker, (p) => p.topic.endsWith('/t'));
    const fannedOut: string[] = [];
    broker.on('publish', (p) => {
      if (!p.topic.startsWith('$SYS')) fannedOut.push(p.topic);
    });
    const device = { id: 'dev-client' } as unknown as Client;
    await publish(broker, packet('d/dev_a/t'), device);
    expect(fannedOut).toEqual([]);
    // Not selected, or published by the broker itself: aedes as before.
    await publish(broker, packet('d/dev_a/cmd'), device);
    await publish(broker, packet('d/dev_a/t'), null);
    expect(fannedOut).toEqual(['d/dev_a/cmd', 'd/dev_a/t']);
  });

  it('isStoredQos2Duplicate finds a packet in the inbound store of that client only', async () => {
    broker = await Aedes.createBroker();
    const client = { id: 'dev-client' } as unknown as Client;
    const other = { id: 'other-client' } as unknown as Client;
    const persistence = (broker as unknown as { persistence: { incomingStorePacket(c: Client, p: PublishPacket): Promise<void> } })
      .persistence;
    await persistence.incomingStorePacket(client, { ...packet('d/dev_a/t', 7), qos: 2 });
    expect(await isStoredQos2Duplicate(broker, client, packet('d/dev_a/t', 7))).toBe(true);
    expect(await isStoredQos2Duplicate(broker, client, packet('d/dev_a/t', 8))).toBe(false);
    expect(await isStoredQos2Duplicate(broker, other, packet('d/dev_a/t', 7))).toBe(false);
  });

  it('limitPacketSize ends the connection at the fixed header of an oversized packet', async () => {
    broker = await Aedes.createBroker();
    const b = broker;
    const seen: { guarded?: boolean; address?: string; oversize?: [string | undefined, string] } = {};
    const peer = await connectedClient(b, (client) => {
      seen.address = remoteAddressOf(client);
      seen.guarded = limitPacketSize(client, 1_000, (cmd, reason) => {
        seen.oversize = [cmd, reason];
      });
    });
    const closed = new Promise<void>((resolve) => peer.once('close', () => resolve()));
    peer.on('error', () => {});
    // PUBLISH QoS 0 announcing a remaining length of 100,000 bytes; only 2 bytes follow.
    peer.write(Buffer.from([0x30, 0xa0, 0x8d, 0x06, 0x00, 0x01]));
    await closed;
    expect(seen.guarded).toBe(true);
    expect(seen.address).toBe('127.0.0.1');
    expect(seen.oversize).toEqual(['publish', 'MQTT packet of 100000 bytes exceeds the limit of 1000']);
  });

  it('limitPacketSize lets a packet within the limit through', async () => {
    broker = await Aedes.createBroker();
    let oversize = false;
    const connected = new Promise<void>((resolve) => broker!.once('client', () => resolve()));
    const peer = await connectedClient(broker, (client) => {
      limitPacketSize(client, 1_000, () => {
        oversize = true;
      });
    });
    // CONNECT, MQTT 3.1.1, clean session, keepalive 60, client id "c".
    peer.write(Buffer.from([0x10, 0x0d, 0x00, 0x04, 0x4d, 0x51, 0x54, 0x54, 0x04, 0x02, 0x00, 0x3c, 0x00, 0x01, 0x63]));
    await connected;
    expect(oversize).toBe(false);
    peer.destroy();
  });
});
