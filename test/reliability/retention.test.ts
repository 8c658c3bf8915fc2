/**
 * Telemetry retention (docs/operations.md, "Retention"): readings older than the plan retention are deleted
 * by a background job, in small batches that yield to the event loop, with last_seen kept.
 * The job's clock is the server's injectable clock: the test moves time forward.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { DAY_MS } from '../../src/time.js';
import { storedRows } from '../helpers/backend.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

let server: TestServer | null = null;
afterEach(async () => {
  await server?.stop();
  server = null;
});

const T0 = Date.UTC(2026, 0, 10, 12, 0, 0);

async function countReadings(s: TestServer, deviceSeq: number): Promise<number> {
  return (await storedRows(s.storage, deviceSeq)).length;
}

describe('retention job', () => {
  it('deletes readings past the plan retention in small yielding batches and keeps last_seen', async () => {
    let now = T0;
    const batches: number[] = [];
    let immediatesRun = 0;
    let yieldedBetweenBatches = true;
    server = await startTestServer(
      {},
      {
        clock: { now: () => now },
        retention: {
          firstRunDelayMs: 3_600_000,
          batchSize: 50,
          onBatch: (deleted) => {
            // The previous batch's setImmediate already ran: the loop turned between batches.
            if (immediatesRun !== batches.length) yieldedBetweenBatches = false;
            batches.push(deleted);
            setImmediate(() => immediatesRun++);
          },
        },
      },
    );
    // starter plan: 30 days of retention.
    const { account, key, device: a, token: tokenA } = await seedAccount(server);
    const { device: b, accessToken: tokenB } = await server.services.devices.create(account, { name: 'only old data' });
    const { device: never } = await server.services.devices.create(account, { name: 'never sent anything' });

    // 400 old readings (A: 300, B: 100), one millisecond apart, ending at T0 + 399.
    for (let i = 0; i < 400; i++) {
      now = T0 + i;
      const [id, token] = i % 4 === 0 ? [b.id, tokenB] : [a.id, tokenA];
      // The pipeline directly (the HTTP path is exercised below): 400 requests would be slow.
      await server.services.ingest.ingestReading({ transport: 'http', deviceId: id, token, data: { i } });
    }
    const lastOfB = T0 + 396;
    expect(await countReadings(server, a.seq)).toBe(300);

    // 31 days later: A sends fresh readings; everything from T0 is past retention.
    now = T0 + 31 * DAY_MS;
    for (let i = 0; i < 3; i++)
      expect((await ingest(server, { device_id: a.id, access_token: tokenA, data: { fresh: i } })).status).toBe(200);

    // Ingest keeps being answered while the job runs.
    const running = server.retention.runOnce();
    const during = await Promise.all(
      Array.from({ length: 20 }, (_, i) => ingest(server!, { device_id: a.id, access_token: tokenA, data: { during: i } })),
    );
    const run = await running;
    expect(during.map((r) => r.status)).toEqual(Array(20).fill(200));

    expect(run.deleted).toBe(400);
    expect(run.devices).toBe(2);
    expect(batches.every((n) => n <= 50)).toBe(true);
    expect(batches.length).toBeGreaterThanOrEqual(8);
    expect(yieldedBetweenBatches).toBe(true);
    expect(await countReadings(server, a.seq)).toBe(23);
    expect(await countReadings(server, b.seq)).toBe(0);

    // B has no reading left, yet its last_seen is still the time of its newest reading.
    const res = await server.request(`/v1/devices/${b.id}`, { key });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: { last_seen: string | null } };
    expect(body.data.last_seen).toBe(new Date(lastOfB).toISOString());
    // A device that never sent a reading has still not been seen.
    const unseen = (await (await server.request(`/v1/devices/${never.id}`, { key })).json()) as { data: { last_seen: string | null } };
    expect(unseen.data.last_seen).toBeNull();

    // One day before a reading's retention ends it is kept: a second pass deletes nothing.
    now = T0 + 31 * DAY_MS + 29 * DAY_MS;
    expect((await server.retention.runOnce()).deleted).toBe(0);
    expect(await countReadings(server, a.seq)).toBe(23);
  });

  it('runs on its own timer and stops with the server', async () => {
    let now = T0;
    server = await startTestServer({}, { clock: { now: () => now }, retention: { firstRunDelayMs: 1, intervalMs: 20 } });
    const { device, token } = await seedAccount(server);
    for (let i = 0; i < 5; i++) expect((await ingest(server, { device_id: device.id, access_token: token, data: { i } })).status).toBe(200);
    now = T0 + 45 * DAY_MS;
    const deadline = Date.now() + 10_000;
    while ((await countReadings(server, device.seq)) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(await countReadings(server, device.seq)).toBe(0);
    await server.stop();
    server = null;
  });
});
