/**
 * When the disk fills (docs/reliability.md "When the disk fills"). The real server runs as a
 * child process on a data dir on a real small file system: a 24 MB tmpfs that the test
 * mounts (root, as in CI; skipped with a message otherwise). Readings go in over HTTP and
 * MQTT until storage refuses them:
 *
 *  - with --min-free-disk: refused before SQLite once free space drops below the mark;
 *  - with --min-free-disk 0: refused when SQLite itself fails with SQLITE_FULL.
 *
 * Either way: 503 + Retry-After + "storage unavailable: <reason>", no PUBACK and a closed
 * MQTT connection, /healthz degraded, the refusals in /metrics, a short log; after
 * `mount -o remount,size=…` ingest resumes without a restart, every acknowledged reading is
 * stored exactly once, nothing refused is stored, and integrity_check is ok.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import mqtt from 'mqtt';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildServerConfig } from '../../src/config.js';
import { countAllReadings, onPostgres } from '../helpers/backend.js';
import { canMountTmpfs } from '../helpers/mount.js';
import { freePort, spawnServe } from '../helpers/process.js';
import { ingest, seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { type ChildServer, expectIntactDatabase, type Seed, seedViaCli, startChildServer, stopChild, storedNumbers } from './helpers.js';

const MOUNT_OK = canMountTmpfs();
if (!MOUNT_OK)
  console.warn('diskFull.test.ts: not root or mount not allowed; the tmpfs disk-full tests are skipped (CI runs them as root)');

const sh = (cmd: string, args: string[]) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** ~400 bytes of JSON per reading; each numbered so that it can be counted. */
const PAD = 'x'.repeat(360);

interface Sent {
  acked: number[];
  refused: { n: number; status: number; error: unknown; retryAfter: string | null }[];
}

/** One HTTP reading; 200 → acked, anything else → refused (with its answer). */
async function send(server: ChildServer, seed: Seed, n: number, into: Sent): Promise<number> {
  const res = await fetch(`${server.url}/api/devices/ingest`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ device_id: seed.deviceId, access_token: seed.token, data: { n, pad: PAD } }),
  });
  const body = (await res.json()) as { error?: unknown };
  if (res.status === 200) into.acked.push(n);
  else into.refused.push({ n, status: res.status, error: body.error, retryAfter: res.headers.get('retry-after') });
  return res.status;
}

/**
 * Waves of `wave` concurrent readings, paced so the file system fills over a few seconds
 * (a device fleet, not a benchmark), until a wave has a refusal or `maxWaves` passed.
 */
async function fillUntilRefused(server: ChildServer, seed: Seed, sent: Sent, firstN: number, wave = 16, maxWaves = 4_000): Promise<number> {
  let n = firstN;
  for (let w = 0; w < maxWaves; w++) {
    const statuses = await Promise.all(Array.from({ length: wave }, () => send(server, seed, n++, sent)));
    if (statuses.some((s) => s !== 200)) return n;
    await sleep(15);
  }
  throw new Error(`no refusal after ${maxWaves} waves (${sent.acked.length} readings acknowledged)`);
}

const health = async (server: ChildServer) => {
  const res = await fetch(`${server.url}/healthz`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

async function until(probe: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/**
 * One QoS 1 MQTT reading on a fresh connection: 'acked' with a PUBACK, 'closed' when the
 * server closed the connection without one.
 */
async function publishOnce(server: ChildServer, seed: Seed, n: number): Promise<'acked' | 'closed'> {
  const client = await mqtt.connectAsync(
    `mqtt://127.0.0.1:${server.mqttPlainPort}`,
    { username: seed.deviceId, password: seed.token, reconnectPeriod: 0, connectTimeout: 5_000 },
    false,
  );
  try {
    return await new Promise<'acked' | 'closed'>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('neither PUBACK nor close within 5 s')), 5_000);
      client.once('close', () => {
        clearTimeout(timer);
        resolve('closed');
      });
      client.publish(`d/${seed.deviceId}/t`, JSON.stringify({ n, pad: PAD }), { qos: 1 }, (err) => {
        if (err) return; // the close above answers
        clearTimeout(timer);
        resolve('acked');
      });
    });
  } finally {
    client.end(true);
  }
}

