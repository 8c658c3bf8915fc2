import { createHook } from 'node:async_hooks';
import { describe, expect, it } from 'vitest';
import { composeServices } from '../../src/composition.js';
import { useTempDatabases } from '../helpers/db.js';

/**
 * The MQTT hook chains `.then` on ingestReading (src/mqtt/hooks.ts): every refusal must come
 * back as a rejected promise, never as a synchronous throw into aedes.
 */
describe('ingestReading', () => {
  const temp = useTempDatabases();

  it('refuses by rejecting, and stores a valid payload once committed', async () => {
    const db = temp.open(temp.dir());
    const services = composeServices(db).services;
    const account = await services.accounts.create({ email: 'p@example.com', plan: 'business' });
    const { device, accessToken } = await services.devices.create(account, { name: 'd' });
    const calls = [
      () => services.ingest.ingestReading({ transport: 'mqtt', deviceId: 'dev_missing', data: Buffer.from('{"t":1}') }),
      () => services.ingest.ingestReading({ transport: 'http', deviceId: device.id, token: 'wrong', data: { t: 1 } }),
      () => services.ingest.ingestReading({ transport: 'mqtt', deviceId: device.id, data: Buffer.from('not json') }),
      () => services.ingest.ingestReading({ transport: 'http', deviceId: device.id, token: accessToken, data: [1, 2] }),
    ];
    for (const call of calls) {
      let result: Promise<unknown> | undefined;
      expect(() => (result = call())).not.toThrow();
      await expect(result).rejects.toMatchObject({ status: expect.any(Number) });
    }
    const stored = await services.ingest.ingestReading({ transport: 'mqtt', deviceId: device.id, data: Buffer.from('{ "t" : 1.50 }') });
    expect(stored.data).toBe('{ "t" : 1.50 }');
    expect(db.prepare('SELECT count(*) AS n FROM readings WHERE device_seq = ?').get(device.seq)).toEqual({ n: 1 });
  });

  it("costs no promise beyond the writer's for authentication, over HTTP and MQTT alike", async () => {
    const db = temp.open(temp.dir());
    const services = composeServices(db).services;
    const account = await services.accounts.create({ email: 'q@example.com', plan: 'business' });
    const { device, accessToken } = await services.devices.create(account, { name: 'd' });
    const requests = {
      http: () => services.ingest.ingestReading({ transport: 'http', deviceId: device.id, token: accessToken, data: { t: 1 } }),
      mqtt: () => services.ingest.ingestReading({ transport: 'mqtt', deviceId: device.id, data: Buffer.from('{"t":1}') }),
    };
    let created = 0;
    const hook = createHook({
      init(_id, type) {
        if (type === 'PROMISE') created++;
      },
    });
    let stored = 0;
    services.events.on('reading.stored', () => stored++);
    for (const [transport, ingest] of Object.entries(requests)) {
      await ingest(); // fills the authentication cache
      const n = 1_000;
      stored = 0;
      created = 0;
      hook.enable();
      for (let i = 0; i < n; i++) void ingest();
      // Until the last reading's final step ('reading.stored'): a few promises for the waiting itself.
      while (stored < n) await new Promise((resolve) => setTimeout(resolve, 20));
      hook.disable();
      // The writer's append and the two steps chained on it (the stored reading, then alerts
      // and the live event): a synchronous answer of the cache adds nothing to them.
      expect(Math.round(created / n), transport).toBe(3);
    }
  });
});
