/**
 * The composition root: the one place that builds the object graph of a process (storage,
 * then the domain services over it) from its settings. Transports (HTTP routes, MQTT hooks,
 * CLI commands) are handed `Services` and nothing below them; the storage handles go only
 * to the server's lifecycle and to tests.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { accountService } from './domain/accounts.js';
import { aggregateService } from './domain/aggregates.js';
import { alertEvaluator } from './domain/alerts/evaluator.js';
import { alertService } from './domain/alerts.js';
import { type ClusterParts, clusterService } from './domain/cluster.js';
import { deviceService } from './domain/devices.js';
import { DomainEvents } from './domain/events.js';
import { ingestPipeline } from './domain/ingest/pipeline.js';
import { keyService } from './domain/keys.js';
import { type LeaderJobsLog, leaderJobs } from './domain/leaderJobs.js';
import { periodicJob } from './domain/periodicJob.js';
import { RateLimiter, SharedRateLimiter } from './domain/rateLimit.js';
import { RetentionJob, type RetentionOptions } from './domain/retention.js';
import { rollupService } from './domain/rollups.js';
import { sessionService } from './domain/sessions.js';
import { snapshotService } from './domain/snapshots.js';
import { StorageStatus } from './domain/storageStatus.js';
import { telemetryService } from './domain/telemetry.js';
import type { LogLine } from './domain/throttledLog.js';
import { usageService } from './domain/usage.js';
import { createNotifier, type NotifySettings } from './notify/index.js';
import { type ArchiveChecks, type BackupProgress, createBackup, restoreBackup } from './storage/backup.js';

export type { BackupProgress, PostgresBackupProgress };

import type { Pool } from 'pg';
import type { StorageConfig } from './config.js';
import { DB_FILE, type Db, type OpenOptions, openDatabase } from './storage/db.js';
import { createRepositories, type SqliteRepositories } from './storage/index.js';
import { MIGRATIONS } from './storage/migrations.js';
import { createPostgresBackup, type PostgresBackupProgress, restorePostgresBackup } from './storage/postgres/archive.js';
import { postgresClusterSettings, postgresPeerChannel, postgresRateCounts } from './storage/postgres/cluster.js';
import { connectPostgres, poolNode } from './storage/postgres/connect.js';
import { createPostgresRepositories, type PostgresRepositories } from './storage/postgres/index.js';
import { migratePostgres, POSTGRES_MIGRATIONS } from './storage/postgres/migrations.js';
import { MAX_IN_FLIGHT, PostgresReadingWriter } from './storage/postgres/readingWriter.js';
import { postgresStorageProbes } from './storage/postgres/storageProbes.js';
import { ReadingWriter } from './storage/readingWriter.js';
import type { SharedRateCounts } from './storage/repositories.js';
import { type SnapshotFiles, snapshotFiles } from './storage/snapshotFiles.js';
import { storageProbes } from './storage/storageProbes.js';
import { type Clock, systemClock } from './time.js';
import { VERSION } from './version.js';

export interface ServiceOptions {
  clock?: Clock;
  onListenerError?: (err: unknown, event: string) => void;
  /** The data dir. Default: the database's folder. */
  dataDir?: string;
  /** Where snapshot files live (--snapshots-dir). Default: the data dir's snapshots/ folder. */
  snapshotsDir?: string;
  /** Alert action settings (the server passes --smtp-url/--smtp-from); admin commands send nothing. */
  notify?: NotifySettings;
  /** Where failed alert deliveries are reported. */
  logAlert?: (message: string, details: Record<string, unknown>) => void;
  /** The server's public base URL, for the device links in alert messages. */
  publicUrl?: () => string;
  /** Where a failed merge of the readings inbox is reported (the rows stay, retried later). */
  onInboxMergeError?: (err: unknown) => void;
  /** Where a failed pass of the rollup job is reported (the next pass redoes it). */
  onRollupError?: (err: unknown) => void;
  retention?: RetentionOptions;
  /** Free bytes below which new writes are refused (--min-free-disk); 0 or absent: never. */
  minFreeDiskBytes?: number;
  /** Where storage refusals and recoveries are logged (throttled). */
  storageLog?: { warn: LogLine; info: LogLine };
  /** Where a failure of PostgreSQL-only work is reported: talking to the other nodes, folding the usage counts. */
  onPostgresError?: (err: unknown, what: string) => void;
}

/**
 * What the composition holds below the services: for the server's lifecycle and for tests.
 * `backend` tells the two apart; `db` is SQLite's handle, absent on PostgreSQL.
 */
export type Storage = SqliteStorage | PostgresStorage;

/**
 * The version of the database's schema, and the newest this build knows: a database migrated
 * by a newer telemetryd (another node of a rolling upgrade, a downgrade) is above it.
 */
export interface SchemaVersions {
  version: number;
  known: number;
}