/** Every acknowledged number exactly once, nothing refused, integrity ok. */
async function expectStoredExactly(dataDir: string, seed: Seed, acked: number[], refused: number[]) {
  const stored = await storedNumbers(dataDir, seed.deviceId);
  expect(stored.length).toBe(new Set(stored).size); // no duplicates
  expect([...stored].sort((a, b) => a - b)).toEqual([...acked].sort((a, b) => a - b));
  const storedSet = new Set(stored);
  expect(refused.filter((n) => storedSet.has(n))).toEqual([]);
  expectIntactDatabase(dataDir);
}

/** The pino lines the server wrote after `from` characters of its output. */
const logLinesSince = (server: ChildServer, from: number) =>
  server
    .output()
    .slice(from)
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

// Fills the SQLite database in the data dir on a small tmpfs; PostgreSQL keeps its data elsewhere.
describe.skipIf(!MOUNT_OK || onPostgres)('a full disk (24 MB tmpfs)', () => {
  let mountPoint: string;
  let dataDir: string;
  let server: ChildServer | null = null;

  beforeAll(() => {
    mountPoint = tempDir('telemetryd-diskfull-');
  });
  afterEach(async () => {
    if (server) await stopChild(server);
    server = null;
    spawnSync('umount', [mountPoint]);
  });
  afterAll(() => {
    spawnSync('umount', [mountPoint]);
    rmSync(mountPoint, { recursive: true, force: true });
  });

  const mountSmall = () => {
    sh('mount', ['-t', 'tmpfs', '-o', 'size=24m,mode=0700', 'tmpfs', mountPoint]);
    dataDir = path.join(mountPoint, 'data');
    mkdirSync(dataDir, { mode: 0o700 });
  };

  it('--min-free-disk: writes are refused before the disk is full, and taken again once it has room', async () => {
    mountSmall();
    const seed = await seedViaCli(dataDir);
    server = await startChildServer(dataDir, ['--mqtt-plain-port', '0', '--log-level', 'info', '--min-free-disk', '8']);
    const sent: Sent = { acked: [], refused: [] };
    expect(await publishOnce(server, seed, 0)).toBe('acked');
    sent.acked.push(0);

    const logFrom = server.output().length;
    let n = await fillUntilRefused(server, seed, sent, 1);
    expect(sent.acked.length).toBeGreaterThan(500);
    // Past the mark: a burst of devices keeps sending; all are refused the same way.
    const burst = await Promise.all(Array.from({ length: 300 }, () => send(server!, seed, n++, sent)));
    expect(burst.every((s) => s === 503)).toBe(true);
    for (const r of sent.refused) {
      expect(r.status).toBe(503);
      expect(r.error).toMatch(/^storage unavailable: low disk space: [\d.]+ MB free for the data directory, below the minimum of 8\.0 MB$/);
      expect(r.retryAfter).toBe('10');
    }
    // Refused before SQLite: the free space stayed above zero (no SQLITE_FULL was needed).
    const df = spawnSync('df', ['--output=avail', '-B1', mountPoint], { encoding: 'utf8' }).stdout.split('\n')[1];
    expect(Number(df)).toBeGreaterThan(2 * 1_048_576);

    // MQTT: the device is let in (a read), its reading is not PUBACKed and the connection closed.
    expect(await publishOnce(server, seed, n++)).toBe('closed');
    sent.refused.push({ n: n - 1, status: 0, error: null, retryAfter: null });

    const degraded = await health(server);
    expect(degraded.status).toBe(503);
    expect(degraded.body).toMatchObject({ status: 'degraded', database: 'ok' });
    expect(String(degraded.body.reason)).toMatch(/^low disk space: /);

    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const refusedMetric = Number(/telemetryd_storage_refused_writes_total\{reason="low_disk"\} (\d+)/.exec(metrics)?.[1]);
    expect(refusedMetric).toBe(sent.refused.length);
    const freeMetric = Number(/telemetryd_storage_free_bytes\{dir="data"\} (\d+)/.exec(metrics)?.[1]);
    expect(freeMetric).toBeLessThan(8 * 1_048_576);
    expect(freeMetric).toBeGreaterThan(0);
    expect(metrics).toContain('telemetryd_storage_writable 0');

    // The log: a few lines with counts, not one (with a stack) per refused request.
    const lines = logLinesSince(server, logFrom);
    expect(sent.refused.length).toBeGreaterThan(300);
    expect(lines.length).toBeLessThanOrEqual(6);
    expect(lines.some((l) => l.msg === 'writes refused: storage unavailable')).toBe(true);
    expect(lines.filter((l) => l.stack !== undefined || (l.err as { stack?: unknown } | undefined)?.stack !== undefined)).toEqual([]);

    // Grown: taken again by itself, no restart.
    sh('mount', ['-o', 'remount,size=64m', mountPoint]);
    await until(async () => (await health(server!)).status === 200, 5_000, '/healthz ok after the remount');
    expect((await health(server)).body).toMatchObject({ status: 'ok', database: 'ok' });
    for (let i = 0; i < 20; i++) expect(await send(server, seed, n++, sent)).toBe(200);
    expect(await publishOnce(server, seed, n)).toBe('acked');
    sent.acked.push(n);
    const grownLog = logLinesSince(server, logFrom);
    expect(grownLog.some((l) => /back above --min-free-disk/.test(String(l.msg)))).toBe(true);

    const exit = await stopChild(server);
    server = null;
    expect(exit.code).toBe(0);
    await expectStoredExactly(
      dataDir,
      seed,
      sent.acked,
      sent.refused.map((r) => r.n),
    );
  }, 90_000);

  it('--min-free-disk 0: SQLite meets the full disk; 503 disk full, nothing acknowledged lost, resumes once grown', async () => {
    mountSmall();
    const seed = await seedViaCli(dataDir);
    server = await startChildServer(dataDir, ['--mqtt-plain-port', '0', '--log-level', 'info', '--min-free-disk', '0']);
    const sent: Sent = { acked: [], refused: [] };
    const logFrom = server.output().length;
    let n = await fillUntilRefused(server, seed, sent, 1);
    expect(sent.acked.length).toBeGreaterThan(500);
    // Devices keep trying: every attempt reaches SQLite and fails the same way.
    for (let i = 0; i < 10; i++) await Promise.all(Array.from({ length: 20 }, () => send(server!, seed, n++, sent)));
    expect(sent.refused.length).toBeGreaterThanOrEqual(200);
    for (const r of sent.refused) {
      expect(r.status).toBe(503);
      // A full WAL is SQLITE_FULL; growing the WAL's shared-memory index on a full disk is an I/O error.
      expect(r.error).toMatch(/^storage unavailable: (disk full|I\/O error)$/);
      expect(r.retryAfter).toBe('10');
    }
    expect(await publishOnce(server, seed, n++)).toBe('closed');
    sent.refused.push({ n: n - 1, status: 0, error: null, retryAfter: null });

    const degraded = await health(server);
    expect(degraded.status).toBe(503);
    expect(degraded.body).toMatchObject({ status: 'degraded', database: 'ok' });
    expect(String(degraded.body.reason)).toMatch(/^(disk full|I\/O error)$/);
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const refusedMetric = [...metrics.matchAll(/telemetryd_storage_refused_writes_total\{reason="(disk_full|io_error)"\} (\d+)/g)].reduce(
      (sum, m) => sum + Number(m[2]),
      0,
    );
    expect(refusedMetric).toBe(sent.refused.length);

    const lines = logLinesSince(server, logFrom);
    expect(lines.length).toBeLessThanOrEqual(8);
    expect(lines.filter((l) => (l.err as { stack?: unknown } | undefined)?.stack !== undefined)).toEqual([]);

    sh('mount', ['-o', 'remount,size=64m', mountPoint]);
    // No mark to watch: the next write that commits is what shows the disk has room again.
    expect(await send(server, seed, n++, sent)).toBe(200);
    expect((await health(server)).status).toBe(200);
    for (let i = 0; i < 20; i++) expect(await send(server, seed, n++, sent)).toBe(200);
    expect(await publishOnce(server, seed, n)).toBe('acked');
    sent.acked.push(n);

    const exit = await stopChild(server);
    server = null;
    expect(exit.code).toBe(0);
    await expectStoredExactly(
      dataDir,
      seed,
      sent.acked,
      sent.refused.map((r) => r.n),
    );
  }, 90_000);
});

