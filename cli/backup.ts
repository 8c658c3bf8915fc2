import path from 'node:path';
import { Command } from 'commander';
import type { BackupProgress, PostgresBackupProgress } from '../src/composition.js';
import { backupPostgres, hasDatabase, openDataDir, restoreDataDir, restorePostgres } from '../src/composition.js';
import { DB_FILE, refuseFileAsDataDir } from '../src/storage/db.js';
import { describeDatabase, redactDatabaseUrl } from '../src/storage/postgres/connect.js';
import { fail, storageOf, withCommonOptions, withSourceOf } from './context.js';

/** Progress on stderr, only when it is a terminal (scripts and --json get a quiet stderr). */
function terminalProgress(): ((p: BackupProgress) => void) | undefined {
  if (!process.stderr.isTTY) return undefined;
  return ({ totalPages, remainingPages }) => {
    const done = totalPages - remainingPages;
    const pct = totalPages ? Math.floor((100 * done) / totalPages) : 100;
    process.stderr.write(`\rbackup: database ${pct}% (${done}/${totalPages} pages)`);
  };
}

/** The same from PostgreSQL: rows copied per table (a count, as the total is not known up front). */
function terminalTableProgress(): ((p: PostgresBackupProgress) => void) | undefined {
  if (!process.stderr.isTTY) return undefined;
  return ({ table, rows }) => process.stderr.write(`\rbackup: ${table} ${rows} rows\x1b[K`);
}

/** `telemetryd backup FILE` and `telemetryd restore FILE` (docs/operations.md, "Backup and restore"). */
export function backupCommands(): Command[] {
  const backup = withCommonOptions(
    new Command('backup')
      .description('write a consistent backup (database + snapshot files, one .tar.gz) while the server runs')
      .argument('<file>', 'archive to write (replaced atomically if it exists)')
      .option(
        '--without-snapshot-files',
        "write the archive even when the snapshots folder holds none of the snapshots' files (they are lost)",
      ),
  ).action(async (file: string, opts: { json?: boolean; withoutSnapshotFiles?: boolean }, cmd: Command) => {
    try {
      const { dataDir, snapshotsDir, databaseUrl } = storageOf(cmd);
      const checks = { withoutSnapshotFiles: Boolean(opts.withoutSnapshotFiles) };
      let result: { file: string; bytes: number };
      if (databaseUrl !== null) {
        const progress = terminalTableProgress();
        result = await backupPostgres(databaseUrl, snapshotsDir, file, progress, checks);
        if (progress) process.stderr.write('\n');
      } else {
        // Never create an empty database just to back it up.
        refuseFileAsDataDir(dataDir);
        if (!hasDatabase(dataDir)) throw new Error(`no database in ${dataDir}`);
        const composition = openDataDir(dataDir, { snapshotsDir });
        try {
          const progress = terminalProgress();
          result = await composition.services.backup.create(file, progress, checks);
          if (progress) process.stderr.write('\n');
        } finally {
          composition.close();
        }
      }
      // Which database it read: a TELEMETRYD_DATABASE_URL left in the environment wins over --data-dir.
      const from = databaseUrl !== null ? `PostgreSQL ${describeDatabase(databaseUrl)}` : `SQLite ${path.join(dataDir, DB_FILE)}`;
      process.stdout.write(opts.json ? `${JSON.stringify(result)}\n` : `wrote ${result.file} (${result.bytes} bytes) from ${from}\n`);
    } catch (err) {
      fail(withSourceOf(cmd, err));
    }
  });

  const restore = withCommonOptions(
    new Command('restore')
      .description('restore a backup into --data-dir, or into the PostgreSQL database of --database-url (stop the server first)')
      .argument('<file>', 'archive written by `telemetryd backup`')
      .option('--force', 'replace the database already in the data dir (or the accounts already in the PostgreSQL database)'),
  ).action(async (file: string, opts: { json?: boolean; force?: boolean }, cmd: Command) => {
    try {
      const { dataDir, snapshotsDir, databaseUrl } = storageOf(cmd);
      const force = Boolean(opts.force);
      if (databaseUrl !== null) {
        const restored = await restorePostgres(databaseUrl, file, { force, snapshotsDir });
        const result = { ...restored, database: redactDatabaseUrl(databaseUrl) };
        process.stdout.write(
          opts.json
            ? `${JSON.stringify(result)}\n`
            : // The snapshots folder too: without --snapshots-dir it is ./telemetryd-data/snapshots of wherever this ran.
              `restored ${result.file} into ${result.database} (${result.readings} readings), snapshot files into ${result.snapshots_dir}\n`,
        );
        return;
      }
      const result = await restoreDataDir(file, dataDir, { force, snapshotsDir });
      process.stdout.write(
        opts.json ? `${JSON.stringify(result)}\n` : `restored ${result.file} into ${result.data_dir} (${result.readings} readings)\n`,
      );
    } catch (err) {
      fail(withSourceOf(cmd, err));
    }
  });
  return [backup, restore];
}
