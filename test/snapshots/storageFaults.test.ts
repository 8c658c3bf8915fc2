import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { countAllSnapshots, onPostgres } from '../helpers/backend.js';
import { canMountTmpfs } from '../helpers/mount.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { fetchSnapshot, upload } from './helpers.js';
import { jpegOfSize, tinyJpeg } from './images.js';

/**
 * 503 "storage unavailable: <reason>" with Retry-After when the snapshots folder cannot be
 * written, /healthz "degraded" until an upload succeeds again. Tests run
 * as root in CI, where chmod does not stop writes, so the faults here are ones root cannot
 * write through: the folder replaced by a regular file, a full tmpfs (ENOSPC in the middle of
 * a write) and a read-only mount (EROFS). The mount tests need CAP_SYS_ADMIN and are skipped
 * where mounting is not allowed; the chmod one runs only when not root.
 */
const MOUNT_OK = canMountTmpfs();
const IS_ROOT = process.getuid?.() === 0;

const sh = (cmd: string, args: string[]) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
};

describe('snapshot storage faults', () => {
  let server: TestServer;
  let cam: Awaited<ReturnType<typeof seedAccount>>;
  let snapshotsDir: string;
  let deviceDir: string;
  let mounted = false;

  const rowCount = () => countAllSnapshots(server.storage);
  const expect503 = async (reason: string, body = tinyJpeg()) => {
    const rowsBefore = await rowCount();
    const up = await upload(server, cam.device.id, cam.token, body);
    expect(up.status).toBe(503);
    expect(up.body).toEqual({ success: false, error: `storage unavailable: ${reason}` });
    expect(up.headers.get('retry-after')).toBe('10');
    expect(await rowCount()).toBe(rowsBefore);
    const health = await server.request('/healthz');
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ status: 'degraded', reason });
  };
  const expectRecovered = async (body = tinyJpeg()) => {
    const up = await upload(server, cam.device.id, cam.token, body);
    expect(up.status).toBe(200);
    const got = await fetchSnapshot(server, up.body.url, cam.token);
    expect(got.bytes.equals(body)).toBe(true);
    expect((await server.request('/healthz')).status).toBe(200);
  };

  beforeAll(async () => {
    // The free-space watermark off: these faults are met by the write itself (a 128 KiB
    // tmpfs would be refused up front with it on; test/reliability/diskFull.test.ts).
    server = await startTestServer({ 'min-free-disk': '0' });
    cam = await seedAccount(server, { device: { name: 'cam', snapshotsEnabled: true } });
    snapshotsDir = path.join(server.dataDir, 'snapshots');
    deviceDir = path.join(snapshotsDir, cam.device.id);
  });
  afterEach(() => {
    if (mounted) spawnSync('umount', [snapshotsDir]);
    mounted = false;
  });
  afterAll(() => server.stop());

  it('the snapshots folder replaced by a regular file: 503, no row; recovers once the folder is back', async () => {
    rmSync(snapshotsDir, { recursive: true, force: true });
    writeFileSync(snapshotsDir, 'not a folder');
    await expect503('file system error (ENOTDIR)');
    rmSync(snapshotsDir);
    await expectRecovered();
  });

  it("the device's own folder path taken by a file: 503; recovers", async () => {
    rmSync(deviceDir, { recursive: true, force: true });
    writeFileSync(deviceDir, '');
    await expect503('file system error (EEXIST)');
    rmSync(deviceDir);
    await expectRecovered();
  });

  it.skipIf(!MOUNT_OK)('disk full in the middle of a write (tmpfs): 503 and no partial or temporary file left; recovers', async () => {
    rmSync(snapshotsDir, { recursive: true, force: true });
    mkdirSync(snapshotsDir);
    sh('mount', ['-t', 'tmpfs', '-o', 'size=128k,mode=0700', 'tmpfs', snapshotsDir]);
    mounted = true;
    // 512,000 bytes cannot fit in 128 KiB: the write starts, then fails with ENOSPC.
    await expect503('disk full', jpegOfSize(512_000));
    expect(readdirSync(deviceDir)).toEqual([]);
    // Small ones still fit: the failure was the disk, not the service.
    await expectRecovered();
    sh('umount', [snapshotsDir]);
    mounted = false;
    await expectRecovered(jpegOfSize(512_000));
  });

  it.skipIf(!MOUNT_OK)('a read-only file system: 503, nothing written; recovers when it is writable again', async () => {
    sh('mount', ['-t', 'tmpfs', '-o', 'size=1m,mode=0700', 'tmpfs', snapshotsDir]);
    mounted = true;
    mkdirSync(deviceDir);
    sh('mount', ['-o', 'remount,ro', snapshotsDir]);
    await expect503('read-only file system');
    expect(readdirSync(deviceDir)).toEqual([]);
    sh('mount', ['-o', 'remount,rw', snapshotsDir]);
    await expectRecovered();
  });

  it.skipIf(IS_ROOT)('a folder without write permission (not root): 503; recovers', async () => {
    mkdirSync(deviceDir, { recursive: true });
    chmodSync(deviceDir, 0o500);
    try {
      await expect503('permission denied');
      expect(readdirSync(deviceDir).filter((f) => f.startsWith('.'))).toEqual([]);
    } finally {
      chmodSync(deviceDir, 0o700);
    }
    await expectRecovered();
  });

  it('the server is still whole afterwards', async () => {
    if (!onPostgres) expect(existsSync(path.join(server.dataDir, 'telemetryd.db'))).toBe(true);
    expect((await server.request('/healthz')).status).toBe(200);
  });
});
