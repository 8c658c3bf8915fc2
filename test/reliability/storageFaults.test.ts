/**
 * Database write failures: ingest acknowledges nothing and works again without a restart
 * once the fault clears. A failure that is not the storage's (here a trigger that aborts
 * every insert, a real database failure, no mocks) is a 500; a storage failure (SQLite's write
 * lock held past the busy timeout; disk full and I/O errors in diskFull.test.ts) is a 503
 * with Retry-After. The server's prepared statements must survive the schema change.
 */

import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { failReadingInserts, onPostgres, sqliteDb, storedRows } from '../helpers/backend.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

let server: TestServer | null = null;
afterEach(async () => {
  await server?.stop();
  server = null;
});

describe('database write failures', () => {
  it('answer 500, store nothing, and recover when the fault clears', async () => {
    server = await startTestServer();
    const { device, token, key } = await seedAccount(server);
    const send = (n: number) => ingest(server!, { device_id: device.id, access_token: token, data: { n } });
    expect((await send(0)).status).toBe(200);

    const heal = await failReadingInserts(server, device.seq);
    {
      // A group of concurrent requests shares one transaction: all fail, none is acknowledged.
      const failing = await Promise.all([1, 2, 3, 4, 5].map(send));
      for (const r of failing) {
        expect(r.status).toBe(500);
        // 5xx details stay in the log, not in the answer.
        expect(r.body).toEqual({ success: false, error: 'internal server error' });
      }
      const stored = async () => (await storedRows(server!.storage, device.seq)).map((r) => JSON.parse(r.data).n);
      expect(await stored()).toEqual([0]);
      // Health still reports the database reachable (reads work; this was a write fault).
      expect((await server.request('/healthz')).status).toBe(200);

      await heal();
      const recovered = await Promise.all([6, 7].map(send));
      expect(recovered.map((r) => r.status)).toEqual([200, 200]);
      expect(await stored()).toEqual([0, 6, 7]);
    }
    // Reads were never affected.
    const latest = await server.request(`/v1/devices/${device.id}/telemetry/latest`, { key });
    expect(latest.status).toBe(200);
  });

  // SQLite's write lock (held by a second connection to its file) and its busy timeout.
  it.skipIf(onPostgres)(
    'a database locked by another writer beyond the busy timeout is a 503 with Retry-After, then recovers',
    async () => {
      server = await startTestServer();
      const { device, token } = await seedAccount(server);
      const other = new Database(path.join(server.dataDir, 'telemetryd.db'));
      try {
        // Shorten the server's wait so the test does not sit 10 s on the lock.
        sqliteDb(server.storage).pragma('busy_timeout = 200');
        other.exec('BEGIN IMMEDIATE');
        const locked = await ingest(server, { device_id: device.id, access_token: token, data: { n: 1 } });
        expect(locked.status).toBe(503);
        expect(locked.body).toEqual({ success: false, error: 'storage unavailable: database busy' });
        expect(locked.headers.get('retry-after')).toBe('10');
        const health = await server.request('/healthz');
        expect(health.status).toBe(503);
        expect(await health.json()).toMatchObject({ status: 'degraded', reason: 'database busy' });
        other.exec('COMMIT');
        const ok = await ingest(server, { device_id: device.id, access_token: token, data: { n: 2 } });
        expect(ok.status).toBe(200);
        // The next commit clears the degraded state.
        expect((await server.request('/healthz')).status).toBe(200);
        expect((other.prepare('SELECT count(*) AS n FROM readings').get() as { n: number }).n).toBe(1);
      } finally {
        if (other.inTransaction) other.exec('ROLLBACK');
        other.close();
      }
    },
  );
});
