/**
 * Graceful shutdown (docs/operations.md, "Shutdown"): SIGTERM under ingest load stops accepting, lets
 * in-flight requests finish (what was acknowledged is committed), closes the database
 * cleanly (WAL checkpointed and removed) and exits 0 within 10 seconds.
 */
import { existsSync, rmSync } from 'node:fs';
import net from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../helpers/backend.js';
import { tempDir } from '../helpers/server.js';
import { dbFile, expectIntactDatabase, ingestLoad, mqttLoad, seedViaCli, startChildServer, storedNumbers } from './helpers.js';

const dataDir = tempDir('telemetryd-shutdown-');
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('graceful shutdown', () => {
  it('SIGTERM under HTTP and MQTT load: exit 0 within 10 s, every ack committed, WAL checkpointed', async () => {
    const seed = await seedViaCli(dataDir);
    const server = await startChildServer(dataDir, ['--mqtt-plain-port', '0']);
    let exited = false;
    let termAt = 0;
    void server.exited.then(() => (exited = true));
    const mqttAcks = mqttLoad({
      port: server.mqttPlainPort!,
      deviceId: seed.deviceId,
      token: seed.token,
      firstN: 500_000,
      clients: 3,
      inFlightPerClient: 8,
      shouldStop: () => exited,
    });
    const { acked, statuses } = await ingestLoad({
      url: server.url,
      deviceId: seed.deviceId,
      token: seed.token,
      firstN: 0,
      concurrency: 32,
      max: 100_000,
      // Keep sending after SIGTERM until the process is gone: late requests must be refused
      // (503 while closing, or a refused connection), never half-done.
      shouldStop: () => exited,
      onAck: (count) => {
        if (count === 300) {
          termAt = Date.now();
          server.proc.kill('SIGTERM');
        }
      },
    });
    const exit = await server.exited;
    // MQTT clients were disconnected by the shutdown (their loops ended), not left hanging.
    const { acked: mqttAcked } = await mqttAcks;
    expect(mqttAcked.length).toBeGreaterThan(0);
    const took = Date.now() - termAt;
    expect(exit.code).toBe(0);
    expect(exit.signal).toBeNull();
    expect(took).toBeLessThan(10_000);
    expect(server.output()).toContain('SIGTERM: shutting down');
    expect([...statuses.keys()].filter((s) => ![200, 503, 0].includes(s))).toEqual([]);
    // The last connection closed: SQLite checkpointed the WAL into the database and removed
    // it. (Checked before this test opens the file itself: a read-only reader leaves one.)
    if (!onPostgres) expect(existsSync(`${dbFile(dataDir)}-wal`)).toBe(false);

    const stored = new Set(await storedNumbers(dataDir, seed.deviceId));
    expect([...acked, ...mqttAcked].filter((n) => !stored.has(n))).toEqual([]);
    expectIntactDatabase(dataDir);
  }, 60_000);

  it('SIGINT right after the listening line also exits 0 and leaves no WAL', async () => {
    rmSync(`${dbFile(dataDir)}-wal`, { force: true });
    rmSync(`${dbFile(dataDir)}-shm`, { force: true });
    const server = await startChildServer(dataDir);
    server.proc.kill('SIGINT');
    const exit = await server.exited;
    expect(exit.code).toBe(0);
    if (!onPostgres) expect(existsSync(`${dbFile(dataDir)}-wal`)).toBe(false);
  }, 30_000);
});

describe('graceful shutdown with a stalled client', () => {
  it('a request whose body never finishes does not hold SIGTERM past the bound', async () => {
    const server = await startChildServer(dataDir);
    const socket = net.connect(server.port, '127.0.0.1');
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.on('error', () => undefined);
    // Headers complete, body promised but never sent: an in-flight request, not an idle socket.
    socket.write(
      'POST /api/devices/ingest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"device_id":',
    );
    await new Promise((r) => setTimeout(r, 300));
    const start = Date.now();
    server.proc.kill('SIGTERM');
    const exit = await server.exited;
    socket.destroy();
    expect(exit.code).toBe(0);
    expect(Date.now() - start).toBeLessThan(10_000);
  }, 30_000);
});
