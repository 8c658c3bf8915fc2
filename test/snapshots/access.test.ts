import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCliAsync } from '../helpers/cli.js';
import { ingest, seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { fetchSnapshot, upload } from './helpers.js';
import { tinyJpeg, tinyPng } from './images.js';

describe('reading snapshots, and what happens to them when a device goes', () => {
  let server: TestServer;
  let a: Awaited<ReturnType<typeof seedAccount>>;
  let b: Awaited<ReturnType<typeof seedAccount>>;
  let url: string;
  const bytes = tinyPng();

  beforeAll(async () => {
    server = await startTestServer();
    a = await seedAccount(server, { email: 'owner@example.com', device: { name: 'cam', type: 'camera', snapshotsEnabled: true } });
    b = await seedAccount(server, { email: 'other@example.com', device: { name: 'cam b', type: 'camera', snapshotsEnabled: true } });
    const up = await upload(server, a.device.id, a.token, bytes, 'image/png');
    expect(up.status).toBe(200);
    url = up.body.url;
  });
  afterAll(() => server.stop());

  it("the owner's API key and the device's own token read it", async () => {
    for (const credential of [a.key, a.token]) {
      const got = await fetchSnapshot(server, url, credential);
      expect(got.status).toBe(200);
      expect(got.bytes.equals(bytes)).toBe(true);
    }
    // A key of a free-plan account still reads its own snapshots (not a Public API call).
    await server.services.accounts.setPlan(a.account.id, 'free');
    expect((await fetchSnapshot(server, url, a.key)).status).toBe(200);
    await server.services.accounts.setPlan(a.account.id, 'starter');
  });

  it("everyone else gets the same 404: another account's key, another device's token, no or bad credentials", async () => {
    const other = await server.services.devices.create(a.account, { name: 'sibling' });
    for (const credential of [b.key, b.token, other.accessToken, undefined, `tlm_${'x'.repeat(40)}`, 'garbage']) {
      const got = await fetchSnapshot(server, url, credential);
      expect(got.status, String(credential)).toBe(404);
      expect(JSON.parse(got.bytes.toString())).toEqual({ success: false, error: 'snapshot not found' });
      expect(got.headers.get('cache-control')).toBeNull();
    }
    // The right id under another device's path is not found either, nor an unknown id.
    const id = url.split('/').pop()!;
    expect((await fetchSnapshot(server, `/api/devices/${b.device.id}/snapshot/${id}`, b.key)).status).toBe(404);
    expect((await fetchSnapshot(server, `/api/devices/${a.device.id}/snapshot/00000000-0000-4000-8000-000000000000`, a.key)).status).toBe(
      404,
    );
    expect((await fetchSnapshot(server, `/api/devices/${a.device.id}/snapshot/..%2F..%2Ftelemetryd.db`, a.key)).status).toBe(404);
  });

  it('a revoked key, a suspended account and a regenerated token read nothing', async () => {
    const { key, record } = await server.services.keys.create(a.account, 'short-lived');
    expect((await fetchSnapshot(server, url, key)).status).toBe(200);
    await server.services.keys.revoke(record.id);
    expect((await fetchSnapshot(server, url, key)).status).toBe(404);

    await server.services.accounts.setStatus(a.account.id, 'suspended');
    expect((await fetchSnapshot(server, url, a.key)).status).toBe(404);
    await server.services.accounts.setStatus(a.account.id, 'active');
    expect((await fetchSnapshot(server, url, a.key)).status).toBe(200);

    const { accessToken } = await server.services.devices.regenerateToken(a.device);
    expect((await fetchSnapshot(server, url, a.token)).status).toBe(404);
    expect((await fetchSnapshot(server, url, accessToken)).status).toBe(200);
    a.token = accessToken;
  });

  it('the URL goes into a snapshot_url field of a normal reading and reads back through /v1', async () => {
    const absolute = `${server.config.publicUrl}${url}`;
    const res = await ingest(
      server,
      { device_id: a.device.id, data: { motion: true, snapshot_url: absolute } },
      { authorization: `Bearer ${a.token}` },
    );
    expect(res.status).toBe(200);
    const latest = await (await server.request(`/v1/devices/${a.device.id}/telemetry/latest`, { key: a.key })).json();
    expect(latest.data.data).toEqual({ motion: true, snapshot_url: absolute });
    // And the URL taken from the reading serves the image.
    const got = await fetchSnapshot(server, new URL(latest.data.data.snapshot_url).pathname, a.key);
    expect(got.status).toBe(200);
    expect(got.bytes.equals(bytes)).toBe(true);
  });

  it('deleting a device through the service removes its files and rows; its URLs give 404', async () => {
    const { device, accessToken } = await server.services.devices.create(b.account, { name: 'doomed', snapshotsEnabled: true });
    const up = await upload(server, device.id, accessToken, tinyJpeg());
    expect(up.status).toBe(200);
    const dir = path.join(server.dataDir, 'snapshots', device.id);
    expect(readdirSync(dir)).toHaveLength(1);
    await server.services.devices.remove(device);
    expect(existsSync(dir)).toBe(false);
    expect(await server.storage.repos.snapshots.findById(up.body.id)).toBeNull();
    expect((await fetchSnapshot(server, up.body.url, b.key)).status).toBe(404);
    // Other devices' files are untouched.
    expect((await fetchSnapshot(server, url, a.key)).status).toBe(200);
  });

  it('deleting a device with the admin CLI (another process) removes its files too', async () => {
    const { device, accessToken } = await server.services.devices.create(b.account, { name: 'doomed by cli', snapshotsEnabled: true });
    const ups = [
      await upload(server, device.id, accessToken, tinyJpeg()),
      await upload(server, device.id, accessToken, tinyPng(), 'image/png'),
    ];
    expect(ups.map((u) => u.status)).toEqual([200, 200]);
    const dir = path.join(server.dataDir, 'snapshots', device.id);
    expect(readdirSync(dir)).toHaveLength(2);

    const r = await runCliAsync(['devices', 'delete', device.id, '--yes', '--json'], { dataDir: server.dataDir });
    expect(r.status, r.stderr).toBe(0);
    expect(r.json).toEqual({ deleted: device.id });
    expect(existsSync(dir)).toBe(false);
    for (const u of ups) expect((await fetchSnapshot(server, u.body.url, b.key)).status).toBe(404);
    for (const u of ups) expect(await server.storage.repos.snapshots.findById(u.body.id)).toBeNull();
  });
});
