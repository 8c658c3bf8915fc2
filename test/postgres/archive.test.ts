/**
 * Backup and restore across backends (docs/postgres.md, "Backup and restore"): the built CLI
 * moves a SQLite data dir holding every kind of row into a fresh PostgreSQL database and back,
 * and the two SQLite files agree table by table, row by row; snapshot files by hash.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/storage/db.js';
import { MIGRATIONS, REBUILD_READING_COUNTS } from '../../src/storage/migrations.js';
import { createPostgresBackup } from '../../src/storage/postgres/archive.js';
import { connectPostgres, describeDatabase } from '../../src/storage/postgres/connect.js';
import { migratePostgres, readingPartitions } from '../../src/storage/postgres/migrations.js';
import { PostgresReadingWriter } from '../../src/storage/postgres/readingWriter.js';
import { CLI, runCli } from '../helpers/cli.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { tempDir } from '../helpers/server.js';

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 23, 12, 0, 0);
/** More readings than one batch (5,000), so batching on both sides is crossed. */
const CLUSTERED_READINGS = 12_000;
const INBOX_READINGS = 300;

/**
 * Every SQLite table and how the comparison reads it. A table not listed here fails the test:
 * a new table needs its line here and in both copy directions (src/storage/postgres/archive.ts).
 * Readings are compared across the inbox and the clustered table, since a merge may move rows.
 */
const TABLES: Record<string, string | null> = {
  accounts: 'SELECT * FROM accounts ORDER BY seq',
  api_keys: 'SELECT * FROM api_keys ORDER BY seq',
  devices: 'SELECT * FROM devices ORDER BY seq',
  readings_by_device: null,
  readings_inbox: null,
  reading_seq: 'SELECT * FROM reading_seq',
  // The next device seq: past the counter and past every row (rows copied in carry their seq).
  device_seq: 'SELECT max(last, (SELECT coalesce(max(seq), 0) FROM devices)) AS last FROM device_seq',
  reading_counts: 'SELECT * FROM reading_counts ORDER BY account_seq, minute',
  alerts: 'SELECT * FROM alerts ORDER BY seq',
  alert_events: 'SELECT * FROM alert_events ORDER BY seq',
  snapshots: 'SELECT * FROM snapshots ORDER BY seq',
  sessions: 'SELECT * FROM sessions ORDER BY id_hash',
  rollups: 'SELECT * FROM rollups ORDER BY device_seq, level, bucket',
  rollup_state: 'SELECT * FROM rollup_state',
  rollup_dirty: 'SELECT * FROM rollup_dirty ORDER BY device_seq, hour',
};

/** Every table of a SQLite file, row by row (readings as one list from both tables, by seq). */
function dumpSqlite(file: string): Record<string, unknown[]> {
  const db = new Database(file, { readonly: true });
  try {
    const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all() as string[];
    const unknown = tables.filter((t) => !(t in TABLES));
    expect(unknown, 'tables the round trip does not know').toEqual([]);
    const out: Record<string, unknown[]> = {};
    for (const [table, sql] of Object.entries(TABLES)) if (sql) out[table] = db.prepare(sql).all();
    out.readings = db
      .prepare(
        'SELECT device_seq, time, seq, data FROM readings_by_device UNION ALL SELECT device_seq, time, seq, data FROM readings_inbox ORDER BY seq',
      )
      .all();
    return out;
  } finally {
    db.close();
  }
}

/** Relative path → SHA-256 of every file under `dir`. */
function hashes(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (sub: string) => {
    for (const entry of readdirSync(path.join(dir, sub), { withFileTypes: true })) {
      const rel = path.join(sub, entry.name);
      if (entry.isDirectory()) walk(rel);
      else
        out[rel] = createHash('sha256')
          .update(readFileSync(path.join(dir, rel)))
          .digest('hex');
    }
  };
  walk('');
  return out;
}