/** The watermark without a small file system: a mark above any real free space refuses at once. */
describe('--min-free-disk above the free space (any machine)', () => {
  let server: TestServer;
  afterAll(() => server?.stop());

  // The watermark guards the data dir's disk, where SQLite keeps readings; on PostgreSQL it
  // guards the snapshot files only (snapshots/storageFaults.test.ts, web/storageBanner.test.ts).
  it.skipIf(onPostgres)('refuses readings with 503, keeps reads working, and reports degraded', async () => {
    server = await startTestServer({ 'min-free-disk': '1000000000' });
    const { device, token, key } = await seedAccount(server);
    const refused = await ingest(server, { device_id: device.id, access_token: token, data: { t: 1 } });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('10');
    expect(String(refused.body.error)).toMatch(/^storage unavailable: low disk space: [\d.]+ MB free for the data directory/);
    expect(refused.body.success).toBe(false);
    // A bad reading is still refused for good (400), not asked to come back.
    expect((await ingest(server, { device_id: device.id, access_token: token, data: [1] })).status).toBe(400);
    // Reads and admin work go on.
    expect((await server.request(`/v1/devices/${device.id}`, { key })).status).toBe(200);
    const res = await server.request('/healthz');
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ status: 'degraded', reason: expect.stringMatching(/^low disk space/) });
    expect(await countAllReadings(server.storage)).toBe(0);
  });

  it('--min-free-disk resolves like every option (MB; TELEMETRYD_MIN_FREE_DISK here), and a bad value is one clear line', async () => {
    const bytes = (v: unknown) => buildServerConfig({ 'min-free-disk': v }).minFreeDiskBytes;
    expect(bytes(undefined)).toBe(64 * 1_048_576);
    expect(bytes('0')).toBe(0);
    expect(bytes(1.5)).toBe(1_572_864);
    for (const bad of ['-1', 'lots', '']) expect(() => bytes(bad)).toThrow(/--min-free-disk must be a number of MB/);

    const dir = tempDir();
    try {
      const port = await freePort();
      const serve = await spawnServe(['--data-dir', dir, '--http-port', String(port), '--host', '127.0.0.1', '--mqtt-port', 'off'], {
        env: { TELEMETRYD_MIN_FREE_DISK: '1000000000' },
      });
      const res = await fetch(`http://127.0.0.1:${port}/healthz`);
      expect(res.status).toBe(503);
      expect(await res.json()).toMatchObject({
        status: 'degraded',
        reason: expect.stringMatching(/below the minimum of 1000000000\.0 MB/),
      });
      serve.child.kill('SIGTERM');
      expect(await serve.exited).toBe(0);
      await expect(spawnServe(['--data-dir', dir, '--min-free-disk', 'lots'], { timeoutMs: 5_000 })).rejects.toThrow(
        /--min-free-disk must be a number of MB/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
