/**
 * Crash safety (docs/operations.md, "Durability"): a reading acknowledged with HTTP 200 survives kill -9 of
 * the process. The real server runs as a child process; concurrent ingest keeps many
 * requests in flight, SIGKILL lands mid-way, and after a restart on the same data dir every
 * acknowledged reading is there exactly once and the database passes integrity_check.
 */
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/server.js';
import { expectIntactDatabase, ingestLoad, mqttLoad, seedViaCli, startChildServer, stopChild, storedNumbers } from './helpers.js';

const ROUNDS = 3;
const dataDir = tempDir('telemetryd-crash-');
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('crash safety', () => {
  it(`keeps every acknowledged reading (HTTP 200, MQTT PUBACK) across ${ROUNDS} SIGKILLs mid-ingest`, async () => {
    const seed = await seedViaCli(dataDir);
    const allAcked: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const server = await startChildServer(dataDir, ['--mqtt-plain-port', '0']);
      let killed = false;
      let inFlightAtKill = 0;
      // Kill once a few hundred readings are acknowledged, while 32 more are in flight.
      const killAfter = 150 + Math.floor(Math.random() * 200);
      const load = ingestLoad({
        url: server.url,
        deviceId: seed.deviceId,
        token: seed.token,
        firstN: round * 1_000_000,
        concurrency: 32,
        max: 100_000,
        shouldStop: () => killed,
        onAck: (count, inFlight) => {
          if (count >= killAfter && !killed) {
            killed = true;
            inFlightAtKill = inFlight;
            server.proc.kill('SIGKILL');
          }
        },
      });
      // QoS 1 publishers on the plain MQTT port at the same time (numbers offset by 500,000).
      const mqttAcks = mqttLoad({
        port: server.mqttPlainPort!,
        deviceId: seed.deviceId,
        token: seed.token,
        firstN: round * 1_000_000 + 500_000,
        clients: 4,
        inFlightPerClient: 8,
        shouldStop: () => killed,
      });
      const { acked, statuses } = await load;
      const { acked: mqttAcked } = await mqttAcks;
      const exit = await server.exited;
      expect(exit.signal).toBe('SIGKILL');
      // The kill really landed mid-way: other requests were in flight at that moment.
      expect(acked.length).toBeGreaterThanOrEqual(killAfter);
      expect(inFlightAtKill).toBeGreaterThan(0);
      // Only 200s and cut connections: nothing else (no 500) under load.
      expect([...statuses.keys()].filter((s) => s !== 200 && s !== 0)).toEqual([]);
      allAcked.push(...acked, ...mqttAcked);
      expect(mqttAcked.length).toBeGreaterThan(0);

      // Restart on the same data dir: recovery runs, the server serves again.
      const again = await startChildServer(dataDir);
      const health = await fetch(`${again.url}/healthz`);
      expect(health.status).toBe(200);
      const stored = await storedNumbers(dataDir, seed.deviceId);
      const storedSet = new Set(stored);
      expect(stored.length, 'no reading is stored twice').toBe(storedSet.size);
      const missing = allAcked.filter((n) => !storedSet.has(n));
      expect(missing, 'every acknowledged reading survived the crash').toEqual([]);
      expectIntactDatabase(dataDir);
      const stop = await stopChild(again);
      expect(stop.code).toBe(0);
    }
  }, 120_000);
});
