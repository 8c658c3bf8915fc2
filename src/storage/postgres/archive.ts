import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Pool, PoolClient } from 'pg';
import { makeDirs } from '../../fsDirs.js';
import { type ArchiveChecks, placeSnapshots, unpackArchive, writeArchive } from '../backup.js';
import { type Db, openDatabase } from '../db.js';
import { migrate } from '../migrations.js';
import { loadNativeBinding } from '../native.js';
import { giveToOwnerOf } from '../ownership.js';
import { NODE_LOCK_CLASS } from './leadership.js';
import { migratePostgres, READING_ID_BLOCK, readingPartitions } from './migrations.js';

/**
 * Backup and restore of the PostgreSQL backend (docs/postgres.md, "Backup and restore"), in
 * the archive format of the SQLite backend (src/storage/backup.ts): a SQLite database file is
 * the interchange format, so one archive restores into either backend.
 *
 * Columns are read from the two schemas, which hold the same tables and columns
 * (test/postgres/migrations.test.ts), so a new column travels by itself. A new table needs a
 * line in TABLES (or special handling like readings); until it has one, both directions refuse
 * to run rather than leave it out of an archive.
 */

/** Rows per FETCH and per SQLite transaction on backup; rows per INSERT … unnest on restore. */
const BATCH_ROWS = 5_000;

/**
 * The tables copied as they are, parents before children (foreign keys), with their key
 * order, and where a table's rows are not simply its own, what to read them from.
 */
const TABLES: { name: string; order: string; from?: string }[] = [
  { name: 'accounts', order: 'seq' },
  { name: 'api_keys', order: 'seq' },
  { name: 'devices', order: 'seq' },
  { name: 'alerts', order: 'seq' },
  { name: 'alert_events', order: 'seq' },
  { name: 'snapshots', order: 'seq' },
  { name: 'sessions', order: 'id_hash' },
  { name: 'rollups', order: 'device_seq, level, bucket' },
  { name: 'rollup_state', order: 'rolled_until' },
  { name: 'rollup_dirty', order: 'device_seq, hour' },
  // Copied on backup, with the counts not folded yet; rebuilt from the readings on restore (below).
  {
    name: 'reading_counts',
    order: 'account_seq, minute',
    from: `(SELECT account_seq, minute, sum(n)::bigint AS n
            FROM (SELECT account_seq, minute, n FROM reading_counts UNION ALL SELECT account_seq, minute, n FROM reading_count_deltas) c
            GROUP BY 1, 2 HAVING sum(n) > 0) AS reading_counts`,
  },
];

/**
 * PostgreSQL-only tables, never archived: a cluster's coordination (migration 4), the
 * usage counts not folded yet (migration 9), which the backup adds to reading_counts, and
 * the devices retention sweeps again after their deletion (migration 12).
 */
const POSTGRES_ONLY_TABLES = ['delivery_owners', 'rollup_late', 'reading_count_deltas', 'removed_devices'];

/**
 * SQLite tables with their own handling: readings sit in two SQLite tables and in one
 * partitioned PostgreSQL table; reading_seq is a one-row table on SQLite and a sequence on
 * PostgreSQL; device_seq is SQLite's counter of device seqs (PostgreSQL's is the identity of
 * devices.seq), not carried: SQLite takes the next seq past the rows copied in.
 */
const SPECIAL_TABLES = ['readings_by_device', 'readings_inbox', 'reading_seq', 'device_seq'];

/** Refuses a SQLite schema with a table this file does not know how to carry. */
function checkKnownTables(sqlite: Db): void {
  const known = new Set([...TABLES.map((t) => t.name), ...SPECIAL_TABLES]);
  const tables = sqlite
    .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")
    .pluck()
    .all() as string[];
  const unknown = tables.filter((t) => !known.has(t));
  if (unknown.length > 0) throw new Error(`no copy rule between SQLite and PostgreSQL for table ${unknown.join(', ')}`);
}

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** The sequence behind an identity column, as a name to put into SQL. */
async function identitySequenceOf(client: PoolClient, table: string, column: string): Promise<string> {
  const { rows } = await client.query<{ name: string }>('SELECT pg_get_serial_sequence($1, $2) AS name', [quote(table), column]);
  return rows[0]!.name;
}

/**
 * The columns of a table on both sides, with PostgreSQL's type of each (for the array casts
 * and the booleans, which SQLite stores as 0/1). The two schemas must agree column for column.
 */
