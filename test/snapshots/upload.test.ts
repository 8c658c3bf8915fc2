import { readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countAllSnapshots } from '../helpers/backend.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { fetchSnapshot, upload } from './helpers.js';
import { jpegOfSize, PNG_SIGNATURE, tinyJpeg, tinyPng } from './images.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('POST /api/devices/{device_id}/snapshot', () => {
  let server: TestServer;
  let cam: Awaited<ReturnType<typeof seedAccount>>;

  beforeAll(async () => {
    server = await startTestServer();
    cam = await seedAccount(server, { device: { name: 'camera 1', type: 'camera', snapshotsEnabled: true } });
  });
  afterAll(() => server.stop());

  it('JPEG and PNG round-trip byte for byte, with the stored type and caching headers', async () => {
    for (const [type, bytes] of [
      ['image/jpeg', tinyJpeg()],
      ['image/png', tinyPng()],
    ] as const) {
      const up = await upload(server, cam.device.id, cam.token, bytes, type);
      expect(up.status).toBe(200);
      expect(Object.keys(up.body).sort()).toEqual(['id', 'success', 'url']);
      expect(up.body.success).toBe(true);
      expect(up.body.id).toMatch(UUID);
      expect(up.body.url).toBe(`/api/devices/${cam.device.id}/snapshot/${up.body.id}`);

      const got = await fetchSnapshot(server, up.body.url, cam.token);
      expect(got.status).toBe(200);
      expect(got.bytes.equals(bytes)).toBe(true);
      expect(got.headers.get('content-type')).toBe(type);
      expect(got.headers.get('content-length')).toBe(String(bytes.length));
      expect(got.headers.get('cache-control')).toBe('private, max-age=31536000, immutable');
      expect(got.headers.get('etag')).toBe(`"${up.body.id}"`);

      // The ETag revalidates without a body.
      const again = await fetchSnapshot(server, up.body.url, cam.token, { 'if-none-match': `"${up.body.id}"` });
      expect(again.status).toBe(304);
      expect(again.bytes.length).toBe(0);
      // Compared weakly, in a list, or `*`, as HTTP defines If-None-Match; another tag is a miss.
      for (const header of [`W/"${up.body.id}"`, `"other", "${up.body.id}"`, '*']) {
        expect((await fetchSnapshot(server, up.body.url, cam.token, { 'if-none-match': header })).status).toBe(304);
      }
      expect((await fetchSnapshot(server, up.body.url, cam.token, { 'if-none-match': '"other"' })).status).toBe(200);
    }
    // Files sit under <data-dir>/snapshots/<device id>/, no temporary names left.
    const files = readdirSync(path.join(server.dataDir, 'snapshots', cam.device.id));
    expect(files.filter((f) => f.startsWith('.'))).toEqual([]);
    expect(files.some((f) => f.endsWith('.jpg'))).toBe(true);
    expect(files.some((f) => f.endsWith('.png'))).toBe(true);
  });

  it('a Content-Type with parameters still counts as its type', async () => {
    const up = await upload(server, cam.device.id, cam.token, tinyJpeg(), 'IMAGE/JPEG; charset=binary');
    expect(up.status).toBe(200);
  });

  it('400 for an unsupported or missing content type, with the device error body', async () => {
    for (const type of ['image/gif', 'application/json', 'text/plain', 'application/octet-stream', null]) {
      const up = await upload(server, cam.device.id, cam.token, tinyJpeg(), type);
      expect(up.status, String(type)).toBe(400);
      expect(up.body).toEqual({ success: false, error: expect.stringMatching(/unsupported content type/) });
    }
  });

  it('400 for an empty body and for bytes that do not match the declared type', async () => {
    const empty = await upload(server, cam.device.id, cam.token, Buffer.alloc(0), 'image/png');
    expect(empty.status).toBe(400);
    expect(empty.body).toEqual({ success: false, error: expect.stringMatching(/empty/) });

    const pngAsJpeg = await upload(server, cam.device.id, cam.token, tinyPng(), 'image/jpeg');
    expect(pngAsJpeg.status).toBe(400);
    expect(pngAsJpeg.body).toEqual({ success: false, error: expect.stringMatching(/not a JPEG/) });

    const jpegAsPng = await upload(server, cam.device.id, cam.token, tinyJpeg(), 'image/png');
    expect(jpegAsPng.status).toBe(400);
    // Seven of the eight signature bytes are not enough.
    const almostPng = Buffer.concat([PNG_SIGNATURE.subarray(0, 7), Buffer.from([0x00, 1, 2, 3])]);
    expect((await upload(server, cam.device.id, cam.token, almostPng, 'image/png')).status).toBe(400);
    expect((await upload(server, cam.device.id, cam.token, Buffer.from([0xff, 0xd8]), 'image/jpeg')).status).toBe(400);
  });

  it('401 for a wrong or missing token and an unknown device', async () => {
    for (const [id, token] of [
      [cam.device.id, 'x'.repeat(40)],
      [cam.device.id, null],
      ['dev_doesnotexist', cam.token],
    ] as const) {
      const up = await upload(server, id, token, tinyJpeg());
      expect(up.status).toBe(401);
      expect(up.body).toEqual({ success: false, error: expect.any(String) });
    }
  });

  it('403 for a paused device, a suspended account, and a device without snapshots enabled', async () => {
    const other = await seedAccount(server, { device: { name: 'cam p', snapshotsEnabled: true } });
    await server.services.devices.pause(other.device);
    const paused = await upload(server, other.device.id, other.token, tinyJpeg());
    expect(paused.status).toBe(403);
    expect(paused.body).toEqual({ success: false, error: 'device is paused' });
    await server.services.devices.resume(other.device);
    expect((await upload(server, other.device.id, other.token, tinyJpeg())).status).toBe(200);

    await server.services.accounts.setStatus(other.account.id, 'suspended');
    expect((await upload(server, other.device.id, other.token, tinyJpeg())).status).toBe(403);
    await server.services.accounts.setStatus(other.account.id, 'active');

    const plain = await seedAccount(server, { device: { name: 'no camera' } });
    const off = await upload(server, plain.device.id, plain.token, tinyJpeg());
    expect(off.status).toBe(403);
    expect(off.body).toEqual({ success: false, error: 'snapshots are not enabled for this device' });
  });

  it('512,000 bytes are accepted and served back whole; 512,001 is 413 and stores nothing', async () => {
    const exact = jpegOfSize(512_000);
    const ok = await upload(server, cam.device.id, cam.token, exact);
    expect(ok.status).toBe(200);
    const got = await fetchSnapshot(server, ok.body.url, cam.token);
    expect(got.bytes.equals(exact)).toBe(true);

    const dir = path.join(server.dataDir, 'snapshots', cam.device.id);
    const before = readdirSync(dir).sort();
    const rowsBefore = await countAllSnapshots(server.storage);
    const over = await upload(server, cam.device.id, cam.token, jpegOfSize(512_001));
    expect(over.status).toBe(413);
    expect(over.body).toEqual({ success: false, error: expect.stringMatching(/500 KB/) });
    expect(readdirSync(dir).sort()).toEqual(before);
    expect(await countAllSnapshots(server.storage)).toBe(rowsBefore);
  });

  it('413 also for a chunked body without Content-Length: the limit is counted while streaming', async () => {
    const big = jpegOfSize(700_000);
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < big.length; i += 65_536) controller.enqueue(big.subarray(i, i + 65_536));
        controller.close();
      },
    });
    const res = await server.request(`/api/devices/${cam.device.id}/snapshot`, {
      method: 'POST',
      headers: { authorization: `Bearer ${cam.token}`, 'content-type': 'image/jpeg' },
      body,
      duplex: 'half',
    } as RequestInit);
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ success: false, error: expect.stringMatching(/500 KB/) });
    // The server still answers afterwards.
    expect((await upload(server, cam.device.id, cam.token, tinyJpeg())).status).toBe(200);
  });

  it('429 once the daily quota of a small plan override is used up, with Retry-After until UTC midnight', async () => {
    const q = await seedAccount(server, { device: { name: 'cam q', snapshotsEnabled: true } });
    await server.services.accounts.setPlan(q.account.id, 'starter', { snapshotsPerDay: 2 });
    expect((await upload(server, q.device.id, q.token, tinyJpeg())).status).toBe(200);
    expect((await upload(server, q.device.id, q.token, tinyPng(), 'image/png')).status).toBe(200);
    const third = await upload(server, q.device.id, q.token, tinyJpeg());
    expect(third.status).toBe(429);
    expect(third.body).toEqual({ success: false, error: expect.stringMatching(/quota/) });
    const retry = Number(third.headers.get('retry-after'));
    expect(retry).toBeGreaterThan(0);
    expect(retry).toBeLessThanOrEqual(86_400);
    // The quota is per device: a second device of the same account still uploads.
    const second = await server.services.devices.create(q.account, { name: 'cam q2', snapshotsEnabled: true });
    expect((await upload(server, second.device.id, second.accessToken, tinyJpeg())).status).toBe(200);
    // Raising the limit lets the first device upload again the same day.
    await server.services.accounts.setPlan(q.account.id, 'starter', { snapshotsPerDay: 3 });
    expect((await upload(server, q.device.id, q.token, tinyJpeg())).status).toBe(200);
  });

  it('concurrent uploads never exceed the daily quota', async () => {
    const c = await seedAccount(server, { device: { name: 'cam c', snapshotsEnabled: true } });
    await server.services.accounts.setPlan(c.account.id, 'starter', { snapshotsPerDay: 3 });
    const results = await Promise.all(Array.from({ length: 8 }, () => upload(server, c.device.id, c.token, tinyJpeg())));
    expect(results.filter((r) => r.status === 200)).toHaveLength(3);
    expect(results.filter((r) => r.status === 429)).toHaveLength(5);
    expect(readdirSync(path.join(server.dataDir, 'snapshots', c.device.id))).toHaveLength(3);
  });
});
