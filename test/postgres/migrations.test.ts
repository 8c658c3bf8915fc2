import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/storage/db.js';
import { connectPostgres } from '../../src/storage/postgres/connect.js';
import { migratePostgres, POSTGRES_MIGRATIONS, partitionWeek, readingPartitions } from '../../src/storage/postgres/migrations.js';
import { runCliAsync } from '../helpers/cli.js';
import { createDatabase, type PostgresServer, psql, startPostgres } from '../helpers/postgres.js';
import { startTestServer } from '../helpers/server.js';

const LATEST = POSTGRES_MIGRATIONS.at(-1)!.version;
const DAY_MS = 86_400_000;

describe('PostgreSQL schema and migrations', () => {
  let pg: PostgresServer;
  const pools: Pool[] = [];
  const pool = async (url: string) => {
    const p = await connectPostgres(url, { max: 2 });
    pools.push(p);
    return p;
  };

  beforeAll(async () => {
    pg = await startPostgres();
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await pg?.stop();
  });

  it('is created once when several processes migrate a new database together', async () => {
    const url = await createDatabase(pg);
    const all = await Promise.all(Array.from({ length: 6 }, () => pool(url)));
    expect(await Promise.all(all.map((p) => migratePostgres(p)))).toEqual(Array(6).fill(LATEST));
    const { rows } = await all[0]!.query('SELECT version, name FROM schema_migrations ORDER BY version');
    expect(rows).toEqual(POSTGRES_MIGRATIONS.map((m) => ({ version: m.version, name: m.name })));
    const tables = await all[0]!.query(
      "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE 'readings\\_%' ORDER BY 1",
    );
    expect(tables.rows.map((r) => r.tablename)).toEqual([
      'accounts',
      'alert_events',
      'alerts',
      'api_keys',
      // Cluster-only (migration 5): shared settings and cross-node rate limit counts; one
      // SQLite process keeps both in memory or in its data dir, and no archive carries them.
      'cluster_settings',
      // Cluster only: which node sends an event's pending deliveries (migration 4).
      'delivery_owners',
      'devices',
      'rate_limit_counts',
      'reading_count_deltas',
      'reading_counts',
      'readings',
      // PostgreSQL only: devices deleted lately, swept again by retention (migration 12).
      'removed_devices',
      'rollup_dirty',
      // Cluster only: the late-reading mark every node's writer reads (migration 4).
      'rollup_late',
      'rollup_state',
      'rollups',
      'schema_migrations',
      'sessions',
      'snapshots',
    ]);
  });

  it('has every table and column of the SQLite schema, so an archive moves table by table', async () => {
    const p = await pool(await createDatabase(pg));
    await migratePostgres(p);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'tlm-pg-parity-'));
    const sqlite = openDatabase(dir);
    try {
      // SQLite splits readings into an inbox and a clustered table and keeps its sequences of
      // reading and device seqs in tables; PostgreSQL has one partitioned table, a sequence and
      // an identity column.
      const local = (
        sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").pluck().all() as string[]
      )
        .filter((t) => !['readings_inbox', 'readings_by_device', 'reading_seq', 'device_seq'].includes(t))
        .concat('readings');
      for (const table of local) {
        const columns = (
          sqlite
            .prepare(`SELECT name FROM pragma_table_info('${table === 'readings' ? 'readings_by_device' : table}')`)
            .pluck()
            .all() as string[]
        ).sort();
        const { rows } = await p.query<{ column_name: string }>(
          "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 ORDER BY column_name",
          [table],
        );
        expect({ table, columns: rows.map((r) => r.column_name) }).toEqual({ table, columns });
      }
    } finally {
      sqlite.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('does nothing when run again', async () => {
    const url = await createDatabase(pg);
    const p = await pool(url);
    await migratePostgres(p);
    const before = (await p.query('SELECT version, applied_at FROM schema_migrations ORDER BY version')).rows;
    expect(await migratePostgres(p)).toBe(LATEST);
    expect((await p.query('SELECT version, applied_at FROM schema_migrations ORDER BY version')).rows).toEqual(before);
  });

  it("refuses another application's database and creates nothing in it", async () => {
    const url = await createDatabase(pg);
    const p = await pool(url);
    await p.query('CREATE TABLE accounts (id int PRIMARY KEY, owner text)');
    await p.query("INSERT INTO accounts VALUES (1, 'theirs')");
    const db = new URL(url).pathname.slice(1);
    await expect(migratePostgres(p)).rejects.toThrow(
      `the PostgreSQL database "${db}" holds other tables (1) and no telemetryd schema: use an empty database`,
    );
    const tables = (await p.query<{ t: string }>("SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public'")).rows.map((r) => r.t);
    expect(tables).toEqual(['accounts']);
    expect((await p.query('SELECT * FROM accounts')).rows).toEqual([{ id: 1, owner: 'theirs' }]);
  });

  it('tells serve and admin commands when a newer telemetryd has migrated the database', async () => {
    const url = await createDatabase(pg);
    const p = await pool(url);
    await migratePostgres(p);
    await p.query("INSERT INTO schema_migrations (version, name) VALUES ($1, 'from a newer build')", [LATEST + 1]);
    expect(await migratePostgres(p)).toBe(LATEST + 1);
    const r = await runCliAsync(['accounts', 'list', '--json', '--database-url', url]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toBe(
      `telemetryd: warning: the database's schema is at version ${LATEST + 1}, newer than this telemetryd knows (${LATEST}): a newer telemetryd has used it; run that version\n`,
    );
    const printed: string[] = [];
    const node = await startTestServer({ 'database-url': url }, { print: (line) => printed.push(line) });
    await node.stop();
    expect(printed).toContain(
      `warning: the database's schema is at version ${LATEST + 1}, newer than this telemetryd knows (${LATEST}): a newer telemetryd has used it; run that version`,
    );
  });

  it('says what to grant when the user may not create tables in the database', async () => {
    // A name that must be quoted in SQL, so the statement the message gives is tried as shown.
    const db = `tele-${Date.now()}`;
    await psql(pg, 'postgres', `CREATE DATABASE "${db}"`);
    const url = new URL(await createDatabase(pg));
    url.pathname = `/${db}`;
    // A user that may connect but, as PostgreSQL 15 has it by default, not create in public.
    await psql(pg, db, `CREATE ROLE newcomer LOGIN PASSWORD 'pw-newcomer'; GRANT CONNECT ON DATABASE "${db}" TO newcomer`);
    const asNewcomer = new URL(url);
    asNewcomer.username = 'newcomer';
    asNewcomer.password = 'pw-newcomer';
    const p = await pool(asNewcomer.toString());
    await expect(migratePostgres(p)).rejects.toThrow(
      `user "newcomer" may not create telemetryd's tables in schema public of the PostgreSQL database "${db}" (permission denied for schema public): ` +
        `make the user the database's owner (ALTER DATABASE "${db}" OWNER TO newcomer) or GRANT CREATE ON SCHEMA public TO newcomer`,
    );
    // As told, word for word: the owner migrates.
    await psql(pg, db, `ALTER DATABASE "${db}" OWNER TO newcomer`);
    expect(await migratePostgres(p)).toBe(LATEST);
  });

  describe('readings partitions', () => {
    let p: Pool;
    beforeAll(async () => {
      p = await pool(await createDatabase(pg));
      await migratePostgres(p);
      await p.query(
        "INSERT INTO accounts (id, email, plan, rate_per_minute, rate_per_day, device_limit, retention_days, snapshots_per_day, snapshot_retention_days, field_limit, created_at, updated_at) VALUES ('acc_1', 'a@example.com', 'starter', 1, 1, 1, 1, 1, 1, 1, 0, 0)",
      );
      await p.query(
        "INSERT INTO devices (id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at) VALUES ('dev_1', 1, 'd', 't', 'flexible', 'h', 0, 0)",
      );
    });
    const partitions = async () =>
      (
        await p.query<{ name: string; bound: string }>(
          "SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'readings'::regclass ORDER BY 1",
        )
      ).rows;

    it('weeks run Monday to Monday, UTC', () => {
      const thursday = Date.UTC(2026, 10, 26, 15, 30);
      expect(new Date(partitionWeek(thursday)).toISOString()).toBe('2026-11-23T00:00:00.000Z');
      expect(partitionWeek(Date.UTC(2026, 10, 23))).toBe(Date.UTC(2026, 10, 23));
      expect(partitionWeek(Date.UTC(2026, 10, 22, 23, 59, 59, 999))).toBe(Date.UTC(2026, 10, 16));
    });

    it('refuses a reading whose week has no partition yet', async () => {
      await expect(p.query("INSERT INTO readings VALUES (1, $1, 1, '{}')", [Date.UTC(2026, 0, 7)])).rejects.toThrow(
        /no partition of relation "readings" found/,
      );
    });

    it('creates the partitions of far past and future times on demand, once', async () => {
      const past = Date.UTC(1999, 11, 31, 23, 59);
      const future = Date.UTC(2100, 0, 1, 12);
      expect(await readingPartitions(p, [past, future, future + DAY_MS, past - 1])).toBe(2);
      expect(await partitions()).toEqual([
        { name: 'readings_19991227', bound: `FOR VALUES FROM ('${Date.UTC(1999, 11, 27)}') TO ('${Date.UTC(2000, 0, 3)}')` },
        // 2100-01-01 is a Friday.
        { name: 'readings_20991228', bound: `FOR VALUES FROM ('${Date.UTC(2099, 11, 28)}') TO ('${Date.UTC(2100, 0, 4)}')` },
      ]);
      expect(await readingPartitions(p, [past, future])).toBe(0);
      await p.query('INSERT INTO readings VALUES (1, $1, 1, \'{"a":1}\'), (1, $2, 2, \'{"a":2}\')', [past, future]);
      const { rows } = await p.query('SELECT seq, tableoid::regclass::text AS part FROM readings ORDER BY seq');
      expect(rows).toEqual([
        { seq: 1, part: 'readings_19991227' },
        { seq: 2, part: 'readings_20991228' },
      ]);
    });

    it('creates a new week once when several processes need it together', async () => {
      const week = Date.UTC(2031, 4, 14);
      const created = await Promise.all(Array.from({ length: 6 }, () => readingPartitions(p, [week])));
      expect(created.reduce((a, b) => a + b, 0)).toBe(1);
      expect((await partitions()).map((r) => r.name)).toContain('readings_20310512');
    });

    it('serves newest-of-one-device from the primary key of each partition', async () => {
      const { rows } = await p.query(
        'EXPLAIN (COSTS OFF) SELECT * FROM readings WHERE device_seq = 1 ORDER BY time DESC, seq DESC LIMIT 1',
      );
      const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan).toMatch(/Index Scan Backward using readings_\d+_pkey/);
      expect(plan).not.toMatch(/Seq Scan|Sort/);
    });

    it('follows deleted readings with negative usage counts, one row per account and minute of each statement', async () => {
      const minute = Math.floor(Date.UTC(1999, 11, 31, 23, 59) / 60_000);
      await p.query("INSERT INTO readings VALUES (1, $1, 10, '{}'), (1, $1 + 1, 11, '{}'), (1, $1 + 60000, 12, '{}')", [minute * 60_000]);
      await p.query('DELETE FROM readings WHERE seq IN (10, 11, 12)');
      expect((await p.query('SELECT account_seq, minute, n FROM reading_count_deltas ORDER BY minute')).rows).toEqual([
        { account_seq: 1, minute, n: -2 },
        { account_seq: 1, minute: minute + 1, n: -1 },
      ]);
    });
  });
});