async function columnsOf(client: PoolClient, sqlite: Db, pgTable: string, sqliteTable: string): Promise<{ name: string; type: string }[]> {
  const { rows } = await client.query<{ name: string; type: string }>(
    `SELECT column_name AS name, data_type AS type FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`,
    [pgTable],
  );
  const onSqlite = (sqlite.prepare(`SELECT name FROM pragma_table_info(?)`).pluck().all(sqliteTable) as string[]).sort();
  const onPostgres = rows.map((r) => r.name).sort();
  if (onSqlite.join() !== onPostgres.join()) {
    throw new Error(
      `table ${pgTable} differs between the SQLite and PostgreSQL schemas: (${onSqlite.join(', ')}) vs (${onPostgres.join(', ')})`,
    );
  }
  return rows;
}

export interface PostgresBackupProgress {
  table: string;
  /** Rows of that table copied so far. */
  rows: number;
}

/**
 * Writes an archive of a PostgreSQL database to `file`. Every table is read inside one
 * REPEATABLE READ READ ONLY transaction, so the archive is one consistent moment while ingest
 * goes on (readings and their usage counts, which the writer commits together, agree), and
 * rows stream through a cursor into SQLite transactions of BATCH_ROWS rows: memory stays flat
 * however large the database.
 */
export async function createPostgresBackup(
  pool: Pool,
  snapshotsDir: string,
  file: string,
  version: string,
  onProgress?: (p: PostgresBackupProgress) => void,
  checks: ArchiveChecks = {},
): Promise<{ file: string; bytes: number }> {
  return writeArchive(file, { snapshotsDir, version, source: 'postgres', ...checks }, async (staging) => {
    const sqlite = openDatabase(staging);
    let client: PoolClient | null = null;
    let broken: Error | undefined;
    try {
      checkKnownTables(sqlite);
      // A staging copy: the archive is what has to be whole, and it is renamed into place
      // only once complete.
      sqlite.pragma('synchronous = OFF');
      client = await pool.connect();
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      for (const table of TABLES) await copyOut(client, sqlite, table.name, table.name, table.order, onProgress, table.from);
      // Key order of the clustered table: SQLite appends each page instead of splitting pages.
      await copyOut(client, sqlite, 'readings', 'readings_by_device', 'device_seq, time, seq', onProgress);
      // A sequence is outside transactions: this is its value now, at least every seq the
      // snapshot holds, which is what an id never issued twice needs. Its last value starts
      // a block of ids (migration 6), any of which may have been issued.
      const { rows } = await client.query<{ last_value: number; is_called: boolean }>('SELECT last_value, is_called FROM reading_seq');
      const last = rows[0]!.is_called ? rows[0]!.last_value + READING_ID_BLOCK - 1 : rows[0]!.last_value - 1;
      sqlite.prepare('UPDATE reading_seq SET last = ?').run(last);
      // Device seqs are never issued twice either (SQLite migration 10): the last the
      // identity issued, deleted devices' included.
      const devices = await client.query<{ last_value: number; is_called: boolean }>(
        `SELECT last_value, is_called FROM ${await identitySequenceOf(client, 'devices', 'seq')}`,
      );
      const lastDevice = devices.rows[0]!.is_called ? devices.rows[0]!.last_value : devices.rows[0]!.last_value - 1;
      sqlite.prepare('UPDATE device_seq SET last = max(last, ?)').run(lastDevice);
      await client.query('COMMIT');
    } catch (err) {
      broken = err as Error;
      await client?.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      // A connection that failed mid-transaction is closed rather than returned to the pool.
      client?.release(broken);
      sqlite.close();
    }
  });
}

