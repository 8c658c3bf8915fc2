import { Command } from 'commander';
import type { BackupProgress } from '../src/composition.js';
import { hasDatabase, openDataDir, restoreDataDir } from '../src/composition.js';
import { dataDirOf, fail, withCommonOptions } from './context.js';

/** Progress on stderr, only when it is a terminal (scripts and --json get a quiet stderr). */
function terminalProgress(): ((p: BackupProgress) => void) | undefined {
  if (!process.stderr.isTTY) return undefined;
  return ({ totalPages, remainingPages }) => {
    const done = totalPages - remainingPages;
    const pct = totalPages ? Math.floor((100 * done) / totalPages) : 100;
    process.stderr.write(`\rbackup: database ${pct}% (${done}/${totalPages} pages)`);
  };
}

/** `telemetryd backup FILE` and `telemetryd restore FILE` (docs/operations.md, "Backup and restore"). */
export function backupCommands(): Command[] {
  const backup = withCommonOptions(
    new Command('backup')
      .description('write a consistent backup (database + snapshot files, one .tar.gz) while the server runs')
      .argument('<file>', 'archive to write (replaced atomically if it exists)'),
  ).action(async (file: string, opts: { json?: boolean }, cmd: Command) => {
    try {
      const dataDir = dataDirOf(cmd);
      // Never create an empty database just to back it up.
      if (!hasDatabase(dataDir)) throw new Error(`no database in ${dataDir}`);
      const composition = openDataDir(dataDir);
      let result: { file: string; bytes: number };
      try {
        const progress = terminalProgress();
        result = await composition.services.backup.create(file, progress);
        if (progress) process.stderr.write('\n');
      } finally {
        composition.close();
      }
      process.stdout.write(opts.json ? `${JSON.stringify(result)}\n` : `wrote ${result.file} (${result.bytes} bytes)\n`);
    } catch (err) {
      fail(err);
    }
  });

  const restore = withCommonOptions(
    new Command('restore')
      .description('restore a backup into --data-dir (stop the server first)')
      .argument('<file>', 'archive written by `telemetryd backup`')
      .option('--force', 'replace the database already in the data dir'),
  ).action(async (file: string, opts: { json?: boolean; force?: boolean }, cmd: Command) => {
    try {
      const result = await restoreDataDir(file, dataDirOf(cmd), { force: Boolean(opts.force) });
      process.stdout.write(
        opts.json ? `${JSON.stringify(result)}\n` : `restored ${result.file} into ${result.data_dir} (${result.readings} readings)\n`,
      );
    } catch (err) {
      fail(err);
    }
  });
  return [backup, restore];
}