export interface SqliteStorage {
  backend: 'sqlite';
  db: Db;
  repos: SqliteRepositories;
  writer: ReadingWriter;
  schema: SchemaVersions;
}

interface PostgresStorage {
  backend: 'postgres';
  db?: undefined;
  pool: Pool;
  schema: SchemaVersions;
  repos: PostgresRepositories;
  writer: PostgresReadingWriter;
  /** What the nodes of a cluster share beyond the tables (storage/postgres/cluster.ts). */
  cluster: ClusterParts & { rateCounts: SharedRateCounts };
}

/** The SQLite storage of a composition, for code and tests that need SQLite's handle; throws on PostgreSQL. */
export function sqliteStorage(storage: Storage): SqliteStorage {
  if (storage.backend !== 'sqlite') throw new Error('this needs the SQLite backend');
  return storage;
}

/** What the services share with the storage below them, built first by composeServices. */
interface Shared {
  clock: Clock;
  events: DomainEvents;
  files: SnapshotFiles;
  storageStatus: StorageStatus;
}

function buildServices(storage: Storage, shared: Shared, options: ServiceOptions) {
  const { repos, writer } = storage;
  const { clock, events, files, storageStatus } = shared;
  const devices = deviceService(repos, events, clock);
  const accounts = accountService(repos, events, clock);
  // Started by the server only (like retention); admin commands and bulk loads use rebuild().
  const rollups = rollupService(repos, clock, { onError: options.onRollupError, committedReadings: () => writer.committed });
  const alertEvaluation = alertEvaluator({
    repos,
    events,
    accounts,
    notifier: createNotifier(options.notify ?? { smtpUrl: null, smtpFrom: 'telemetryd@localhost' }),
    log: options.logAlert,
    clock,
    publicUrl: options.publicUrl,
  });
  const snapshots = snapshotService(repos, devices, files, clock, storageStatus);
  const retention = new RetentionJob(repos, clock, snapshots, options.retention);
  // Deliveries a stopped node left pending (PostgreSQL), looked for every second by the leader.
  const adoptDeliveries = periodicJob(
    alertEvaluation.adoptAbandoned,
    options.logAlert && ((err) => options.logAlert!('adopting alert deliveries failed', { err })),
  );
  const adoptDeliveriesJob = {
    start: () => adoptDeliveries.start({ intervalMs: 1_000, firstRunDelayMs: 1_000 }),
    stop: adoptDeliveries.stop,
  };
  // Called synchronously as the jobs start, before the server has recorded a delivery of its
  // own: the repository reads the pending ones in that call.
  const adoptOnceAtStart = {
    start: () =>
      void alertEvaluation.adoptAbandoned().catch((err: unknown) => options.logAlert?.('adopting alert deliveries failed', { err })),
    stop: () => Promise.resolve(),
  };
  // The usage counts every batch appends (PostgreSQL), folded by the leader every second.
  const foldUsageCounts =
    storage.backend === 'postgres'
      ? periodicJob(storage.repos.readings.foldUsageCounts, (err) => options.onPostgresError?.(err, 'folding the usage counts'))
      : null;
  const foldUsageCountsJob = foldUsageCounts && {
    start: () => foldUsageCounts.start({ intervalMs: 1_000, firstRunDelayMs: 1_000 }),
    stop: foldUsageCounts.stop,
  };
  // Deleting a device deletes its snapshot files, in whichever process deletes it (server or
  // admin CLI); the rows go by ON DELETE CASCADE. Once as the deletion starts, so they are
  // gone at once, and again once the row is gone: an upload already under way (in this process
  // or another) may have written its file and inserted its row in between. An upload after
  // that fails on the foreign key and removes its own file (snapshots.ts).
  events.on('device.changed', ({ deviceId, change }) => {
    if (change === 'deleted') snapshots.removeDeviceFiles(deviceId);
  });
  events.on('device.removed', ({ deviceId }) => snapshots.removeDeviceFiles(deviceId));
  return {
    clock,
    events,
    accounts,
    sessions: sessionService(repos, accounts, clock),
    keys: keyService(repos, clock),
    devices,
    telemetry: telemetryService(repos, clock),
    rollups,
    aggregates: aggregateService(repos, clock, rollups, storageStatus),
    usage: usageService(repos, clock),
    alerts: alertService(repos, clock, events),
    alertEvaluation,
    rateLimiter: storage.backend === 'postgres' ? new SharedRateLimiter(clock, storage.cluster.rateCounts) : new RateLimiter(clock),
    cluster: clusterService(storage.backend === 'postgres' ? storage.cluster : null, events, options.onPostgresError ?? (() => {})),
    ingest: ingestPipeline({ devices, sink: writer, events, clock, evaluateAlerts: alertEvaluation.evaluate, gate: storageStatus }),
    snapshots,
    /** Whether storage takes writes (free disk space, failed commits), for ingest, /healthz and /metrics. */
    storageStatus,
    retention,
    /**
     * The jobs that run once per database, on the process that leads (the server starts
     * them; on SQLite it always leads): retention, the silence checks every
     * `silenceCheckMs`, the rollup pass, and on PostgreSQL the adoption of deliveries other
     * nodes left and the usage counts' fold.
     */
    backgroundJobs: (silenceCheckMs?: number, log?: Partial<LeaderJobsLog>) =>
      leaderJobs(
        repos.leadership,
        [
          retention,
          {
            start: () => alertEvaluation.startSilenceChecks(silenceCheckMs),
            stop: () => alertEvaluation.stopSilenceChecks(),
          },
          rollups,
          // Where other processes send deliveries too, every second; on SQLite once, as the
          // server starts, for what a crash left pending.
          repos.leadership.soleWriter ? adoptOnceAtStart : adoptDeliveriesJob,
          ...(foldUsageCountsJob ? [foldUsageCountsJob] : []),
        ],
        log,
      ),
    backup: {
      /** A consistent archive of the database and the snapshot files, taken while serving. */
      create: (file: string, onProgress?: (p: BackupProgress) => void, checks: ArchiveChecks = {}) =>
        storage.backend === 'sqlite'
          ? createBackup(storage.db, files.root, file, VERSION, onProgress, checks)
          : createPostgresBackup(storage.pool, files.root, file, VERSION, undefined, checks),
    },
    /**
     * Emits 'external.change' once another process (an admin command) has committed, checked
     * every `intervalMs`; returns the function that stops watching.
     */
    watchExternalCommits: (intervalMs: number, onError?: (err: unknown) => void) =>
      repos.externalCommits.watch(() => events.emit('external.change', {}), intervalMs, onError),
  };
}