async function copyOut(
  client: PoolClient,
  sqlite: Db,
  pgTable: string,
  sqliteTable: string,
  order: string,
  onProgress?: (p: PostgresBackupProgress) => void,
  from = quote(pgTable),
): Promise<void> {
  const columns = await columnsOf(client, sqlite, pgTable, sqliteTable);
  const list = columns.map((c) => quote(c.name)).join(', ');
  const booleans = columns.flatMap((c, i) => (c.type === 'boolean' ? [i] : []));
  // One-row tables (rollup_state) start with the migration's row: the copy replaces it.
  sqlite.prepare(`DELETE FROM ${quote(sqliteTable)}`).run();
  const insert = sqlite.prepare(`INSERT INTO ${quote(sqliteTable)} (${list}) VALUES (${columns.map(() => '?').join(', ')})`);
  const writeBatch = sqlite.transaction((rows: unknown[][]) => {
    for (const row of rows) {
      for (const i of booleans) if (row[i] !== null) row[i] = row[i] ? 1 : 0;
      insert.run(...row);
    }
  });
  await client.query(`DECLARE archive_rows NO SCROLL CURSOR FOR SELECT ${list} FROM ${from} ORDER BY ${order}`);
  let copied = 0;
  onProgress?.({ table: pgTable, rows: 0 });
  for (;;) {
    const { rows } = await client.query<unknown[]>({ text: `FETCH ${BATCH_ROWS} FROM archive_rows`, rowMode: 'array' });
    if (rows.length === 0) break;
    writeBatch(rows);
    copied += rows.length;
    onProgress?.({ table: pgTable, rows: copied });
  }
  await client.query('CLOSE archive_rows');
}

/** Week starts (Monday 00:00 UTC, ms) of every reading in the archive, by floor division. */
const WEEKS_SQL = `
  SELECT DISTINCT time - (((time - 345600000) % 604800000) + 604800000) % 604800000 FROM readings`;

/**
 * Loads an archive into a PostgreSQL database (migrated first). Refuses a database that
 * already has accounts unless `force`; then everything the archive's tables hold is replaced
 * in one transaction, so a failure (a bad row, a lost connection) leaves the database as it
 * was. The snapshot files go to `snapshotsDir` once the transaction has committed.
 */
export async function restorePostgresBackup(
  pool: Pool,
  file: string,
  opts: { force: boolean; snapshotsDir: string },
): Promise<{ file: string; snapshots_dir: string; readings: number }> {
  const source = path.resolve(file);
  if (!existsSync(source)) throw new Error(`no backup file ${source}`);
  await migratePostgres(pool);
  const { rows: state } = await pool.query<{ db: string; has_accounts: boolean }>(
    'SELECT current_database() AS db, EXISTS (SELECT 1 FROM accounts) AS has_accounts',
  );
  const { db: database, has_accounts: hasAccounts } = state[0]!;
  // Every serving node holds its node lock (leadership.ts) while it runs: the tables would be
  // replaced under the rows it caches and the batches it writes, as SQLite's in-use check
  // refuses for a data dir.
  const { rows: nodes } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks
     WHERE locktype = 'advisory' AND classid::bigint = $1 AND objsubid = 2 AND granted
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [NODE_LOCK_CLASS],
  );
  const serving = nodes[0]!.n;
  if (serving > 0)
    throw new Error(
      `the PostgreSQL database "${database}" is in use by ${serving === 1 ? 'a running server' : `${serving} running servers`}; stop ${serving === 1 ? 'it' : 'them'} first`,
    );
  if (hasAccounts && !opts.force)
    throw new Error(`the PostgreSQL database "${database}" already holds accounts; pass --force to replace them`);

  const snapshotsDir = path.resolve(opts.snapshotsDir);
  // Staged beside the snapshots dir, so the files are moved into place by a rename.
  const parent = path.dirname(snapshotsDir);
  const madeParent = !existsSync(parent);
  makeDirs(parent, 0o700);
  const staging = mkdtempSync(path.join(parent, '.restore-'));
  try {
    const unpacked = await unpackArchive(source, staging, parent);
    const sqlite = new Database(unpacked.dbFile, { nativeBinding: loadNativeBinding(parent) } as Database.Options);
    try {
      // An archive of an older version is brought to this version's schema first, as the
      // SQLite backend does when it opens a restored data dir.
      migrate(sqlite);
      checkKnownTables(sqlite);
      await loadArchive(pool, sqlite);
    } finally {
      sqlite.close();
    }
    placeSnapshots(unpacked.snapshots, snapshotsDir);
    // Run as root beside the servers' files: they must be able to read what was restored.
    if (!madeParent) giveToOwnerOf(parent, [snapshotsDir]);
    // Fresh statistics: the planner would otherwise take the loaded tables for empty.
    await pool.query('ANALYZE');
    return { file: source, snapshots_dir: snapshotsDir, readings: unpacked.readings };
  } finally {
    rmSync(staging, { recursive: true, force: true });
    // Made only to stage in: an archive without snapshots leaves no empty data dir behind.
    if (madeParent && readdirSync(parent).length === 0) rmSync(parent, { recursive: true, force: true });
  }
}

