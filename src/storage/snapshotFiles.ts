import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import { type FileHandle, open, readdir, readFile, rename, rm, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { type AppError, unavailable } from '../errors.js';
import { makeDirsAsync } from '../fsDirs.js';

/**
 * Snapshot bytes on disk: `<snapshots dir>/<device id>/<snapshot id>.<jpg|png>`, the snapshots
 * dir being `<data-dir>/snapshots` unless `--snapshots-dir` names another.
 * One folder per device, so deleting a device removes one folder, and no folder grows with
 * the number of devices times their snapshots.
 *
 * A file appears whole or not at all: bytes go to a temporary name in the same
 * folder, are fsynced, then renamed over the final name (rename is atomic within one file
 * system). Temporary names start with "." so they never collide with a snapshot id.
 */
const EXTENSIONS: Record<string, string> = { 'image/jpeg': 'jpg', 'image/png': 'png' };
// Both parts come from our own database (dev_… ids, UUIDs), never raw from a URL; checked
// anyway so no value can ever point outside the snapshots folder.
const SAFE_PART = /^[A-Za-z0-9_-]{1,100}$/;

function part(value: string): string {
  if (!SAFE_PART.test(value)) throw new Error(`unsafe snapshot path part "${value}"`);
  return value;
}

/** Any failure of the file system is the server's, and usually passes (disk full, permissions). */
function storageFailure(err: unknown): AppError {
  const failure = unavailable('storage temporarily unavailable');
  (failure as { cause?: unknown }).cause = err;
  return failure;
}

export function snapshotFiles(root: string) {
  const deviceDir = (deviceId: string) => path.join(root, part(deviceId));
  const fileOf = (deviceId: string, id: string, contentType: string) => {
    const ext = EXTENSIONS[contentType];
    if (!ext) throw new Error(`no file extension for ${contentType}`);
    return path.join(deviceDir(deviceId), `${part(id)}.${ext}`);
  };

  return {
    root,
    fileOf,

    /** Writes the whole file or nothing; a file-system error is thrown as it is (the caller says 503). */
    async write(deviceId: string, id: string, contentType: string, bytes: Uint8Array): Promise<void> {
      const final = fileOf(deviceId, id, contentType);
      const dir = path.dirname(final);
      const temp = path.join(dir, `.${id}.${randomBytes(4).toString('hex')}.tmp`);
      let handle: FileHandle | null = null;
      let tempCreated = false;
      try {
        await makeDirsAsync(dir, 0o700);
        handle = await open(temp, 'wx', 0o600);
        tempCreated = true;
        await handle.writeFile(bytes);
        await handle.sync();
        await handle.close();
        handle = null;
        await rename(temp, final);
        tempCreated = false;
        await syncDirectory(dir);
      } catch (err) {
        await handle?.close().catch(() => {});
        if (tempCreated) await unlink(temp).catch(() => {});
        throw err;
      }
    },

    /** The bytes, or null when the file is gone (purged, or its device deleted). */
    async read(deviceId: string, id: string, contentType: string): Promise<Buffer | null> {
      try {
        return await readFile(fileOf(deviceId, id, contentType));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw storageFailure(err);
      }
    },

    /** Removes one snapshot file; a file already gone is not an error. */
    async remove(deviceId: string, id: string, contentType: string): Promise<void> {
      await rm(fileOf(deviceId, id, contentType), { force: true });
    },

    /**
     * Removes temporary files a crash left behind mid-write (a finished write never leaves
     * one). Only those older than `olderThanMs`, so writes in progress are never touched.
     * File times are the file system's, so this uses the wall clock.
     */
    async removeStaleTempFiles(olderThanMs: number): Promise<number> {
      let removed = 0;
      let devices: string[];
      try {
        devices = await readdir(root);
      } catch {
        return 0; // no snapshots folder yet
      }
      for (const device of devices) {
        let names: string[];
        try {
          names = await readdir(path.join(root, device));
        } catch {
          continue;
        }
        for (const name of names) {
          if (!name.startsWith('.') || !name.endsWith('.tmp')) continue;
          const file = path.join(root, device, name);
          try {
            if ((await stat(file)).mtimeMs < Date.now() - olderThanMs) {
              await unlink(file);
              removed++;
            }
          } catch {
            // gone already, or not ours to remove
          }
        }
      }
      return removed;
    },

    /** Removes every snapshot file of a device (synchronous: called from a device deletion). */
    removeDevice(deviceId: string): void {
      rmSync(deviceDir(deviceId), { recursive: true, force: true });
    },

    /** Whether the device's folder is here (it is made with the device's first snapshot). */
    hasDevice: (deviceId: string): boolean => existsSync(deviceDir(deviceId)),
  };
}

/** fsync of the folder makes the rename itself durable; not every platform allows it. */
async function syncDirectory(dir: string): Promise<void> {
  let handle: FileHandle | null = null;
  try {
    handle = await open(dir, 'r');
    await handle.sync();
  } catch {
    // EISDIR/EPERM on some platforms: the file's own fsync already happened.
  } finally {
    await handle?.close().catch(() => {});
  }
}

export type SnapshotFiles = ReturnType<typeof snapshotFiles>;
