/**
 * A start that fails (the HTTP port is taken) leaves nothing behind: no background job keeps
 * running and the database is closed, so the same data dir can be served right after.
 */
import { existsSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DB_FILE } from '../../src/storage/db.js';
import { onPostgres } from '../helpers/backend.js';
import { startTestServer, tempDir } from '../helpers/server.js';

const dataDir = tempDir('telemetryd-start-failure-');
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('a start that cannot listen', () => {
  it('rejects with the listen error, closes the database and starts no job', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as net.AddressInfo).port;
    const jobErrors: unknown[] = [];
    try {
      await expect(
        startTestServer(
          { 'data-dir': dataDir, 'http-port': String(port) },
          // A retention pass a few ms after start would run (and fail) on a closed database.
          { retention: { firstRunDelayMs: 5, onError: (err) => jobErrors.push(err) } },
        ),
      ).rejects.toMatchObject({ code: 'EADDRINUSE' });
    } finally {
      await new Promise<void>((resolve) => taken.close(() => resolve()));
    }
    // SQLite: the last connection's close checkpoints the WAL into the database and removes it.
    if (!onPostgres) {
      expect(existsSync(path.join(dataDir, DB_FILE))).toBe(true);
      expect(existsSync(path.join(dataDir, `${DB_FILE}-wal`))).toBe(false);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(jobErrors).toEqual([]);

    const server = await startTestServer(
      { 'data-dir': dataDir },
      { retention: { firstRunDelayMs: 5, onError: (err) => jobErrors.push(err) } },
    );
    try {
      expect((await server.request('/healthz')).status).toBe(200);
      // Its database is open and writable: a retention pass works on it.
      await expect(server.retention.runOnce()).resolves.toMatchObject({ deleted: 0 });
    } finally {
      await server.stop();
    }
    expect(jobErrors).toEqual([]);
  });
});
