import { Aedes, type Client, type PublishPacket } from 'aedes';
import { afterEach, describe, expect, it } from 'vitest';
import { skipTelemetryFanOut } from '../../src/mqtt/hooks.js';

/**
 * A device's telemetry is stored, never fanned out (src/mqtt/hooks.ts skipTelemetryFanOut):
 * checked against a real aedes broker through its 'publish' event, which aedes emits at the
 * end of the fan-out it skips.
 */
describe('telemetry fan-out', () => {
  let broker: Aedes | null = null;
  afterEach(async () => {
    await new Promise<void>((resolve) => (broker ? broker.close(() => resolve()) : resolve()));
    broker = null;
  });

  const packet = (topic: string): PublishPacket => ({
    cmd: 'publish',
    topic,
    payload: Buffer.from('{"t":1}'),
    qos: 1,
    retain: false,
    dup: false,
    messageId: 1,
  });
  const publish = (b: Aedes, p: PublishPacket, client: Client | null) =>
    new Promise<void>((resolve, reject) =>
      (b as unknown as { publish(p: PublishPacket, c: Client | null, done: (err?: Error | null) => void): void }).publish(
        p,
        client,
        (err) => (err ? reject(err) : resolve()),
      ),
    );

  it('skips a client publish on a telemetry topic and fans out everything else', async () => {
    broker = await Aedes.createBroker();
    skipTelemetryFanOut(broker);
    const fannedOut: string[] = [];
    broker.on('publish', (p) => {
      if (!p.topic.startsWith('$SYS')) fannedOut.push(p.topic);
    });
    const device = { id: 'dev-client' } as unknown as Client;
    await publish(broker, packet('d/dev_a/t'), device);
    expect(fannedOut).toEqual([]);
    // Not telemetry (a downlink topic), or published by the broker itself: aedes as before.
    await publish(broker, packet('d/dev_a/cmd'), device);
    await publish(broker, packet('d/dev_a/t'), null);
    expect(fannedOut).toEqual(['d/dev_a/cmd', 'd/dev_a/t']);
  });
});
