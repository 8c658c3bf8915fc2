import { rmSync } from 'node:fs';
import { afterEach } from 'vitest';
import { type Db, openDatabase } from '../../src/storage/db.js';
import { tempDir } from './server.js';

/**
 * Real databases in temp data dirs for storage tests, closed and removed after each test.
 * `open` may be called again on the same dir to test what survives a reopen.
 */
export function useTempDatabases() {
  const opened: Db[] = [];
  const dirs: string[] = [];
  afterEach(() => {
    for (const db of opened.splice(0)) if (db.open) db.close();
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  return {
    dir(): string {
      const dir = tempDir();
      dirs.push(dir);
      return dir;
    },
    open(dir: string): Db {
      const db = openDatabase(dir);
      opened.push(db);
      return db;
    },
  };
}