export type Services = ReturnType<typeof buildServices>;

export interface Composition<S extends Storage = Storage> {
  services: Services;
  storage: S;
  /**
   * Flushes the writer and closes the database (PostgreSQL: the pool, after the writer's last
   * batch); the caller stops the services' jobs first. On SQLite all of it is done before this
   * returns.
   */
  close(): Promise<void>;
}

/** Builds the services over an open database. */
export function composeServices(db: Db, options: ServiceOptions = {}): Composition<SqliteStorage> {
  const repos = createRepositories(db);
  const clock = options.clock ?? systemClock;
  const events = new DomainEvents(options.onListenerError);
  const dataDir = options.dataDir ?? path.dirname(db.name);
  const files = snapshotFiles(path.resolve(options.snapshotsDir ?? path.join(dataDir, 'snapshots')));
  const writer = new ReadingWriter(repos.readings);
  // The status watches free space and shows the writer's queue; the writer reports every
  // commit, and every failed merge of its inbox, to it.
  const storageStatus = new StorageStatus({
    dirs: { database: dataDir, snapshots: files.root },
    minFreeBytes: options.minFreeDiskBytes ?? 0,
    probes: storageProbes(db),
    writerQueue: () => writer,
    events,
    log: options.storageLog,
  });
  const onInboxMergeError = options.onInboxMergeError ?? (() => {});
  writer.reportTo(storageStatus, (err) => {
    if (!storageStatus.backgroundWriteFailed(err, 'merging the readings inbox')) onInboxMergeError(err);
  });
  const schema = { version: db.pragma('user_version', { simple: true }) as number, known: MIGRATIONS.at(-1)!.version };
  const storage: SqliteStorage = { backend: 'sqlite', db, repos, writer, schema };
  const services = buildServices(storage, { clock, events, files, storageStatus }, options);
  return {
    services,
    storage,
    close() {
      if (db.open) {
        writer.close();
        db.close();
      }
      return Promise.resolve();
    },
  };
}

/**
 * Builds the services over a PostgreSQL database: connects (a wrong URL, an unreachable
 * server, a wrong password: one line, DatabaseUrlError), migrates, and builds the same
 * services as on SQLite over the PostgreSQL repositories and writer.
 */
