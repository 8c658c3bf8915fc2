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
import type {
  AccountsRepository,
  AlertsRepository,
  ApiKeysRepository,
  DevicesRepository,
  ExternalChanges,
  Leadership,
  ReadingsRepository,
  Repositories,
  RollupsRepository,
  SessionsRepository,
  SnapshotsRepository,
} from './repositories.js';

/**
 * One server serves a SQLite database: it leads from the start, and every reading committed
 * while it serves is its own.
 */
const soleLeadership: Leadership = {
  soleWriter: true,
  follow(onChange) {
    onChange(true);
    return () => Promise.resolve();
  },
};

/**
 * Every SQLite repository over one connection: the storage interface of the domain layer
 * (repositories.ts), answered synchronously, plus what the SQLite reading writer and tests
 * use beyond it (readings.insertBatch, mergeInbox, ...).
 */
export function createRepositories(db: Db) {
  // Commits by another connection (the admin CLI), one cheap check shared by every cache.
  const externalCommits = new ExternalCommits(db);
  // Device authentication and its account are looked up on every reading: cached, and
  // dropped on any change to either table by anyone (readCache.ts).
  const authTables = new TableChanges(db, externalCommits, ['devices', 'accounts']);
  const rollups = rollupsRepo(db);
  const readings = readingsRepo(db, rollups, authTables);
  // Each checked against its interface here, where a mismatch names the repository.
  return {
    accounts: accountsRepo(db, authTables) satisfies AccountsRepository,
    apiKeys: apiKeysRepo(db) satisfies ApiKeysRepository,
    devices: devicesRepo(db, rollups, readings, authTables) satisfies DevicesRepository,
    readings: readings satisfies ReadingsRepository,
    rollups: rollups satisfies RollupsRepository,
    alerts: alertsRepo(db) satisfies AlertsRepository,
    sessions: sessionsRepo(db) satisfies SessionsRepository,
    snapshots: snapshotsRepo(db) satisfies SnapshotsRepository,
    /** Commits by another connection (the admin CLI): a counter, and a watch (readCache.ts). */
    externalCommits: externalCommits satisfies ExternalChanges,
    leadership: soleLeadership satisfies Leadership,
  } satisfies Repositories;
}

export type SqliteRepositories = ReturnType<typeof createRepositories>;
