import type { Database } from 'better-sqlite3';

/**
 * Keeps reading_counts equal to the readings table when readings are deleted (retention,
 * device deletion): one row per account and UTC minute, a zero row dropped. Inserts are
 * counted by the writer once per batch and per account and minute (readings repository,
 * insertBatch): a per-row INSERT trigger would cost a third of sustained ingest (BENCHMARKS.md, "Design decisions").
 */
const READING_COUNTS_TRIGGERS = `
  CREATE TRIGGER reading_counts_delete AFTER DELETE ON readings BEGIN
    UPDATE reading_counts SET n = n - 1
      WHERE account_seq = (SELECT account_seq FROM devices WHERE seq = OLD.device_seq) AND minute = OLD.time / 60000;
    DELETE FROM reading_counts
      WHERE account_seq = (SELECT account_seq FROM devices WHERE seq = OLD.device_seq) AND minute = OLD.time / 60000 AND n <= 0;
  END;`;

/** Recomputes reading_counts from readings (migration 4; bulk loads that bypass the triggers). */
export const REBUILD_READING_COUNTS = `
  DELETE FROM reading_counts;
  INSERT INTO reading_counts (account_seq, minute, n)
    SELECT d.account_seq, r.time / 60000, count(*) FROM readings r JOIN devices d ON d.seq = r.device_seq
    GROUP BY d.account_seq, r.time / 60000;`;

/**
 * Numbered migrations, applied in order inside one transaction each before the server
 * listens. PRAGMA user_version records the last one applied. Never edit a released
 * migration: add a new one.
 *
 * Times are integer milliseconds since the epoch (UTC). Public ids (dev_…, key_…) are
 * UNIQUE text; an integer `seq` is the join key, so the big readings table stores a small
 * integer per row instead of a 20-byte id.
 */
