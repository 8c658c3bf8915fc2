import {
  chmodSync,
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { makeDirs } from '../fsDirs.js';
import { DB_FILE, type Db, refuseFileAsDataDir } from './db.js';
import { loadNativeBinding } from './native.js';
import { giveToOwnerOf } from './ownership.js';
import { snapshotFiles } from './snapshotFiles.js';

/**
 * Backup and restore of a data dir (docs/reliability.md "Backup and restore").
 *
 * One archive: a gzip'd tar holding `backup.json` (a manifest), `telemetryd.db` (a copy
 * made with SQLite's online backup API, consistent as of one moment while the server keeps
 * ingesting) and `snapshots/` (the snapshot image files, when the data dir has them).
 * The database is copied first, then the snapshot files: a snapshot row in the copy always
 * has its file unless retention deleted it in between (then retention would delete the row
 * after restore anyway); files newer than the copy are harmless extras.
 */
const BACKUP_FORMAT = 1;
const SNAPSHOTS_DIR = 'snapshots';
const MANIFEST = 'backup.json';

export interface BackupProgress {
  totalPages: number;
  remainingPages: number;
}

interface BackupManifest {
  format: number;
  version: string;
  created_at: string;
  snapshots: boolean;
  /** The backend the archive was taken from when not SQLite (information only). */
  source?: 'postgres';
}

/**
 * Copies the live database with SQLite's online backup API. Between steps the event loop
 * runs (and the server, in another process, keeps writing). A write by another connection
 * restarts the copy, so each restart doubles the step size: under steady ingest the copy
 * ends in a few passes instead of restarting forever.
 */
async function copyDatabase(db: Db, dest: string, onProgress?: (p: BackupProgress) => void): Promise<void> {
  let step = 0;
  let lastRemaining = Number.POSITIVE_INFINITY;
  const done = await db.backup(dest, {
    progress(p: BackupProgress) {
      if (step === 0) step = Math.max(256, Math.ceil(p.totalPages / 20));
      else if (p.remainingPages > lastRemaining) step = Math.min(step * 2, 0x7fffffff);
      lastRemaining = p.remainingPages;
      onProgress?.(p);
      return step;
    },
  });
  // The last step is not reported by better-sqlite3: report completion.
  onProgress?.({ totalPages: done.totalPages, remainingPages: 0 });
}

/** Writes the archive of a data dir to `file` (atomically: a temp file renamed into place). */
export async function createBackup(
  db: Db,
  snapshotsDir: string,
  file: string,
  version: string,
  onProgress?: (p: BackupProgress) => void,
  options: ArchiveChecks = {},
): Promise<{ file: string; bytes: number }> {
  refuseDatabaseAsTarget(file, db.name);
  return writeArchive(file, { snapshotsDir, version, ...options }, (staging) => copyDatabase(db, path.join(staging, DB_FILE), onProgress));
}

/**
 * The archive must not be written over the database it copies, nor its WAL or shared-memory
 * file: the final rename would swap a live database for a gzip file (a running server keeps
 * writing to the unlinked one, and every reading after it is lost). Compared through real
 * paths, so a link to the data dir is caught too.
 */
function refuseDatabaseAsTarget(file: string, dbFile: string): void {
  const real = (p: string) => {
    try {
      return path.join(realpathSync(path.dirname(p)), path.basename(p));
    } catch {
      return path.resolve(p);
    }
  };
  const target = real(path.resolve(file));
  const database = real(path.resolve(dbFile));
  if (['', '-wal', '-shm', '-journal'].some((suffix) => target === database + suffix)) {
    throw new Error(`${path.resolve(file)} is the database itself: write the archive somewhere else (e.g. telemetryd-backup.tar.gz)`);
  }
}

/** What a backup may be told to let pass. */
export interface ArchiveChecks {
  /**
   * Write the archive even when the snapshots folder holds none of the snapshots' files
   * (`backup --without-snapshot-files`: the images are lost, the database is not).
   */
  withoutSnapshotFiles?: boolean;
}

/**
 * Writes an archive: `fillDatabase` puts `telemetryd.db` into a staging folder beside the
 * target (either backend's copy), then the snapshot files and the manifest join it in one
 * gzip'd tar, written to a temp name and renamed into place.
 */
export async function writeArchive(
  file: string,
  opts: { snapshotsDir: string; version: string; source?: 'postgres' } & ArchiveChecks,
  fillDatabase: (staging: string) => Promise<void>,
): Promise<{ file: string; bytes: number }> {
  const target = path.resolve(file);
  // Checked first: the staging folder's name in mkdtemp's error would be the only hint.
  if (!existsSync(path.dirname(target))) throw new Error(`no folder ${path.dirname(target)} to write ${path.basename(target)} into`);
  // Checked before the copy, which the final rename would otherwise fail after with EISDIR.
  if (statSync(target, { throwIfNoEntry: false })?.isDirectory())
    throw new Error(`${target} is a folder: give the archive's file name (${path.join(file, 'telemetryd-backup.tar.gz')})`);
  const staging = mkdtempSync(path.join(path.dirname(target), '.telemetryd-backup-'));
  const partial = `${target}.partial-${process.pid}`;
  try {
    await fillDatabase(staging);
    const hasSnapshots = existsSync(opts.snapshotsDir);
    if (!opts.withoutSnapshotFiles) refuseMissingSnapshotFiles(path.join(staging, DB_FILE), path.dirname(target), opts.snapshotsDir);
    // The snapshot files are archived in place (a link followed by tar), not copied twice.
    if (hasSnapshots) symlinkSync(path.resolve(opts.snapshotsDir), path.join(staging, SNAPSHOTS_DIR), 'dir');
    const manifest: BackupManifest = {
      format: BACKUP_FORMAT,
      version: opts.version,
      created_at: new Date().toISOString(),
      snapshots: hasSnapshots,
      ...(opts.source ? { source: opts.source } : {}),
    };
    writeFileSync(path.join(staging, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`);
    // Loaded on first use: a serve that never backs up does not load tar (and zlib) at start.
    const tar = await import('tar');
    await tar.create(
      {
        gzip: true,
        file: partial,
        cwd: staging,
        follow: true,
        portable: true,
        // A snapshot file removed by retention while we archive is not an error.
        onwarn: () => {},
        // Temporary files of uploads in progress (.<id>.<random>.tmp, docs/snapshots.md) are
        // not snapshots yet: leave them out.
        filter: (p: string) => !/(^|\/)\.[^/]*\.tmp$/.test(p),
      },
      [MANIFEST, DB_FILE, ...(hasSnapshots ? [SNAPSHOTS_DIR] : [])],
    );
    // The archive holds password and secret hashes and every reading: owner-only.
    chmodSync(partial, 0o600);
    renameSync(partial, target);
    return { file: target, bytes: statSync(target).size };
  } finally {
    rmSync(staging, { recursive: true, force: true });
    rmSync(partial, { force: true });
  }
}

/** Snapshots whose files are looked for before a backup is written (the newest). */
const SNAPSHOT_FILES_CHECKED = 20;

/**
 * A database with snapshots and a snapshots folder holding none of their files is a folder
 * other than the server's (an admin command on PostgreSQL, which needs no --data-dir, run
 * without --snapshots-dir looks under ./telemetryd-data): the archive would
 * restore rows without their images. Refused, naming the folder. A few files missing (removed
 * by retention while the backup ran, or by hand) are not: only the newest are looked for.
 */
function refuseMissingSnapshotFiles(dbFile: string, nativeDir: string, snapshotsDir: string): void {
  const db = new Database(dbFile, { readonly: true, nativeBinding: loadNativeBinding(nativeDir) } as Database.Options);
  let total: number;
  let newest: { device_id: string; id: string; content_type: string }[];
  try {
    total = (db.prepare('SELECT count(*) AS n FROM snapshots').get() as { n: number }).n;
    newest = db
      .prepare(
        'SELECT d.id AS device_id, s.id, s.content_type FROM snapshots s JOIN devices d ON d.seq = s.device_seq ORDER BY s.seq DESC LIMIT ?',
      )
      .all(SNAPSHOT_FILES_CHECKED) as typeof newest;
  } finally {
    db.close();
  }
  if (total === 0) return;
  const files = snapshotFiles(snapshotsDir);
  if (newest.some((s) => existsSync(files.fileOf(s.device_id, s.id, s.content_type)))) return;
  const where = existsSync(snapshotsDir)
    ? `${snapshotsDir} holds no file of the newest ${newest.length}`
    : `there is no folder ${snapshotsDir}`;
  throw new Error(
    `the database holds ${total} snapshot${total === 1 ? '' : 's'} but ${where}: give --snapshots-dir the server's snapshots folder (or, if the files are lost, --without-snapshot-files)`,
  );
}

/**
 * True while another connection (a running server) has the database open. In WAL mode
 * every open connection keeps a shared lock on the file; an EXCLUSIVE transaction with no
 * busy timeout fails at once if any exists.
 */
function databaseInUse(dataDir: string): boolean {
  const file = path.join(dataDir, DB_FILE);
  if (!existsSync(file)) return false;
  const db = new Database(file, { nativeBinding: loadNativeBinding(dataDir) } as Database.Options);
  try {
    db.pragma('busy_timeout = 0');
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
    db.exec('COMMIT');
    return false;
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'SQLITE_BUSY') return true;
    // Not a database at all (a damaged header): no server can be serving it, and replacing
    // such a file is what `restore --force` is for.
    if (code === 'SQLITE_NOTADB') return false;
    throw err;
  } finally {
    db.close();
  }
}

class RestoreError extends Error {}

/** An archive unpacked into a staging folder and checked: its database and snapshot files. */
export interface UnpackedArchive {
  /** `telemetryd.db`, passed integrity_check. */
  dbFile: string;
  /** The snapshot files, or null when the archive has none. */
  snapshots: string | null;
  readings: number;
}

/**
 * Unpacks `source` into `staging` and checks it (manifest, format, integrity_check), so that
 * a bad archive is refused before anything is replaced.
 */
export async function unpackArchive(source: string, staging: string, nativeDir: string): Promise<UnpackedArchive> {
  if (!existsSync(source)) throw new RestoreError(`no backup file ${source}`);
  try {
    const tar = await import('tar');
    await tar.extract({
      file: source,
      cwd: staging,
      // Only regular files and folders: no links, devices or absolute paths from an archive.
      filter: (_p, entry) => 'type' in entry && (entry.type === 'File' || entry.type === 'Directory'),
      strict: true,
    });
  } catch (err) {
    throw new RestoreError(`${source} is not a telemetryd backup: ${(err as Error).message}`);
  }
  let manifest: BackupManifest;
  try {
    manifest = JSON.parse(readFileSync(path.join(staging, MANIFEST), 'utf8')) as BackupManifest;
  } catch {
    throw new RestoreError(`${source} is not a telemetryd backup (no ${MANIFEST})`);
  }
  if (manifest.format !== BACKUP_FORMAT)
    throw new RestoreError(`backup format ${manifest.format} is not supported (expected ${BACKUP_FORMAT})`);
  const dbFile = path.join(staging, DB_FILE);
  if (!existsSync(dbFile)) throw new RestoreError(`${source} holds no ${DB_FILE}`);
  let readings: number;
  const check = new Database(dbFile, { nativeBinding: loadNativeBinding(nativeDir) } as Database.Options);
  try {
    const result = check.pragma('integrity_check', { simple: true });
    if (result !== 'ok') throw new RestoreError(`the database in ${source} is damaged: ${String(result)}`);
    readings = (check.prepare('SELECT count(*) AS n FROM readings').get() as { n: number }).n;
  } catch (err) {
    // A file damaged badly enough makes the check itself fail ("database disk image is
    // malformed"): said of the archive, not as if the data dir's database were damaged.
    if (err instanceof RestoreError) throw err;
    throw new RestoreError(`the database in ${source} is damaged: ${(err as Error).message}`);
  } finally {
    check.close();
  }
  const snapshots = path.join(staging, SNAPSHOTS_DIR);
  return { dbFile, snapshots: existsSync(snapshots) ? snapshots : null, readings };
}

/**
 * Replaces the snapshot files in `snapshotsDir` with the restored ones (none: the folder is
 * emptied). A rename when both are on one file system, else a copy.
 */
export function placeSnapshots(restored: string | null, snapshotsDir: string): void {
  if (restored || existsSync(snapshotsDir)) rmSync(snapshotsDir, { recursive: true, force: true });
  if (!restored) return;
  makeDirs(path.dirname(snapshotsDir), 0o700);
  try {
    renameSync(restored, snapshotsDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
    cpSync(restored, snapshotsDir, { recursive: true, preserveTimestamps: true });
  }
}

/**
 * Puts an archive back into a data dir (the server must be stopped). The archive is
 * unpacked and checked (manifest, integrity_check) in a staging folder inside the data dir
 * first; only then are the current files replaced, so a bad archive changes nothing.
 */
export async function restoreBackup(
  file: string,
  dataDir: string,
  opts: { force: boolean; snapshotsDir?: string },
): Promise<{ file: string; data_dir: string; readings: number }> {
  const source = path.resolve(file);
  if (!existsSync(source)) throw new RestoreError(`no backup file ${source}`);
  const dir = path.resolve(dataDir);
  refuseFileAsDataDir(dir);
  const dbPath = path.join(dir, DB_FILE);
  if (existsSync(dbPath)) {
    if (!opts.force) throw new RestoreError(`${dir} already holds a database; pass --force to replace it`);
    if (databaseInUse(dir)) throw new RestoreError(`the database in ${dir} is in use (a running server?); stop it first`);
  }
  // A data dir made here goes again when the archive is refused: a bad archive changes nothing.
  const madeDir = !existsSync(dir);
  if (madeDir) makeDirs(dir, 0o700);
  const staging = mkdtempSync(path.join(dir, '.restore-'));
  let restored = false;
  try {
    const unpacked = await unpackArchive(source, staging, dir);
    for (const suffix of ['-wal', '-shm', '']) rmSync(dbPath + suffix, { force: true });
    renameSync(unpacked.dbFile, dbPath);
    chmodSync(dbPath, 0o600);
    const snapshotsDir = path.resolve(opts.snapshotsDir ?? path.join(dir, SNAPSHOTS_DIR));
    placeSnapshots(unpacked.snapshots, snapshotsDir);
    chmodSync(dir, 0o700);
    // Run as root (sudo) into a service's data dir, the files would be root's, mode 0600, and
    // the service user could not open them: they take the data dir's owner.
    if (!madeDir) giveToOwnerOf(dir, [dbPath, snapshotsDir]);
    restored = true;
    return { file: source, data_dir: dir, readings: unpacked.readings };
  } finally {
    rmSync(staging, { recursive: true, force: true });
    if (madeDir && !restored) rmSync(dir, { recursive: true, force: true });
  }
}
