import { createHook } from 'node:async_hooks';
import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import type { Composition } from '../../src/composition.js';
import { openDataDirStorage, storedRows } from '../helpers/backend.js';
import { tempDir } from '../helpers/server.js';

/**
 * The MQTT hook chains `.then` on ingestReading (src/mqtt/hooks.ts): every refusal must come
 * back as a rejected promise, never as a synchronous throw into aedes.
 */
describe('ingestReading', () => {
  const opened: Composition[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    for (const c of opened.splice(0)) await c.close();
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  /** The services over a new data dir's database (SQLite, or its PostgreSQL database). */
  async function open(): Promise<Composition> {
    const dir = tempDir();
    dirs.push(dir);
    const c = await openDataDirStorage(dir);
    opened.push(c);
    return c;
  }

  it('refuses by rejecting, and stores a valid payload once committed', async () => {
    const { services, storage } = await open();
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
    expect(await storedRows(storage, device.seq)).toHaveLength(1);
  });

  it("costs no promise beyond the writer's for authentication, over HTTP and MQTT alike", async () => {
    const { services } = await open();
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
      // The writer's append and the one step chained on it (the stored reading with its
      // alerts and live event): a synchronous answer of the cache adds nothing to them.
      expect(Math.round(created / n), transport).toBe(2);
    }
  });
});