async function composePostgres(
  databaseUrl: string,
  options: ServiceOptions & { snapshotsDir: string },
): Promise<Composition<PostgresStorage>> {
  const pool = await connectPostgres(databaseUrl);
  let writerPool: Pool | null = null;
  try {
    const schema = { version: await migratePostgres(pool), known: POSTGRES_MIGRATIONS.at(-1)!.version };
    // The writer's own connections, one per batch in flight, plan its statement once (genericPlans).
    writerPool = await connectPostgres(databaseUrl, {
      max: MAX_IN_FLIGHT,
      node: poolNode(pool),
      applicationName: 'telemetryd writer',
      genericPlans: true,
    });
    const repos = await createPostgresRepositories(pool);
    const clock = options.clock ?? systemClock;
    const events = new DomainEvents(options.onListenerError);
    const files = snapshotFiles(path.resolve(options.snapshotsDir));
    // Late readings mark their hour for the rollups; each commit feeds the rollups' live minutes.
    const writer = new PostgresReadingWriter(
      writerPool,
      databaseUrl,
      undefined,
      repos.rollups.lateBefore,
      repos.readings.committed,
      repos.authTablesGeneration,
    );
    const storageStatus = new StorageStatus({
      // The database's disk is its server's: only the snapshot files' is watched here.
      dirs: { database: null, snapshots: files.root },
      minFreeBytes: options.minFreeDiskBytes ?? 0,
      probes: postgresStorageProbes(pool),
      writerQueue: () => writer,
      events,
      log: options.storageLog,
    });
    writer.reportTo(storageStatus);
    const storage: PostgresStorage = {
      backend: 'postgres',
      pool,
      repos,
      writer,
      schema,
      cluster: {
        peers: postgresPeerChannel(pool, poolNode(pool), repos.externalCommits),
        settings: postgresClusterSettings(pool),
        rateCounts: postgresRateCounts(pool),
      },
    };
    const services = buildServices(storage, { clock, events, files, storageStatus }, options);
    let closing: Promise<void> | null = null;
    return {
      services,
      storage,
      close() {
        closing ??= (async () => {
          await writer.close();
          await repos.externalCommits.close();
          // Last: deliveries this node leaves pending are adopted by another once this ends.
          await repos.leadership.close();
          await writerPool?.end();
          await pool.end();
        })();
        return closing;
      },
    };
  } catch (err) {
    await writerPool?.end().catch(() => {});
    await pool.end().catch(() => {});
    throw err;
  }
}

/**
 * Opens the storage the resolved configuration names and builds the services over it:
 * PostgreSQL with a database URL, else SQLite in the data dir (created and migrated).
 * Async for both, so a SQLite database that fails to open rejects like a PostgreSQL one
 * rather than throwing before the caller holds a promise.
 */
export async function openStorage(
  config: StorageConfig & Partial<OpenOptions>,
  options: Omit<ServiceOptions, 'dataDir' | 'snapshotsDir'> = {},
): Promise<Composition> {
  if (config.databaseUrl !== null) return composePostgres(config.databaseUrl, { ...options, snapshotsDir: config.snapshotsDir });
  return openDataDir(config.dataDir, { ...options, snapshotsDir: config.snapshotsDir, durability: config.durability });
}

/** Opens (creating and migrating) the database of a data dir and builds the services over it. */
export function openDataDir(dataDir: string, options: ServiceOptions & OpenOptions = {}): Composition<SqliteStorage> {
  return composeServices(openDatabase(dataDir, { durability: options.durability }), { ...options, dataDir });
}

/**
 * What to say when the database's schema is newer than this build's, or null: this build may
 * miss what the newer one changed (a table it no longer fills, a trigger that moved).
 */
export function newerSchemaWarning({ version, known }: SchemaVersions): string | null {
  return version > known
    ? `the database's schema is at version ${version}, newer than this telemetryd knows (${known}): a newer telemetryd has used it; run that version`
    : null;
}

/** True when the data dir holds a database (a backup must never create an empty one). */
export const hasDatabase = (dataDir: string) => existsSync(path.join(dataDir, DB_FILE));

/** Restores an archive into a data dir, which no server may be using. */
export const restoreDataDir = restoreBackup;

/**
 * Writes the archive of a PostgreSQL database (the SQLite backend's format) while it keeps
 * taking writes. A database without telemetryd's schema is refused rather than given one.
 */
export async function backupPostgres(
  databaseUrl: string,
  snapshotsDir: string,
  file: string,
  onProgress?: (p: PostgresBackupProgress) => void,
  checks: ArchiveChecks = {},
): Promise<{ file: string; bytes: number }> {
  const pool = await connectPostgres(databaseUrl, { max: 1 });
  try {
    const { rows } = await pool.query<{ db: string; schema: boolean }>(
      "SELECT current_database() AS db, to_regclass('schema_migrations') IS NOT NULL AS schema",
    );
    if (!rows[0]!.schema) throw new Error(`no telemetryd data in the PostgreSQL database "${rows[0]!.db}"`);
    await migratePostgres(pool);
    return await createPostgresBackup(pool, snapshotsDir, file, VERSION, onProgress, checks);
  } finally {
    await pool.end();
  }
}

/** Restores an archive into a PostgreSQL database (creating its schema if needed). */
export async function restorePostgres(databaseUrl: string, file: string, opts: { force: boolean; snapshotsDir: string }) {
  const pool = await connectPostgres(databaseUrl, { max: 1 });
  try {
    return await restorePostgresBackup(pool, file, opts);
  } finally {
    await pool.end();
  }
}