export const MIGRATIONS: { version: number; name: string; sql: string }[] = [
  {
    version: 1,
    name: 'core',
    sql: `
      CREATE TABLE accounts (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        email TEXT NOT NULL UNIQUE COLLATE NOCASE,
        name TEXT NOT NULL DEFAULT '',
        password_hash TEXT,
        plan TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
        rate_per_minute INTEGER NOT NULL,
        rate_per_day INTEGER NOT NULL,
        device_limit INTEGER NOT NULL,
        retention_days INTEGER NOT NULL,
        snapshots_per_day INTEGER NOT NULL,
        snapshot_retention_days INTEGER NOT NULL,
        field_limit INTEGER NOT NULL,
        webhook_secret TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
      );

      CREATE TABLE api_keys (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        account_seq INTEGER NOT NULL REFERENCES accounts(seq) ON DELETE CASCADE,
        name TEXT NOT NULL,
        key_prefix TEXT NOT NULL,
        key_hash TEXT NOT NULL UNIQUE,
        last_used_at INTEGER,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER
      );
      CREATE INDEX api_keys_by_account ON api_keys(account_seq, created_at);

      CREATE TABLE devices (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        account_seq INTEGER NOT NULL REFERENCES accounts(seq) ON DELETE CASCADE,
        name TEXT NOT NULL,
        type TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused')),
        settings TEXT NOT NULL DEFAULT '{}',
        schema_mode TEXT NOT NULL CHECK (schema_mode IN ('strict', 'flexible')),
        fields TEXT NOT NULL DEFAULT '[]',
        snapshots_enabled INTEGER NOT NULL DEFAULT 0,
        token_hash TEXT NOT NULL UNIQUE,
        -- last_seen is derived from readings (clustered by device and time); this column only keeps it once
        -- retention has deleted every reading (see readings repository).
        last_seen INTEGER,
        rejected_count INTEGER NOT NULL DEFAULT 0,
        last_rejection_reason TEXT,
        last_rejection_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
      );
      CREATE INDEX devices_by_account ON devices(account_seq, created_at, seq);

      -- No foreign key here: it would cost a lookup on every insert of the hottest table.
      -- Device deletion removes its readings explicitly.
      -- Clustered on (device_seq, time, seq), WITHOUT ROWID (docs/architecture.md, Storage layout): a
      -- device's newest 1,000 readings sit on a few adjacent pages instead of ~1,000 pages
      -- scattered by interleaved ingest, and no separate (device_seq, time) index is kept up
      -- on every insert. "Newest N of one device in a range" and per-device counts are range
      -- scans of the table itself.
      CREATE TABLE readings (
        device_seq INTEGER NOT NULL,
        time INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (device_seq, time, seq)
      ) WITHOUT ROWID;
      -- The last reading seq ever issued (readings.seq, public id tel_<base36 seq>). The
      -- writer takes a block of seqs per batch from it inside the batch's transaction; it
      -- only grows, so an id is never reused, even after the newest readings are deleted
      -- (device deletion), as AUTOINCREMENT guaranteed before.
      CREATE TABLE reading_seq (last INTEGER NOT NULL);
      INSERT INTO reading_seq (last) VALUES (0);

      CREATE TABLE alerts (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        account_seq INTEGER NOT NULL REFERENCES accounts(seq) ON DELETE CASCADE,
        device_seq INTEGER NOT NULL REFERENCES devices(seq) ON DELETE CASCADE,
        name TEXT NOT NULL,
        field TEXT NOT NULL,
        operator TEXT NOT NULL,
        value REAL NOT NULL,
        actions TEXT NOT NULL DEFAULT '["email"]',
        webhook_url TEXT,
        severity TEXT NOT NULL,
        enabled INTEGER NOT NULL DEFAULT 1,
        cooldown INTEGER NOT NULL DEFAULT 300,
        last_triggered INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
      );
      CREATE INDEX alerts_by_account ON alerts(account_seq, created_at, seq);
      CREATE INDEX alerts_by_device ON alerts(device_seq);

      CREATE TABLE alert_events (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        alert_seq INTEGER NOT NULL REFERENCES alerts(seq) ON DELETE CASCADE,
        device_id TEXT NOT NULL,
        condition_value REAL NOT NULL,
        severity TEXT NOT NULL,
        acknowledged INTEGER NOT NULL DEFAULT 0,
        acknowledged_at INTEGER,
        triggered_at INTEGER NOT NULL,
        reading_seq INTEGER,
        deliveries TEXT NOT NULL DEFAULT '[]'
      );
      CREATE INDEX alert_events_by_alert ON alert_events(alert_seq, triggered_at);
    `,
  },
  {
    version: 2,
    name: 'snapshots',
    // Camera snapshots (docs/snapshots.md). The bytes live
    // in files under <data-dir>/snapshots/ (src/storage/snapshotFiles.ts); this is their index.
    // Rows go with their device (ON DELETE CASCADE); the files are removed by the domain.
    sql: `
      CREATE TABLE snapshots (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        device_seq INTEGER NOT NULL REFERENCES devices(seq) ON DELETE CASCADE,
        content_type TEXT NOT NULL CHECK (content_type IN ('image/jpeg', 'image/png')),
        size INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      );
      -- "how many snapshots has this device uploaded since UTC midnight" (the daily quota).
      CREATE INDEX snapshots_by_device_time ON snapshots(device_seq, created_at);
      -- Retention walks the oldest snapshots first.
      CREATE INDEX snapshots_by_time ON snapshots(created_at);
    `,
  },
  {
    version: 3,
    name: 'dashboard sessions',
    // Only a SHA-256 hash of the session id is stored (a stolen database file holds no usable
    // cookie); the CSRF token is per session and sent by the dashboard's JS in a header.
    sql: `
      CREATE TABLE sessions (
        id_hash TEXT PRIMARY KEY,
        account_seq INTEGER NOT NULL REFERENCES accounts(seq) ON DELETE CASCADE,
        csrf_token TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_used_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      );
      CREATE INDEX sessions_by_account ON sessions(account_seq);
      CREATE INDEX sessions_by_expiry ON sessions(expires_at);
    `,
  },
  {
    // Counts per account and UTC minute, so /v1/account/usage does not count an account's last
    // 24 h from the readings index (millions of entries in a large database): the writer adds
    // each batch, a trigger follows deletions by retention and device deletion, and only the
    // partial first minute is counted from the readings (docs/architecture.md, Storage layout).
    version: 4,
    name: 'reading_counts',
    sql: `
      CREATE TABLE reading_counts (
        account_seq INTEGER NOT NULL,
        minute INTEGER NOT NULL, -- time / 60000 (UTC minutes since the epoch)
        n INTEGER NOT NULL,
        PRIMARY KEY (account_seq, minute)
      ) WITHOUT ROWID;
      ${READING_COUNTS_TRIGGERS}
      ${REBUILD_READING_COUNTS}
    `,
  },
  {
    // New readings are appended to an inbox in arrival (seq) order, and moved into the
    // table clustered by device in large sorted batches (readings repository, mergeInbox).
    // Written straight into the clustered table, a commit of readings from N devices
    // rewrites N pages (one leaf per device tail). The inbox's commit writes one or two
    // pages, and a merge of thousands of readings writes each device's tail once
    // (BENCHMARKS.md, "Design decisions").
    // `readings` stays the name of every reading, as a view over both tables; the
    // reading_counts deletion trigger follows the rename to readings_by_device.
    version: 5,
    name: 'readings inbox',
    sql: `
      ALTER TABLE readings RENAME TO readings_by_device;
      CREATE TABLE readings_inbox (
        seq INTEGER PRIMARY KEY,
        device_seq INTEGER NOT NULL,
        time INTEGER NOT NULL,
        data TEXT NOT NULL
      );
      CREATE VIEW readings AS
        SELECT device_seq, time, seq, data FROM readings_by_device
        UNION ALL SELECT device_seq, time, seq, data FROM readings_inbox;
    `,
  },
  {
    // Aggregates over long ranges (docs/architecture.md, "Rollups"): per-device rollups of numeric paths
    // at three resolutions (level 0: UTC minutes, kept 6 h; 1: 5 minutes, kept 24 h; 2: hours,
    // kept as long as the readings; src/domain/rollups.ts). One row per device, level and
    // bucket; `stats` is JSON keyed by dotted path: a number when the bucket holds one value
    // (it is then count, min, max and sum at once, as compact as the reading), else
    // [count, min, max, sum]. A background job fills them after readings commit; rolled_until
    // is how far it got, and starts at 0 so an upgraded data dir is rolled up from its
    // existing readings in the background. rollup_dirty lists hours that got a reading after
    // they were rolled up (a clock set back, a load of past readings, retention cutting into
    // an hour): they are recomputed before they are used.
    version: 7,
    name: 'reading rollups',
    sql: `
      CREATE TABLE rollups (
        device_seq INTEGER NOT NULL,
        level INTEGER NOT NULL,
        bucket INTEGER NOT NULL, -- start of the UTC bucket, ms since the epoch
        stats TEXT NOT NULL,
        PRIMARY KEY (device_seq, level, bucket)
      ) WITHOUT ROWID;
      CREATE TABLE rollup_state (rolled_until INTEGER NOT NULL);
      INSERT INTO rollup_state (rolled_until) VALUES (0);
      CREATE TABLE rollup_dirty (
        device_seq INTEGER NOT NULL,
        hour INTEGER NOT NULL,
        PRIMARY KEY (device_seq, hour)
      ) WITHOUT ROWID;
    `,
  },
  {
    // Silent-device alerts, resolution and chat channels (docs/alerts.md). `state` and the
    // events' `resolved_at` persist, so a restart neither fires a silence twice nor forgets a
    // firing. `enabled_at` and `devices.resumed_at` bound where a silence may start; the time
    // of the latest reading itself comes from the readings, never from a write per reading.
    version: 8,
    name: 'alert kinds, state and channels',
    sql: `
      ALTER TABLE alerts ADD COLUMN kind TEXT NOT NULL DEFAULT 'threshold' CHECK (kind IN ('threshold', 'no_data'));
      ALTER TABLE alerts ADD COLUMN state TEXT NOT NULL DEFAULT 'ok' CHECK (state IN ('ok', 'firing'));
      ALTER TABLE alerts ADD COLUMN notify_resolved INTEGER NOT NULL DEFAULT 1;
      ALTER TABLE alerts ADD COLUMN clear_value REAL;
      ALTER TABLE alerts ADD COLUMN slack_url TEXT;
      ALTER TABLE alerts ADD COLUMN discord_url TEXT;
      ALTER TABLE alerts ADD COLUMN ntfy_url TEXT;
      ALTER TABLE alerts ADD COLUMN enabled_at INTEGER;
      UPDATE alerts SET enabled_at = created_at;
      -- The silence checker's list: enabled no_data alerts only.
      CREATE INDEX alerts_no_data ON alerts(device_seq) WHERE kind = 'no_data' AND enabled = 1;
      ALTER TABLE alert_events ADD COLUMN resolved_at INTEGER;
      ALTER TABLE alert_events ADD COLUMN resolution_deliveries TEXT NOT NULL DEFAULT '[]';
      ALTER TABLE devices ADD COLUMN resumed_at INTEGER;
    `,
  },
  {
    // Retention used to archive a last_seen of 0 for a device that had never sent a reading,
    // shown as 1970 and "silent": such a device has not been seen.
    version: 9,
    name: 'never-seen devices have no last_seen',
    sql: 'UPDATE devices SET last_seen = NULL WHERE last_seen = 0',
  },
  {
    // devices.seq is a rowid without AUTOINCREMENT: SQLite gives a new row the largest seq + 1,
    // so once the newest device was deleted its seq went to the next device created, in any
    // account, with whatever was still kept under that seq (the rollups' minute figures held in
    // memory until the next pass, in this process or in the server beside an admin command).
    // A device's seq now comes from here and is never issued twice, as reading ids come from
    // reading_seq (PostgreSQL: an identity column). It starts past every seq still referenced.
    version: 10,
    name: 'device seqs are never reused',
    sql: `
      CREATE TABLE device_seq (last INTEGER NOT NULL);
      INSERT INTO device_seq (last) SELECT max(
        (SELECT coalesce(max(seq), 0) FROM devices),
        (SELECT coalesce(max(device_seq), 0) FROM readings_by_device),
        (SELECT coalesce(max(device_seq), 0) FROM readings_inbox),
        (SELECT coalesce(max(device_seq), 0) FROM rollups),
        (SELECT coalesce(max(device_seq), 0) FROM rollup_dirty));
    `,
  },
];

/**
 * Applies pending migrations. Each runs in an IMMEDIATE transaction that re-reads the
 * version first, so `serve` and an admin command starting together on a new data dir
 * cannot both apply the same migration.
 */
export function migrate(db: Database): number {
  for (const m of MIGRATIONS) {
    db.transaction(() => {
      const current = db.pragma('user_version', { simple: true }) as number;
      if (m.version <= current) return;
      db.exec(m.sql);
      db.pragma(`user_version = ${m.version}`);
    }).immediate();
  }
  return db.pragma('user_version', { simple: true }) as number;
}
