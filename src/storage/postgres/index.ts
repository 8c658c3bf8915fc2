import type { Pool } from 'pg';
import { AuthCache } from './authCache.js';
import { postgresAccountsRepo } from './repos/accounts.js';
import { postgresAlertsRepo } from './repos/alerts.js';
import { postgresApiKeysRepo } from './repos/apiKeys.js';
import { postgresDevicesRepo } from './repos/devices.js';
import { postgresReadingsRepo } from './repos/readings.js';
import { deleteRollupsOfDevice, postgresRollupsRepo } from './repos/rollups.js';
import { postgresSessionsRepo } from './repos/sessions.js';
import { postgresSnapshotsRepo } from './repos/snapshots.js';

/**
 * Every repository over one connection pool: the PostgreSQL counterpart of
 * createRepositories (src/storage/index.ts), for a database migrated by migratePostgres.
 * Readings are written by the PostgresReadingWriter over the same pool, given
 * `rollups.lateBefore` so late readings mark their hour dirty as on SQLite.
 *
 * There is no `transaction(fn)`: a PostgreSQL transaction spans awaits, so every write of
 * several statements is a named operation of its repository, one transaction on one pooled
 * client (devices.insertWithinLimit, devices.removeWithRollups, readings.expireBatch,
 * readings.dropExpiredPartitions, alerts.updateEndingFiring, alerts.setEnabledEndingFiring,
 * alerts.recordOutcomes, snapshots.insertWithinQuota, rollups.writeSpan, rollups.settleHour).
 * Async because the rollups' mark is read once here.
 */
export async function createPostgresRepositories(pool: Pool) {
  // Device authentication and its account, on every reading: cached, dropped on this
  // process's own changes to either table (authCache.ts).
  const authCache = new AuthCache();
  return {
    accounts: postgresAccountsRepo(pool, authCache),
    apiKeys: postgresApiKeysRepo(pool),
    devices: postgresDevicesRepo(pool, authCache, deleteRollupsOfDevice),
    readings: postgresReadingsRepo(pool, authCache),
    rollups: await postgresRollupsRepo(pool),
    alerts: postgresAlertsRepo(pool),
    sessions: postgresSessionsRepo(pool),
    snapshots: postgresSnapshotsRepo(pool),
    /**
     * Commits by other processes (the admin CLI, another node), which SQLite sees through
     * PRAGMA data_version. Not seen on PostgreSQL yet: the counter never moves and the watch
     * never fires. LISTEN/NOTIFY (the cluster work) plugs in here and in authCache.ts: the
     * listening connection's handler bumps this counter, calls `authCache.invalidate()` and
     * the watchers' `onChange`.
     */
    externalCommits: {
      current: (): number => 0,
      watch:
        (_onChange: () => void, _intervalMs: number, _onError?: (err: unknown) => void): (() => void) =>
        () => {},
    },
    /** Forgets the cached device and account look-ups (authCache.ts). */
    invalidateAuthCache: (): void => authCache.invalidate(),
  };
}

export type PostgresRepositories = Awaited<ReturnType<typeof createPostgresRepositories>>;
