import { randomUUID } from 'node:crypto';
import { AppError, badRequest, forbidden, notFound, payloadTooLarge, rateLimited, unauthorized } from '../errors.js';
import type { Repositories, SnapshotRecord } from '../storage/repositories.js';
import type { SnapshotFiles } from '../storage/snapshotFiles.js';
import { type Clock, DAY_MS } from '../time.js';
import type { DeviceService } from './devices.js';
import type { StorageStatus } from './storageStatus.js';
import type { Device } from './types.js';

/** "500 KB" is 512,000 bytes: that size is accepted, one byte more is 413 (docs/snapshots.md). */
const MAX_SNAPSHOT_BYTES = 512_000;

/** Accepted types and the leading bytes each must start with (docs/snapshots.md, "Upload"). */
const IMAGE_TYPES: Record<string, { name: string; magic: number[] }> = {
  'image/jpeg': { name: 'JPEG', magic: [0xff, 0xd8, 0xff] },
  'image/png': { name: 'PNG', magic: [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a] },
};

export interface SnapshotUpload {
  deviceId: string | undefined;
  token: string | undefined;
  /** The Content-Type header as sent (parameters such as "; charset" are ignored). */
  contentType: string | undefined;
  /** The raw body: bytes, or a stream of chunks that is read only up to the limit. */
  body: Uint8Array | AsyncIterable<Uint8Array> | undefined;
  /** Content-Length when the client declared one: lets an oversize upload fail unread. */
  declaredLength?: number;
}

/**
 * Who is asking to read a snapshot: a device (by its token) may read its own snapshots, an
 * account (API key, dashboard session) those of all its devices (docs/snapshots.md, "Reading").
 */
export type SnapshotReader = { deviceSeq: number } | { accountSeq: number };

export interface StoredSnapshot {
  id: string;
  contentType: string;
  size: number;
  createdAt: number;
  bytes: Buffer;
}

/** The relative URL a client puts into a `*_url` telemetry field (docs/api.md, "Snapshots"). */
const snapshotUrl = (deviceId: string, id: string) => `/api/devices/${deviceId}/snapshot/${id}`;

const startOfUtcDay = (ms: number) => ms - (((ms % DAY_MS) + DAY_MS) % DAY_MS);

function normalizeType(header: string | undefined): string | undefined {
  return header?.split(';')[0].trim().toLowerCase() || undefined;
}

/** Reads the body, refusing (413) as soon as it passes the limit: nothing past it is kept. */
async function readLimited(body: SnapshotUpload['body'], limit: number): Promise<Buffer> {
  if (body === undefined) return Buffer.alloc(0);
  if (body instanceof Uint8Array) {
    if (body.byteLength > limit) throw tooLarge();
    return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  }
  const chunks: Buffer[] = [];
  let received = 0;
  for await (const chunk of body) {
    received += chunk.byteLength;
    if (received > limit) throw tooLarge();
    chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
  }
  return Buffer.concat(chunks, received);
}

const tooLarge = () => payloadTooLarge(`image is larger than 500 KB (${MAX_SNAPSHOT_BYTES} bytes)`);

function startsWith(bytes: Buffer, magic: number[]): boolean {
  return bytes.length >= magic.length && magic.every((b, i) => bytes[i] === b);
}