async function loadArchive(pool: Pool, sqlite: Db): Promise<void> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    // Replaces whatever the tables hold: accounts with --force, and in a database without
    // accounts whatever else is there (rollup_state's first row, at least).
    // The PostgreSQL-only tables (not in an archive) go too: the pending deliveries of the
    // events being replaced, the late-reading mark (set again below) and the counts of the
    // readings being replaced.
    await client.query(`TRUNCATE ${[...TABLES.map((t) => t.name), 'readings', ...POSTGRES_ONLY_TABLES].map(quote).join(', ')}`);
    const weeks = sqlite.prepare(WEEKS_SQL).pluck().all() as number[];
    if (weeks.length > 0) await readingPartitions(client, weeks);
    for (const table of TABLES) {
      if (table.name !== 'reading_counts') await copyIn(client, sqlite, table.name, table.name);
    }
    await copyIn(client, sqlite, 'readings', 'readings_by_device');
    await copyIn(client, sqlite, 'readings', 'readings_inbox');
    await client.query('INSERT INTO rollup_late (late_before) SELECT coalesce(max(rolled_until), 0) FROM rollup_state');

    const { rows: identities } = await client.query<{ table_name: string; column_name: string }>(
      "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() AND is_identity = 'YES'",
    );
    for (const { table_name: t, column_name: c } of identities) {
      await client.query(`SELECT setval(pg_get_serial_sequence($1, $2), coalesce(max(${quote(c)}), 0) + 1, false) FROM ${quote(t)}`, [
        quote(t),
        c,
      ]);
    }
    // Nor a device seq the archive's SQLite issued (migration 10), deleted devices' included.
    const lastDevice = sqlite.prepare('SELECT last FROM device_seq').pluck().get() as number;
    await client.query(`SELECT setval($1, greatest($2::bigint + 1, (SELECT coalesce(max(seq), 0) + 1 FROM devices)), false)`, [
      await identitySequenceOf(client, 'devices', 'seq'),
      lastDevice,
    ]);
    // The archive's last issued reading id (never below a stored one): the next is past it.
    const last = sqlite
      .prepare('SELECT max((SELECT last FROM reading_seq), coalesce((SELECT max(seq) FROM readings), 0))')
      .pluck()
      .get() as number;
    await client.query('SELECT setval($1, $2, false)', ['reading_seq', last + 1]);
    await client.query(`
      INSERT INTO reading_counts (account_seq, minute, n)
      SELECT d.account_seq, r.time / 60000, count(*) FROM readings r JOIN devices d ON d.seq = r.device_seq GROUP BY 1, 2`);
    await client.query('COMMIT');
  } catch (err) {
    broken = err as Error;
    await client.query('ROLLBACK').catch(() => {});
    throw new Error(`restore rolled back, the database is as it was: ${(err as Error).message}`, { cause: err });
  } finally {
    client.release(broken);
  }
}

/** Inserts a SQLite table's rows, BATCH_ROWS per statement: one array per column, unnest'ed. */
async function copyIn(client: PoolClient, sqlite: Db, pgTable: string, sqliteTable: string): Promise<void> {
  const columns = await columnsOf(client, sqlite, pgTable, sqliteTable);
  const list = columns.map((c) => quote(c.name)).join(', ');
  const insert = `INSERT INTO ${quote(pgTable)} (${list}) SELECT * FROM unnest(${columns.map((c, i) => `$${i + 1}::${c.type}[]`).join(', ')})`;
  const isBoolean = columns.map((c) => c.type === 'boolean');
  let batch: unknown[][] = columns.map(() => []);
  let size = 0;
  const flush = async () => {
    if (size === 0) return;
    try {
      await client.query(insert, batch);
    } catch (err) {
      throw new Error(`${sqliteTable}: ${(err as Error).message}`, { cause: err });
    }
    batch = columns.map(() => []);
    size = 0;
  };
  // The iterator stays open across the awaits below: nothing else uses this SQLite connection meanwhile.
  const rows = sqlite
    .prepare(`SELECT ${list} FROM ${quote(sqliteTable)}`)
    .raw()
    .iterate() as IterableIterator<unknown[]>;
  for (const row of rows) {
    for (let i = 0; i < row.length; i++) batch[i]!.push(isBoolean[i] && row[i] !== null ? row[i] !== 0 : row[i]);
    if (++size === BATCH_ROWS) await flush();
  }
  await flush();
}
