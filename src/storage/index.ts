import type { Db } from './db.js';
import { ExternalCommits, TableChanges } from './readCache.js';
import { accountsRepo } from './repos/accounts.js';
import { alertsRepo } from './repos/alerts.js';
import { apiKeysRepo } from './repos/apiKeys.js';
import { devicesRepo } from './repos/devices.js';
import { readingsRepo } from './repos/readings.js';
import { rollupsRepo } from './repos/rollups.js';
import { sessionsRepo } from './repos/sessions.js';
import { snapshotsRepo } from './repos/snapshots.js';

/** Every repository over one connection: what the domain layer is given. */
export function createRepositories(db: Db) {
  // Commits by another connection (the admin CLI), one cheap check shared by every cache.
  const externalCommits = new ExternalCommits(db);
  // Device authentication and its account are looked up on every reading: cached, and
  // dropped on any change to either table by anyone (readCache.ts).
  const authTables = new TableChanges(db, externalCommits, ['devices', 'accounts']);
  const rollups = rollupsRepo(db);
  return {
    accounts: accountsRepo(db, authTables),
    apiKeys: apiKeysRepo(db),
    devices: devicesRepo(db, authTables),
    readings: readingsRepo(db, rollups),
    rollups,
    alerts: alertsRepo(db),
    sessions: sessionsRepo(db),
    snapshots: snapshotsRepo(db),
    /** Commits by another connection (the admin CLI): a counter, and a watch (readCache.ts). */
    externalCommits,
    /** Runs fn in one synchronous transaction (never spans an await). */
    // IMMEDIATE takes the write lock up front, so a concurrent writer (the admin CLI, the
    // server) waits on busy_timeout instead of failing with SQLITE_BUSY on lock upgrade.
    transaction: <T>(fn: () => T): T => db.transaction(fn).immediate(),
  };
}

export type Repositories = ReturnType<typeof createRepositories>;