/**
 * A data dir with at least one row in every table, with the values a copy could get wrong:
 * NULLs, both values of every boolean, fractional REALs, unicode, JSON text with odd spacing
 * kept byte for byte, readings in both the clustered table and the inbox over several weeks
 * (and one in 2019), and a reading_seq and a device_seq past the largest stored seqs.
 */
function fillDataDir(dir: string): void {
  const db = openDatabase(dir);
  try {
    db.exec(`
      INSERT INTO accounts (seq, id, email, name, password_hash, plan, status, rate_per_minute, rate_per_day, device_limit,
        retention_days, snapshots_per_day, snapshot_retention_days, field_limit, webhook_secret, created_at, updated_at) VALUES
        (3, 'acc_one', 'Owner@Example.com', 'Zoë 🌡 "quoted"', 'scrypt$16384$8$1$c2FsdA$aGFzaA', 'business', 'active', 300, 50000, 100, 90, 48, 30, 50, 'whsec_abc', ${NOW - 9 * DAY}, ${NOW - DAY}),
        (7, 'acc_two', 'second@example.com', '', NULL, 'free', 'suspended', 10, 1000, 2, 7, 0, 1, 5, NULL, ${NOW - 8 * DAY}, ${NOW - 8 * DAY});
      INSERT INTO api_keys (seq, id, account_seq, name, key_prefix, key_hash, last_used_at, created_at, revoked_at) VALUES
        (1, 'key_a', 3, 'grafana', 'tk_live_ab', 'hash-a', ${NOW - 5000}, ${NOW - 7 * DAY}, NULL),
        (4, 'key_b', 3, 'old', 'tk_live_cd', 'hash-b', NULL, ${NOW - 6 * DAY}, ${NOW - 2 * DAY});
      INSERT INTO devices (seq, id, account_seq, name, type, description, status, settings, schema_mode, fields, snapshots_enabled,
        token_hash, last_seen, rejected_count, last_rejection_reason, last_rejection_at, created_at, updated_at, resumed_at) VALUES
        (1, 'dev_cam', 3, 'Camera', 'camera', 'über den Hof', 'active', '{"interval":  60, "x":[1,2]}', 'flexible', '[]', 1,
          'tok-1', ${NOW - 1000}, 3, 'field "foo" not allowed', ${NOW - 3000}, ${NOW - 7 * DAY}, ${NOW - DAY}, ${NOW - 2 * DAY}),
        (2, 'dev_temp', 3, 'Thermo', 'sensor', '', 'paused', '{}', 'strict', '[{"name":"t","label":"Temp","unit":"°C"}]', 0,
          'tok-2', NULL, 0, NULL, NULL, ${NOW - 6 * DAY}, ${NOW - 6 * DAY}, NULL),
        (5, 'dev_other', 7, 'Other', 'sensor', '', 'active', '{}', 'flexible', '[]', 0, 'tok-5', NULL, 0, NULL, NULL, ${NOW - DAY}, ${NOW - DAY}, NULL);
      INSERT INTO alerts (seq, id, account_seq, device_seq, name, field, operator, value, actions, webhook_url, severity, enabled, cooldown,
        last_triggered, created_at, updated_at, kind, state, notify_resolved, clear_value, slack_url, discord_url, ntfy_url, enabled_at) VALUES
        (1, 'alr_hot', 3, 2, 'Too hot', 't', '>', 21.75, '["email","webhook", "slack"]', 'https://hooks.example.com/x?a=1', 'critical', 1, 300,
          ${NOW - 4000}, ${NOW - 5 * DAY}, ${NOW - DAY}, 'threshold', 'firing', 0, 19.5, 'https://slack.example.com/T/1', NULL, NULL, ${NOW - 5 * DAY}),
        (2, 'alr_quiet', 3, 1, 'Silent', '', '>', 0, '["ntfy"]', NULL, 'warning', 0, 600,
          NULL, ${NOW - 4 * DAY}, ${NOW - 4 * DAY}, 'no_data', 'ok', 1, NULL, NULL, 'https://discord.example.com/api/webhooks/1', 'https://ntfy.sh/t', NULL);
      INSERT INTO alert_events (seq, id, alert_seq, device_id, condition_value, severity, acknowledged, acknowledged_at, triggered_at,
        reading_seq, deliveries, resolved_at, resolution_deliveries) VALUES
        (1, 'evt_1', 1, 'dev_temp', 22.25, 'critical', 1, ${NOW - 3000}, ${NOW - 4000}, 17,
          '[{"action":"email","status":"sent","at":1},{"action":"webhook","status":"failed","error":"HTTP 500"}]', ${NOW - 2000}, '[{"action":"email","status":"sent"}]'),
        (2, 'evt_2', 1, 'dev_temp', -3.5e-7, 'critical', 0, NULL, ${NOW - 1000}, NULL, '[]', NULL, '[]'),
        (9, 'evt_3', 2, 'dev_cam', 0, 'warning', 0, NULL, ${NOW - 500}, NULL, '[{"action":"ntfy","status":"pending"}]', NULL, '[]');
      INSERT INTO snapshots (seq, id, device_seq, content_type, size, created_at) VALUES
        (1, 'snp_a', 1, 'image/jpeg', 6, ${NOW - 2 * DAY}),
        (2, 'snp_b', 1, 'image/png', 4, ${NOW - DAY});
      INSERT INTO sessions (id_hash, account_seq, csrf_token, created_at, last_used_at, expires_at) VALUES
        ('sess-hash-1', 3, 'csrf-1', ${NOW - DAY}, ${NOW - 1000}, ${NOW + 6 * DAY});
      INSERT INTO rollups (device_seq, level, bucket, stats) VALUES
        (1, 0, ${NOW - 60_000}, '{"t":21.5}'), (1, 1, ${NOW - 300_000}, '{"t":[3,20,22.5,63.25],"h":40}'), (2, 2, ${NOW - 3_600_000}, '{}');
      UPDATE rollup_state SET rolled_until = ${NOW - 30_000};
      INSERT INTO rollup_dirty (device_seq, hour) VALUES (1, ${NOW - 3_600_000}), (2, ${NOW - 7_200_000});
    `);
    const clustered = db.prepare('INSERT INTO readings_by_device (device_seq, time, seq, data) VALUES (?, ?, ?, ?)');
    const inbox = db.prepare('INSERT INTO readings_inbox (seq, device_seq, time, data) VALUES (?, ?, ?, ?)');
    db.transaction(() => {
      let seq = 0;
      // Three weeks of readings from three devices, with data the copy must keep byte for byte.
      for (let i = 0; i < CLUSTERED_READINGS; i++) {
        const device = [1, 2, 5][i % 3]!;
        const time = NOW - 20 * DAY + Math.floor((i * 20 * DAY) / CLUSTERED_READINGS);
        const data =
          i % 7 === 0 ? `{"t": ${i / 8},"label":"ä\\"b\\\\c 🌡","nested":{"a":[1, 2e3]}}` : `{"t":${(i % 400) / 10},"h":${i % 97}}`;
        clustered.run(device, time, ++seq, data);
      }
      clustered.run(2, Date.UTC(2019, 0, 1), ++seq, '{"old":true}');
      for (let i = 0; i < INBOX_READINGS; i++) inbox.run(++seq, [1, 2][i % 2]!, NOW - 1000 + i, `{"t":${i}.5}`);
      // Ids issued to readings since deleted: the next id must come after them.
      db.prepare('UPDATE reading_seq SET last = ?').run(seq + 25);
      // Seqs issued to devices since deleted: the next device's must come after them too.
      db.prepare('UPDATE device_seq SET last = (SELECT max(seq) FROM devices) + 3').run();
    })();
    db.exec(REBUILD_READING_COUNTS);
  } finally {
    db.close();
  }
  mkdirSync(path.join(dir, 'snapshots', 'dev_cam'), { recursive: true });
  writeFileSync(path.join(dir, 'snapshots', 'dev_cam', 'snp_a.jpg'), Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 1]));
  writeFileSync(path.join(dir, 'snapshots', 'dev_cam', 'snp_b.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47]));
}

/** Everything a PostgreSQL database holds for telemetryd, as one comparable value. */
async function pgState(pool: Pool): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  const tables = [
    'accounts',
    'api_keys',
    'devices',
    'readings',
    'reading_counts',
    'alerts',
    'alert_events',
    'snapshots',
    'sessions',
    'rollups',
    'rollup_state',
    'rollup_dirty',
  ];
  for (const t of tables) {
    const { rows } = await pool.query(
      `SELECT count(*)::int AS n, md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) AS h FROM ${t} x`,
    );
    out[t] = rows[0];
  }
  out.partitions = (await pool.query("SELECT tablename FROM pg_tables WHERE tablename LIKE 'readings\\_%' ORDER BY 1")).rows;
  out.reading_seq = (await pool.query('SELECT last_value, is_called FROM reading_seq')).rows[0];
  return out;
}

