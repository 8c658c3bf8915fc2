import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import Database from 'better-sqlite3';
import { inject } from 'vitest';
import { type Composition, openStorage, type Storage, sqliteStorage } from '../../src/composition.js';
import { buildStorageConfig } from '../../src/config.js';
import type { StoredReading } from '../../src/domain/types.js';
import { DB_FILE, type Db } from '../../src/storage/db.js';
import type { Repositories } from '../../src/storage/repositories.js';
import { type PostgresServerInfo, psql } from './postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The run's throwaway PostgreSQL server (globalSetup.ts), null on SQLite. */
    postgres: PostgresServerInfo | null;
  }
}

/** The variable that selects the backend of a test run (`npm run test:postgres` sets it). */
const BACKEND_VARIABLE = 'TELEMETRYD_TEST_BACKEND';

/**
 * Whether this run's servers and CLI commands use PostgreSQL. Tests about SQLite itself
 * (its files, pragmas, inbox, faults of its disk) skip with `describe.skipIf(onPostgres)`.
 */
export const onPostgres = process.env[BACKEND_VARIABLE] === 'postgres';

function postgresInfo(): PostgresServerInfo {
  const info = inject('postgres');
  if (!info) throw new Error(`${BACKEND_VARIABLE}=postgres but globalSetup provided no PostgreSQL server`);
  return info;
}

/**
 * One database per data dir, for the whole test file: a server restarted on the same data
 * dir, and a CLI command run against it, find the same data, as they would in the SQLite file.
 */
const databases = new Map<string, string>();

/**
 * The database URL standing for a data dir on PostgreSQL (a new empty database the first
 * time), null on SQLite. Synchronous, so the synchronous CLI helper can use it.
 */
export function databaseUrlFor(dataDir: string): string | null {
  if (!onPostgres) return null;
  const key = path.resolve(dataDir);
  let url = databases.get(key);
  if (!url) {
    const info = postgresInfo();
    const name = `test_${randomBytes(6).toString('hex')}`;
    execFileSync(
      path.join(info.binDir, 'psql'),
      [
        '-X',
        '-q',
        '-v',
        'ON_ERROR_STOP=1',
        '-h',
        info.dir,
        '-p',
        String(info.port),
        '-U',
        info.user,
        '-d',
        'postgres',
        '-c',
        `CREATE DATABASE ${name}`,
      ],
      { cwd: info.dir, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    url = `postgres://${info.user}:${info.password}@127.0.0.1:${info.port}/${name}`;
    databases.set(key, url);
  }
  return url;
}

/** Environment for a child process (CLI command, `serve`) working on `dataDir`: its database on PostgreSQL. */
export function backendEnv(dataDir: string | undefined): Record<string, string> {
  const url = dataDir === undefined ? null : databaseUrlFor(dataDir);
  return url ? { TELEMETRYD_DATABASE_URL: url } : {};
}

/** The SQLite handle of a server, for the tests about SQLite itself (skipped on PostgreSQL). */
export function sqliteDb(storage: Storage): Db {
  return sqliteStorage(storage).db;
}

/**
 * Every stored reading of a device, oldest first (time, then seq), through the storage
 * interface: what is committed, on either backend.
 */
export async function storedRows(storage: { repos: Pick<Repositories, 'readings'> }, deviceSeq: number): Promise<StoredReading[]> {
  return (await storage.repos.readings.history(deviceSeq, 0, 1_000_000_000)).reverse();
}

/** How many readings are stored, over every device, through the storage interface. */
export async function countAllReadings(storage: { repos: Pick<Repositories, 'readings' | 'devices'> }): Promise<number> {
  let n = 0;
  for (const { seq } of await storage.repos.devices.allSeqs()) n += (await storedRows(storage, seq)).length;
  return n;
}

/** SQL run as the superuser in the database behind a PostgreSQL database URL (for fault injection). */
async function psqlIn(databaseUrl: string, sql: string): Promise<string> {
  return psql(postgresInfo(), new URL(databaseUrl).pathname.slice(1), sql);
}

/**
 * Makes the database refuse every insert of one device's readings, as a full disk or an
 * I/O error would, until the returned function is called: a trigger raising an error, on
 * the server's own SQLite connection (a temp trigger on the table new readings go to) or
 * on PostgreSQL's readings table.
 */
export async function failReadingInserts(
  server: { storage: Storage; config: { databaseUrl: string | null } },
  deviceSeq: number,
): Promise<() => Promise<void>> {
  const name = `fail_readings_${deviceSeq}`;
  const { databaseUrl } = server.config;
  if (databaseUrl) {
    await psqlIn(
      databaseUrl,
      `CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'simulated I/O failure'; END $$;
       CREATE TRIGGER ${name} BEFORE INSERT ON readings FOR EACH ROW WHEN (NEW.device_seq = ${deviceSeq}) EXECUTE FUNCTION ${name}();`,
    );
    return async () => {
      await psqlIn(databaseUrl, `DROP TRIGGER ${name} ON readings; DROP FUNCTION ${name}();`);
    };
  }
  const db = sqliteDb(server.storage);
  db.exec(
    `CREATE TEMP TRIGGER ${name} BEFORE INSERT ON readings_inbox WHEN NEW.device_seq = ${deviceSeq} BEGIN SELECT RAISE(ABORT, 'simulated I/O failure'); END`,
  );
  return async () => {
    db.exec(`DROP TRIGGER temp.${name}`);
  };
}

/** How many snapshot rows are stored, over every device, through the storage interface. */
export async function countAllSnapshots(storage: { repos: Pick<Repositories, 'snapshots' | 'devices'> }): Promise<number> {
  let n = 0;
  for (const { seq } of await storage.repos.devices.allSeqs()) n += await storage.repos.snapshots.countSince(seq, 0);
  return n;
}

/**
 * Makes the database of a data dir refuse every insert of readings, for a server running in
 * another process, until the returned function is called: a trigger created from a
 * connection of the test's own (SQLite re-prepares the server's statements on the schema
 * change), on the table new readings go to.
 */
export async function failReadingInsertsIn(dataDir: string): Promise<() => Promise<void>> {
  const url = databaseUrlFor(dataDir);
  if (url) {
    await psqlIn(
      url,
      `CREATE FUNCTION fail_readings() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'simulated I/O failure'; END $$;
       CREATE TRIGGER fail_readings BEFORE INSERT ON readings FOR EACH ROW EXECUTE FUNCTION fail_readings();`,
    );
    return async () => {
      await psqlIn(url, 'DROP TRIGGER fail_readings ON readings; DROP FUNCTION fail_readings();');
    };
  }
  const other = new Database(path.join(dataDir, DB_FILE));
  other.pragma('busy_timeout = 10000');
  other.exec("CREATE TRIGGER fail_readings BEFORE INSERT ON readings_inbox BEGIN SELECT RAISE(ABORT, 'simulated I/O failure'); END;");
  return async () => {
    other.exec('DROP TRIGGER fail_readings');
    other.close();
  };
}

/**
 * The services over a data dir's database from this process, beside a server using it: what
 * the admin CLI (another process, another connection) does, without a process start.
 */
export function openDataDirStorage(dataDir: string): Promise<Composition> {
  return openStorage(buildStorageConfig({ 'data-dir': dataDir, 'database-url': databaseUrlFor(dataDir) }));
}
