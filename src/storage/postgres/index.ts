import type { Pool } from 'pg';
import type { ExternalChanges, Repositories } from '../repositories.js';
import { AuthCache } from './authCache.js';
import { ChangeListener } from './changeListener.js';
import { poolNode } from './connect.js';
import { newNodeKey, PostgresLeadership } from './leadership.js';
import { postgresAccountsRepo } from './repos/accounts.js';
import { postgresAlertsRepo } from './repos/alerts.js';
import { postgresApiKeysRepo } from './repos/apiKeys.js';
import { postgresDevicesRepo } from './repos/devices.js';
import { postgresReadingsRepo } from './repos/readings.js';
import { deleteRollupsOfDevice, postgresRollupsRepo } from './repos/rollups.js';
import { postgresSessionsRepo } from './repos/sessions.js';
import { postgresSnapshotsRepo } from './repos/snapshots.js';

/**
 * Every repository over one connection pool (Repositories, src/storage/repositories.ts), for
 * a database migrated by migratePostgres. Readings are written by the PostgresReadingWriter
 * over the same pool, given `rollups.lateBefore` so that late readings mark their hour dirty
 * as on SQLite. Every write of several statements is a named operation, one transaction on
 * one pooled client (BEGIN … COMMIT, ROLLBACK on error). Asynchronous because the rollups'
 * mark is read once here.
 *
 * Besides the interface: readings.dropExpiredPartitions (retention by whole weeks),
 * readings.committed (the writer's commit hook) and invalidateAuthCache. The pool must come
 * from connectPostgres (its node name tells this process's change notifications apart).
 */
export async function createPostgresRepositories(pool: Pool) {
  // Device authentication and its account on every reading, API keys on every Public API
  // request: cached, dropped on any change to these tables (authCache.ts).
  const authCache = new AuthCache();
  // Names this process in the deliveries it sends and in the lock it holds while it runs.
  const nodeKey = newNodeKey();
  const repositories = {
    accounts: postgresAccountsRepo(pool, authCache),
    apiKeys: postgresApiKeysRepo(pool, authCache),
    devices: postgresDevicesRepo(pool, authCache, deleteRollupsOfDevice),
    readings: postgresReadingsRepo(pool, authCache),
    rollups: await postgresRollupsRepo(pool),
    alerts: postgresAlertsRepo(pool, nodeKey),
    sessions: postgresSessionsRepo(pool),
    snapshots: postgresSnapshotsRepo(pool),
    /**
     * Commits by other processes (the admin CLI, another node), heard through LISTEN/NOTIFY
     * once watched (changeListener.ts); the auth cache is dropped first.
     */
    externalCommits: new ChangeListener(pool, poolNode(pool), () => authCache.invalidate()) satisfies ExternalChanges,
    /** The background jobs run on the node holding the leader lock (leadership.ts). */
    leadership: new PostgresLeadership(pool, nodeKey),
    /** Forgets the cached device and account look-ups (authCache.ts). */
    invalidateAuthCache: (): void => authCache.invalidate(),
    /** Changes whenever devices or accounts may have changed, here or elsewhere (authCache.ts). */
    authTablesGeneration: (): number => authCache.current(),
  };
  // Checked against the interface; the extras above stay visible to callers of this function.
  return repositories satisfies Repositories;
}

export type PostgresRepositories = Awaited<ReturnType<typeof createPostgresRepositories>>;
