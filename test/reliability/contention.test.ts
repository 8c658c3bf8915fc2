/**
 * Contention (docs/cli.md: admin commands work while `serve` runs): admin CLI commands
 * run against the data dir while the server is under HTTP ingest load. busy_timeout (10 s)
 * and IMMEDIATE transactions mean nobody sees SQLITE_BUSY: every command succeeds and every
 * ingest request is acknowledged.
 */
import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { type CliResult, runCliAsync } from '../helpers/cli.js';
import { tempDir } from '../helpers/server.js';
import { expectIntactDatabase, ingestLoad, seedViaCli, startChildServer, stopChild, storedNumbers } from './helpers.js';

const dataDir = tempDir('telemetryd-contention-');
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('admin CLI under ingest load', () => {
  it('every admin command succeeds and every ingest request gets 200', async () => {
    const seed = await seedViaCli(dataDir);
    const server = await startChildServer(dataDir);
    let cliDone = false;
    const load = ingestLoad({
      url: server.url,
      deviceId: seed.deviceId,
      token: seed.token,
      firstN: 0,
      concurrency: 16,
      max: 1_000_000,
      shouldStop: () => cliDone,
    });

    const results: [string, CliResult][] = [];
    const run = async (args: string[]) => {
      const r = await runCliAsync([...args, '--json'], { dataDir });
      results.push([args.join(' '), r]);
      return r;
    };
    try {
      // Two admin streams at once, beside the load.
      await Promise.all([
        (async () => {
          for (let i = 0; i < 3; i++) {
            const dev = await run(['devices', 'create', '--account', seed.accountId, '--name', `contended ${i}`]);
            if (dev.status !== 0) continue;
            await run(['devices', 'pause', dev.json.id]);
            await run(['devices', 'resume', dev.json.id]);
          }
        })(),
        (async () => {
          for (let i = 0; i < 3; i++) {
            await run(['keys', 'create', '--account', seed.accountId, '--name', `contended ${i}`]);
            await run(['accounts', 'set-plan', seed.accountId, 'business']);
          }
        })(),
      ]);
    } finally {
      cliDone = true;
    }
    const { acked, statuses } = await load;
    await stopChild(server);

    const failed = results.filter(([, r]) => r.status !== 0).map(([name, r]) => `${name}: ${r.stderr.trim()}`);
    expect(failed).toEqual([]);
    expect(results.length).toBe(15);
    expect(results.map(([, r]) => r.stderr).join('')).not.toMatch(/SQLITE_BUSY|database is locked/);
    // The load really overlapped the commands, and nothing but 200 came back.
    expect(acked.length).toBeGreaterThan(100);
    expect(Object.fromEntries(statuses)).toEqual({ 200: acked.length });
    const stored = new Set(await storedNumbers(dataDir, seed.deviceId));
    expect(acked.filter((n) => !stored.has(n))).toEqual([]);
    expectIntactDatabase(dataDir);
  }, 120_000);
});
