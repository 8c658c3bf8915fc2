import { existsSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { countAllSnapshots, openDataDirStorage } from '../helpers/backend.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { upload } from './helpers.js';
import { tinyJpeg } from './images.js';

/**
 * An upload whose body is sent in two parts: the request and the first bytes now, the rest
 * when `finish` is called. Resolves with the status and body of the answer.
 */
function uploadInTwoParts(server: TestServer, deviceId: string, token: string, bytes: Buffer) {
  const url = new URL(`/api/devices/${deviceId}/snapshot`, server.httpUrl);
  const req = http.request(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'image/jpeg', 'content-length': String(bytes.length) },
  });
  const answer = new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
    });
  });
  req.write(bytes.subarray(0, 4));
  return { answer, finish: () => req.end(bytes.subarray(4)) };
}

/**
 * Resolves once the device's next upload has been authenticated: the upload reads its body
 * next, and whatever happens to the device from then on happens during the upload. A look-up
 * the cache could not answer (PostgreSQL) is a promise: authenticated once it has settled, or
 * a change made meanwhile could be what it reads.
 */
function authenticatedOnce(server: TestServer, deviceId: string): Promise<void> {
  const { devices } = server.services;
  const authenticate = devices.authenticate;
  return new Promise<void>((resolve) => {
    devices.authenticate = (id, token) => {
      const result = authenticate(id, token);
      if (id === deviceId) {
        devices.authenticate = authenticate;
        if (result instanceof Promise)
          result.then(
            () => resolve(),
            () => resolve(),
          );
        else resolve();
      }
      return result;
    };
  });
}

describe('a snapshot upload whose device is deleted meanwhile', () => {
  let server: TestServer;

  beforeEach(async () => {
    server = await startTestServer();
  });
  afterEach(() => server.stop());

  it('is refused as from a device that no longer exists, leaves no file or folder, and storage stays healthy', async () => {
    const cam = await seedAccount(server, { device: { name: 'camera', type: 'camera', snapshotsEnabled: true } });
    const authenticated = authenticatedOnce(server, cam.device.id);
    const { answer, finish } = uploadInTwoParts(server, cam.device.id, cam.token, tinyJpeg());
    await authenticated;
    await server.services.devices.remove(cam.device);
    finish();

    const { status, body } = await answer;
    expect({ status, body }).toEqual({ status: 401, body: { success: false, error: 'invalid device id or access token' } });
    expect(existsSync(path.join(server.config.snapshotsDir, cam.device.id))).toBe(false);
    expect(await countAllSnapshots(server.storage)).toBe(0);
    const health = await (await server.request('/healthz')).json();
    expect(health.status).toBe('ok');
    // Another camera's upload is taken as before.
    const other = await seedAccount(server, { device: { name: 'other camera', type: 'camera', snapshotsEnabled: true } });
    expect((await upload(server, other.device.id, other.token, tinyJpeg())).status).toBe(200);
  });

  it('is refused the same way when another process deleted the device, before this server has heard of it', async () => {
    const cam = await seedAccount(server, { device: { name: 'camera', type: 'camera', snapshotsEnabled: true } });
    // PostgreSQL: the server drops its caches once its listening connection is up; from then
    // on only a notification does.
    const { storage } = server;
    if (storage.backend === 'postgres') {
      for (let i = 0; i < 200 && !storage.repos.externalCommits.listening; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(storage.repos.externalCommits.listening).toBe(true);
    }
    const authenticated = authenticatedOnce(server, cam.device.id);
    const { answer, finish } = uploadInTwoParts(server, cam.device.id, cam.token, tinyJpeg());
    await authenticated;
    // The admin CLI (or another node) deletes the device: its rows and its folder. SQLite's
    // server sees that commit at its next look-up (data_version); PostgreSQL's hears of it
    // through a notification, which here has not arrived when the upload goes on (the
    // notifying triggers are off for the deletion), so its cache still knows the device.
    const other = await openDataDirStorage(server.dataDir);
    try {
      const notifying = ['devices', 'alerts'].map((t) => `ALTER TABLE ${t} DISABLE TRIGGER ${t}_notify_change;`).join('');
      if (other.storage.backend === 'postgres') await other.storage.pool.query(notifying);
      await other.services.devices.remove(cam.device);
      if (other.storage.backend === 'postgres') await other.storage.pool.query(notifying.replaceAll('DISABLE', 'ENABLE'));
    } finally {
      await other.close();
    }
    finish();

    const { status, body } = await answer;
    expect({ status, body }).toEqual({ status: 401, body: { success: false, error: 'invalid device id or access token' } });
    expect(existsSync(path.join(server.config.snapshotsDir, cam.device.id))).toBe(false);
    expect(await countAllSnapshots(server.storage)).toBe(0);
    expect((await (await server.request('/healthz')).json()).status).toBe('ok');
  });

  it('stored while the device is being deleted, its file goes with the device', async () => {
    const cam = await seedAccount(server, { device: { name: 'camera', type: 'camera', snapshotsEnabled: true } });
    const authenticated = authenticatedOnce(server, cam.device.id);
    const { answer, finish } = uploadInTwoParts(server, cam.device.id, cam.token, tinyJpeg());
    await authenticated;
    // A deletion runs in several steps (the admin CLI's in another process, each its own
    // transaction): here the upload finishes between the first ones and the removal of the row.
    const repos = server.storage.repos.devices as { removeWithRollups(seq: number): unknown };
    const removeWithRollups = repos.removeWithRollups;
    let uploaded: { status: number; body: Record<string, unknown> } | null = null;
    repos.removeWithRollups = async (seq: number) => {
      finish();
      uploaded = await answer;
      return removeWithRollups(seq);
    };
    await server.services.devices.remove(cam.device);
    repos.removeWithRollups = removeWithRollups;

    // Stored before the row went: acknowledged, then deleted with the device.
    expect(uploaded).toMatchObject({ status: 200, body: { success: true } });
    expect(await countAllSnapshots(server.storage)).toBe(0);
    expect(existsSync(path.join(server.config.snapshotsDir, cam.device.id))).toBe(false);
  });
});