describe('backup and restore across SQLite and PostgreSQL', () => {
  let pg: PostgresServer;
  const root = tempDir('telemetryd-pgarchive-');
  const pools: Pool[] = [];
  const pool = async (url: string) => {
    const p = await connectPostgres(url, { max: 4 });
    pools.push(p);
    return p;
  };
  const cli = (...args: string[]) => runCli(args);

  beforeAll(async () => {
    pg = await startPostgres();
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await pg?.stop();
  });

  it('SQLite → PostgreSQL → SQLite keeps every row of every table and every snapshot file', async () => {
    const source = path.join(root, 'source');
    fillDataDir(source);
    const before = dumpSqlite(path.join(source, 'telemetryd.db'));
    for (const [table, rows] of Object.entries(before)) expect(rows.length, `rows in ${table}`).toBeGreaterThan(0);

    const first = path.join(root, 'from-sqlite.tar.gz');
    const backedUp = cli('backup', first, '--data-dir', source, '--json');
    expect(backedUp.status, backedUp.stderr).toBe(0);

    const url = await createDatabase(pg);
    const pgSnapshots = path.join(root, 'pg-snapshots');
    const restored = cli('restore', first, '--database-url', url, '--snapshots-dir', pgSnapshots, '--json');
    expect(restored.status, restored.stderr).toBe(0);
    expect(restored.json).toEqual({
      file: first,
      database: url.replace(pg.password, '***'),
      snapshots_dir: pgSnapshots,
      readings: CLUSTERED_READINGS + 1 + INBOX_READINGS,
    });
    expect(restored.stdout).not.toContain(pg.password);
    expect(hashes(pgSnapshots)).toEqual(hashes(path.join(source, 'snapshots')));
    // The human line says where the snapshot files went, which the server must be given.
    const again = cli('restore', first, '--database-url', url, '--snapshots-dir', pgSnapshots, '--force');
    expect(again.status, again.stderr).toBe(0);
    expect(again.stdout).toBe(
      `restored ${first} into ${url.replace(pg.password, '***')} (${CLUSTERED_READINGS + 1 + INBOX_READINGS} readings), snapshot files into ${pgSnapshots}\n`,
    );

    // In PostgreSQL: booleans as booleans, every reading in its weekly partition, ids continue
    // after the archive's.
    const p = await pool(url);
    const devices = await p.query('SELECT id, snapshots_enabled FROM devices ORDER BY seq');
    expect(devices.rows).toEqual([
      { id: 'dev_cam', snapshots_enabled: true },
      { id: 'dev_temp', snapshots_enabled: false },
      { id: 'dev_other', snapshots_enabled: false },
    ]);
    const weeks = await p.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename LIKE 'readings\\_%'");
    expect(weeks.rows[0].n).toBeGreaterThanOrEqual(4);
    const lastSeq = before.reading_seq![0] as { last: number };
    expect((await p.query("SELECT nextval('reading_seq') AS n")).rows[0].n).toBe(lastSeq.last + 1);
    const nextAccount = await p.query(
      "INSERT INTO accounts (id, email, plan, rate_per_minute, rate_per_day, device_limit, retention_days, snapshots_per_day, snapshot_retention_days, field_limit, created_at, updated_at) VALUES ('acc_new', 'new@example.com', 'free', 1, 1, 1, 1, 1, 1, 1, 0, 0) RETURNING seq",
    );
    expect(nextAccount.rows[0].seq).toBe(8);
    await p.query("DELETE FROM accounts WHERE id = 'acc_new'");
    await p.query("SELECT setval('reading_seq', $1, false)", [lastSeq.last + 1]);

    const second = path.join(root, 'from-postgres.tar.gz');
    const pgBackup = cli('backup', second, '--database-url', url, '--snapshots-dir', pgSnapshots, '--json');
    expect(pgBackup.status, pgBackup.stderr).toBe(0);
    expect(pgBackup.json).toEqual({ file: second, bytes: expect.any(Number) });
    // Without --json the line names the database read, never with its password.
    const human = cli('backup', path.join(root, 'human.tar.gz'), '--database-url', url, '--snapshots-dir', pgSnapshots);
    expect(human.status, human.stderr).toBe(0);
    expect(human.stdout).toBe(
      `wrote ${path.join(root, 'human.tar.gz')} (${statSync(path.join(root, 'human.tar.gz')).size} bytes) from PostgreSQL ${describeDatabase(url)}\n`,
    );
    expect(human.stdout).not.toContain(pg.password);
    const tar = await import('tar');
    const unpacked = path.join(root, 'unpacked');
    mkdirSync(unpacked);
    await tar.extract({ file: second, cwd: unpacked });
    expect(JSON.parse(readFileSync(path.join(unpacked, 'backup.json'), 'utf8'))).toMatchObject({
      format: 1,
      snapshots: true,
      source: 'postgres',
    });

    // On a terminal (util-linux `script` gives one) the rows copied per table show on stderr.
    if (spawnSync('script', ['--version']).status === 0) {
      const ttyFile = path.join(root, 'tty.tar.gz');
      const command = [process.execPath, CLI, 'backup', ttyFile, '--snapshots-dir', pgSnapshots].map((a) => JSON.stringify(a)).join(' ');
      const tty = spawnSync('script', ['-qec', command, '/dev/null'], {
        encoding: 'utf8',
        env: { ...process.env, TELEMETRYD_DATABASE_URL: url },
      });
      expect(tty.status, tty.stdout).toBe(0);
      expect(tty.stdout).toContain(`backup: readings ${CLUSTERED_READINGS + 1 + INBOX_READINGS} rows`);
      expect(tty.stdout).toContain(`wrote ${ttyFile}`);
    }

    const target = path.join(root, 'back-in-sqlite');
    const back = cli('restore', second, '--data-dir', target, '--json');
    expect(back.status, back.stderr).toBe(0);
    expect(back.json.readings).toBe(CLUSTERED_READINGS + 1 + INBOX_READINGS);

    const after = dumpSqlite(path.join(target, 'telemetryd.db'));
    for (const table of Object.keys(before)) expect(after[table], table).toEqual(before[table]);
    expect(hashes(path.join(target, 'snapshots'))).toEqual(hashes(path.join(source, 'snapshots')));
    // From PostgreSQL every reading lands in the clustered table, in key order.
    const db = new Database(path.join(target, 'telemetryd.db'), { readonly: true });
    expect(db.prepare('SELECT count(*) FROM readings_inbox').pluck().get()).toBe(0);
    expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
    db.close();

    // A database that has accounts is replaced only with --force.
    const stateBefore = await pgState(p);
    const refused = cli('restore', first, '--database-url', url, '--snapshots-dir', pgSnapshots, '--json');
    expect(refused.status).toBe(1);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toMatch(
      /^telemetryd: the PostgreSQL database "test_[0-9a-f]+" already holds accounts; pass --force to replace them\n$/,
    );
    expect(await pgState(p)).toEqual(stateBefore);
    const forced = cli('restore', first, '--database-url', url, '--snapshots-dir', pgSnapshots, '--force', '--json');
    expect(forced.status, forced.stderr).toBe(0);
    expect(await pgState(p)).toEqual(stateBefore);
  });

  it('a restore that fails part way leaves the PostgreSQL database as it was', async () => {
    const source = path.join(root, 'bad-source');
    fillDataDir(source);
    const url = await createDatabase(pg);
    const good = path.join(root, 'good.tar.gz');
    expect(cli('backup', good, '--data-dir', source).status).toBe(0);
    const pgSnapshots = path.join(root, 'bad-pg-snapshots');
    expect(cli('restore', good, '--database-url', url, '--snapshots-dir', pgSnapshots).status).toBe(0);
    const p = await pool(url);
    const stateBefore = await pgState(p);
    const filesBefore = hashes(pgSnapshots);

    // SQLite stores a NUL character in text; PostgreSQL refuses it. The row comes after every
    // other table and after most readings (and after a new week's partition was created).
    const db = new Database(path.join(source, 'telemetryd.db'));
    db.prepare('INSERT INTO readings_inbox (seq, device_seq, time, data) VALUES (?, ?, ?, ?)').run(
      999_999,
      1,
      Date.UTC(2030, 0, 1),
      'a\u0000b',
    );
    db.prepare("UPDATE accounts SET name = 'changed' WHERE seq = 3").run();
    db.close();
    writeFileSync(path.join(source, 'snapshots', 'dev_cam', 'snp_a.jpg'), Buffer.from([1, 2, 3]));
    const bad = path.join(root, 'bad.tar.gz');
    expect(cli('backup', bad, '--data-dir', source).status).toBe(0);

    const failed = cli('restore', bad, '--database-url', url, '--snapshots-dir', pgSnapshots, '--force');
    expect(failed.status).toBe(1);
    expect(failed.stderr).toMatch(
      /^telemetryd: restore rolled back, the database is as it was: readings_inbox: invalid byte sequence for encoding "UTF8": 0x00/,
    );
    expect(failed.stderr.trim().split('\n')).toHaveLength(1);
    expect(failed.stderr).not.toContain(pg.password);
    expect(await pgState(p)).toEqual(stateBefore);
    expect(hashes(pgSnapshots)).toEqual(filesBefore);
  });

  it('a backup taken while readings are written is one consistent moment', async () => {
    const url = await createDatabase(pg);
    const p = await pool(url);
    await migratePostgres(p);
    const account = (
      await p.query(
        "INSERT INTO accounts (id, email, plan, rate_per_minute, rate_per_day, device_limit, retention_days, snapshots_per_day, snapshot_retention_days, field_limit, created_at, updated_at) VALUES ('acc_1', 'a@example.com', 'starter', 1, 1, 1, 1, 1, 1, 1, 0, 0) RETURNING seq",
      )
    ).rows[0].seq as number;
    const devices = (
      await p.query(
        "INSERT INTO devices (id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at) SELECT 'dev_' || i, $1, 'd', 't', 'flexible', 'h' || i, 0, 0 FROM generate_series(1, 20) i RETURNING seq",
        [account],
      )
    ).rows.map((r) => r.seq as number);
    // A database big enough that the copy takes a while: 200,000 readings over a week, counted.
    await readingPartitions(p, [NOW - 7 * DAY, NOW]);
    await p.query(
      `INSERT INTO readings (device_seq, time, seq, data)
       SELECT $1::bigint + i % 20, $2::bigint + i * 3000, nextval('reading_seq'), '{"t":' || i || '}' FROM generate_series(1, 200000) i`,
      [devices[0]!, NOW - 7 * DAY],
    );
    await p.query(
      'INSERT INTO reading_counts SELECT d.account_seq, r.time / 60000, count(*) FROM readings r JOIN devices d ON d.seq = r.device_seq GROUP BY 1, 2',
    );

    const writerPool = await pool(url);
    const writer = new PostgresReadingWriter(writerPool, url);
    let acknowledged = 0;
    let writing = true;
    // Readings spread over many minutes, so counts of many minutes change during the copy.
    const load = (async () => {
      let i = 0;
      while (writing) {
        await Promise.all(
          Array.from({ length: 50 }, () => {
            i++;
            return writer
              .append({ deviceSeq: devices[i % 20]!, accountSeq: account, time: NOW + (i % 600) * 1000, data: `{"w":${i}}` })
              .then(() => {
                acknowledged++;
              });
          }),
        );
      }
    })();
    while (acknowledged < 500) await new Promise((r) => setTimeout(r, 10));
    const atStart = acknowledged;
    const archive = path.join(root, 'under-load.tar.gz');
    const backupPool = await pool(url);
    await createPostgresBackup(backupPool, path.join(root, 'no-snapshots'), archive, 'test');
    const atEnd = acknowledged;
    writing = false;
    await load;
    await writer.close();
    expect(atEnd - atStart, 'readings committed while the backup ran').toBeGreaterThan(0);

    const restoredDir = path.join(root, 'under-load');
    expect(cli('restore', archive, '--data-dir', restoredDir).status).toBe(0);
    const db = new Database(path.join(restoredDir, 'telemetryd.db'), { readonly: true });
    try {
      const readings = db.prepare('SELECT count(*) FROM readings').pluck().get() as number;
      expect(readings).toBeGreaterThanOrEqual(200_000 + atStart);
      expect(readings).toBeLessThanOrEqual(200_000 + atEnd);
      // Every reading counted is present and every present reading is counted, minute by minute.
      const mismatched = db
        .prepare(
          `SELECT c.minute, c.n, coalesce(r.n, 0) AS readings FROM reading_counts c
           LEFT JOIN (SELECT time / 60000 AS minute, count(*) AS n FROM readings GROUP BY 1) r ON r.minute = c.minute
           WHERE c.n <> coalesce(r.n, 0)
           UNION ALL
           SELECT r.minute, 0, r.n FROM (SELECT time / 60000 AS minute, count(*) AS n FROM readings GROUP BY 1) r
           WHERE NOT EXISTS (SELECT 1 FROM reading_counts c WHERE c.minute = r.minute)`,
        )
        .all();
      expect(mismatched).toEqual([]);
      // The archive's last id is at least its largest reading's.
      expect(db.prepare('SELECT last FROM reading_seq').pluck().get()).toBeGreaterThanOrEqual(
        db.prepare('SELECT max(seq) FROM readings').pluck().get() as number,
      );
    } finally {
      db.close();
    }
  });

  it('an archive of an older schema is migrated forward before it is loaded', async () => {
    // An archive as a version before rollups and alert kinds wrote it (SQLite schema 5).
    const staging = path.join(root, 'old-archive');
    mkdirSync(staging);
    const db = new Database(path.join(staging, 'telemetryd.db'));
    for (const m of MIGRATIONS.filter((m) => m.version <= 5)) db.exec(m.sql);
    db.pragma('user_version = 5');
    db.exec(`
      INSERT INTO accounts (seq, id, email, plan, rate_per_minute, rate_per_day, device_limit, retention_days, snapshots_per_day,
        snapshot_retention_days, field_limit, created_at, updated_at) VALUES (1, 'acc_old', 'old@example.com', 'free', 1, 1, 1, 1, 1, 1, 1, 5, 5);
      INSERT INTO devices (seq, id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at)
        VALUES (1, 'dev_old', 1, 'old', 'sensor', 'flexible', 'tok', 5, 5);
      INSERT INTO alerts (seq, id, account_seq, device_seq, name, field, operator, value, severity, created_at, updated_at)
        VALUES (1, 'alr_old', 1, 1, 'old', 't', '>', 1, 'warning', 1234, 1234);
      INSERT INTO readings_inbox (seq, device_seq, time, data) VALUES (1, 1, ${NOW}, '{"t":1}');
      UPDATE reading_seq SET last = 1;
    `);
    db.close();
    writeFileSync(
      path.join(staging, 'backup.json'),
      JSON.stringify({ format: 1, version: '0.0.9', created_at: new Date().toISOString(), snapshots: false }),
    );
    const archive = path.join(root, 'old.tar.gz');
    const tar = await import('tar');
    await tar.create({ gzip: true, file: archive, cwd: staging }, ['backup.json', 'telemetryd.db']);

    const url = await createDatabase(pg);
    const restored = cli('restore', archive, '--database-url', url, '--snapshots-dir', path.join(root, 'old-snapshots'), '--json');
    expect(restored.status, restored.stderr).toBe(0);
    expect(restored.json.readings).toBe(1);
    const p = await pool(url);
    // Columns the old archive did not have get the values SQLite's migrations give them.
    const alert = await p.query('SELECT kind, state, notify_resolved, enabled_at FROM alerts');
    expect(alert.rows).toEqual([{ kind: 'threshold', state: 'ok', notify_resolved: true, enabled_at: 1234 }]);
    expect((await p.query('SELECT rolled_until FROM rollup_state')).rows).toEqual([{ rolled_until: 0 }]);
    expect((await p.query('SELECT seq, data FROM readings')).rows).toEqual([{ seq: 1, data: '{"t":1}' }]);
  });

  it('a wrong database URL is one line without the password, exit 1', async () => {
    const url = await createDatabase(pg);
    const wrongPassword = url.replace(pg.password, 's3cret-Wrong');
    const wrongDb = url.replace(/\/test_[0-9a-f]+$/, '/nosuchdb');
    const archive = path.join(root, 'never.tar.gz');
    const cases: [string[], RegExp][] = [
      [
        ['backup', archive, '--database-url', wrongPassword],
        /^telemetryd: PostgreSQL at 127\.0\.0\.1:\d+: password authentication failed for user "postgres"\n$/,
      ],
      [
        ['backup', archive, '--database-url', wrongDb],
        /^telemetryd: PostgreSQL at 127\.0\.0\.1:\d+: database "nosuchdb" does not exist\n$/,
      ],
      [
        ['restore', archive, '--database-url', wrongPassword.replace('postgres://', 'mysql://'), '--snapshots-dir', path.join(root, 'x')],
        /^telemetryd: --database-url: the scheme must be postgres:\/\/ or postgresql:\/\/, not mysql:\/\/ in mysql:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+\/test_[0-9a-f]+ \(expected postgres:\/\/USER\[:PASSWORD\]@HOST\[:PORT\]\/DB\)\n$/,
      ],
    ];
    for (const [args, message] of cases) {
      const r = cli(...args, '--json');
      expect(r.status, args.join(' ')).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(message);
      expect(r.stderr).not.toContain('s3cret-Wrong');
      expect(r.stderr).not.toContain(pg.password);
    }
    expect(existsSync(archive)).toBe(false);
    // flag > env > config file: the wrong URL of the environment and of the config file loses
    // to the flag, and the environment's wins over the config file's.
    const config = path.join(root, 'pg-config.json');
    writeFileSync(config, JSON.stringify({ 'database-url': wrongDb }));
    const fromEnv = runCli(['backup', archive, '--config', config], { env: { TELEMETRYD_DATABASE_URL: wrongPassword } });
    expect(fromEnv.stderr).toMatch(/password authentication failed/);
    const fromFile = runCli(['backup', archive, '--config', config]);
    expect(fromFile.stderr).toMatch(/database "nosuchdb" does not exist/);
    const flagWins = runCli(['backup', archive, '--config', config, '--database-url', url], {
      env: { TELEMETRYD_DATABASE_URL: wrongPassword },
    });
    expect(flagWins.stderr).toMatch(/no telemetryd data in the PostgreSQL database/);
    // A database that has never had telemetryd's schema is not backed up (nor given one).
    const empty = cli('backup', archive, '--database-url', url);
    expect(empty.status).toBe(1);
    expect(empty.stderr).toMatch(/^telemetryd: no telemetryd data in the PostgreSQL database "test_[0-9a-f]+"\n$/);
    const p = await pool(url);
    expect((await p.query("SELECT to_regclass('schema_migrations') AS t")).rows[0].t).toBeNull();
  });
});
