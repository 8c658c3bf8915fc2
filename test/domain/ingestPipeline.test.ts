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
});