export function snapshotService(repos: Repositories, devices: DeviceService, files: SnapshotFiles, clock: Clock, storage: StorageStatus) {
  const quotaError = (limit: number, now: number) =>
    rateLimited(
      `daily snapshot quota of ${limit} used up for this device; it resets at midnight UTC`,
      Math.max(1, Math.ceil((startOfUtcDay(now) + DAY_MS - now) / 1000)),
    );

  /**
   * The 401 for an upload whose device was deleted (or given a new token) after the upload was
   * authenticated, while its body arrived or its file was written; null when the device still
   * takes it. A deletion removes the device's folder, so the file's rename, or the row's
   * insert (the foreign key), fails: that is the device being gone, not storage failing (503,
   * /healthz degraded). The folder this upload made again is removed once the row is gone.
   * The row is asked of the database, not of the authentication cache: on PostgreSQL a
   * deletion by another process (the admin CLI, another node) reaches the cache through a
   * notification, which may not have arrived yet.
   */
  async function refusedSinceStart(device: Device, token: string | undefined): Promise<AppError | null> {
    try {
      if (!(await repos.devices.findById(device.id))) {
        files.removeDevice(device.id);
        return unauthorized('invalid device id or access token');
      }
      await devices.authenticate(device.id, token);
      return null;
    } catch (err) {
      return err instanceof AppError && err.status === 401 ? err : null;
    }
  }

  /** Expired = older than the owning account's snapshot retention (docs/snapshots.md, "Retention"). */
  async function isExpired(snapshot: SnapshotRecord, now: number): Promise<boolean> {
    const account = await repos.accounts.findBySeq(snapshot.accountSeq);
    return !account || snapshot.createdAt < now - account.limits.snapshotRetentionDays * DAY_MS;
  }

  /**
   * Deletes snapshots older than their account's snapshot retention at `now` (files first,
   * then rows, so a failure never leaves a file without its row). Works in small batches,
   * each its own short transaction (snapshots.removeMany), yielding to the event loop in
   * between. Returns how many were deleted.
   */
  async function purgeExpiredSnapshots(now: number = clock.now(), batchSize = 200): Promise<number> {
    let total = 0;
    for (;;) {
      const batch = await repos.snapshots.expiredBatch(now, batchSize);
      if (batch.length === 0) return total;
      for (const s of batch) await files.remove(s.deviceId, s.id, s.contentType);
      total += await repos.snapshots.removeMany(batch.map((s) => s.seq));
      if (batch.length < batchSize) return total;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  return {
    /**
     * POST /api/devices/{device_id}/snapshot. Checks run in this order (the order is not part
     * of the contract, but cheap refusals come before reading the body):
     * 400 type, 401 credentials, 403 paused / suspended / snapshots off, 413 size,
     * 400 empty or not the declared type, 429 daily quota, 503 storage.
     */
    async upload(input: SnapshotUpload): Promise<{ id: string; url: string }> {
      const contentType = normalizeType(input.contentType);
      const type = contentType ? IMAGE_TYPES[contentType] : undefined;
      if (!contentType || !type) {
        throw badRequest(`unsupported content type${contentType ? ` "${contentType}"` : ''}: send Content-Type image/jpeg or image/png`);
      }
      if (!input.deviceId) throw badRequest('device id is missing');
      const { device, account } = await devices.authenticate(input.deviceId, input.token);
      if (!device.snapshotsEnabled) throw forbidden('snapshots are not enabled for this device');

      if (input.declaredLength !== undefined && input.declaredLength > MAX_SNAPSHOT_BYTES) throw tooLarge();
      const bytes = await readLimited(input.body, MAX_SNAPSHOT_BYTES);
      if (bytes.length === 0) throw badRequest('request body is empty: send the raw image bytes');
      if (!startsWith(bytes, type.magic)) throw badRequest(`body is not a ${type.name} image (Content-Type is ${contentType})`);

      // Quota per device per UTC day (docs/snapshots.md, "Upload"). Checked before writing so a device
      // over quota costs no disk work, and again when the row goes in (below).
      const limit = account.limits.snapshotsPerDay;
      const dayStart = startOfUtcDay(clock.now());
      if ((await repos.snapshots.countSince(device.seq, dayStart)) >= limit) throw quotaError(limit, clock.now());

      // Low disk space on either file system: refused before anything is written.
      if (storage.snapshotsRefusal !== null) throw storage.refuse(storage.snapshotsRefusal);

      // UUIDs are never reused, so a URL always names the same bytes (immutable caching).
      const id = randomUUID();
      try {
        await files.write(device.id, id, contentType, bytes);
      } catch (err) {
        throw (await refusedSinceStart(device, input.token)) ?? storage.writeFailed('snapshots', err);
      }
      storage.writeSucceeded('snapshots');
      const now = clock.now();
      let inserted: boolean;
      try {
        // Count and insert in one write transaction: concurrent uploads cannot both take
        // the last slot of the day.
        inserted = await repos.snapshots.insertWithinQuota(
          { id, deviceSeq: device.seq, contentType, size: bytes.length, now },
          startOfUtcDay(now),
          limit,
        );
      } catch (err) {
        await files.remove(device.id, id, contentType).catch(() => {});
        throw (await refusedSinceStart(device, input.token)) ?? storage.writeFailed('database', err);
      }
      if (!inserted) {
        await files.remove(device.id, id, contentType).catch(() => {});
        throw quotaError(limit, now);
      }
      storage.writeSucceeded('database');
      return { id, url: snapshotUrl(device.id, id) };
    },

    /**
     * GET /api/devices/{device_id}/snapshot/{id}. Every refusal is the same 404, whether the
     * snapshot is missing, expired, of another device, or the reader may not see it: the
     * answer reveals nothing (docs/snapshots.md, "Reading").
     */
    async read(deviceId: string, id: string, readers: SnapshotReader[]): Promise<StoredSnapshot> {
      const missing = () => notFound('snapshot not found');
      const snapshot = await repos.snapshots.findById(id);
      if (!snapshot || snapshot.deviceId !== deviceId) throw missing();
      const allowed = readers.some((r) => ('deviceSeq' in r ? r.deviceSeq === snapshot.deviceSeq : r.accountSeq === snapshot.accountSeq));
      // Past retention it is gone for readers even before the background job removes it.
      if (!allowed || (await isExpired(snapshot, clock.now()))) throw missing();
      const bytes = await files.read(snapshot.deviceId, snapshot.id, snapshot.contentType);
      if (!bytes) throw missing();
      return { id: snapshot.id, contentType: snapshot.contentType, size: bytes.length, createdAt: snapshot.createdAt, bytes };
    },

    purgeExpiredSnapshots,

    /**
     * How many of a device's snapshots have no folder here: an admin command given another
     * snapshots folder than the server's (on PostgreSQL, where admin commands need no
     * --data-dir, one run without --snapshots-dir) would delete the device and leave its
     * files behind, unseen.
     */
    async snapshotsOutsideFolder(device: Device): Promise<{ count: number; folder: string }> {
      const count = files.hasDevice(device.id) ? 0 : await repos.snapshots.countSince(device.seq, 0);
      return { count, folder: files.root };
    },

    /** Removes a deleted device's files (its rows go by ON DELETE CASCADE). */
    removeDeviceFiles(deviceId: string): void {
      files.removeDevice(deviceId);
    },

    /** Clears temporary files older than `ageMs` that a crash left mid-write. */
    removeStaleTempFiles: (ageMs: number) => files.removeStaleTempFiles(ageMs),
  };
}

export type SnapshotService = ReturnType<typeof snapshotService>;
