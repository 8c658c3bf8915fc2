import type { Pool } from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { AppError } from '../../src/errors.js';
import { connectPostgres } from '../../src/storage/postgres/connect.js';
import { createPostgresRepositories } from '../../src/storage/postgres/index.js';
import { migratePostgres } from '../../src/storage/postgres/migrations.js';
import { PostgresReadingWriter } from '../../src/storage/postgres/readingWriter.js';
import { postgresRollupsRepo } from '../../src/storage/postgres/repos/rollups.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';

const NOW = Date.UTC(2026, 10, 23, 12, 0, 0);
const MINUTE = 60_000;

describe('PostgreSQL reading writer', () => {
  let pg: PostgresServer;
  let url: string;
  /** The writer's pool, and a second one that checks what another connection sees. */
  let pool: Pool;
  let observer: Pool;
  let writer: PostgresReadingWriter;
  let accountSeq: number;
  let devices: number[];

  const count = async (sql = 'SELECT count(*) AS n FROM readings') => (await observer.query<{ n: number }>(sql)).rows[0]!.n;

  beforeAll(async () => {
    pg = await startPostgres();
    url = await createDatabase(pg);
    pool = await connectPostgres(url);
    observer = await connectPostgres(url, { max: 2 });
    await migratePostgres(pool);
    accountSeq = (
      await pool.query(
        "INSERT INTO accounts (id, email, plan, rate_per_minute, rate_per_day, device_limit, retention_days, snapshots_per_day, snapshot_retention_days, field_limit, created_at, updated_at) VALUES ('acc_1', 'a@example.com', 'starter', 1, 1, 1, 1, 1, 1, 1, 0, 0) RETURNING seq",
      )
    ).rows[0].seq;
    devices = (
      await pool.query(
        "INSERT INTO devices (id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at) SELECT 'dev_' || i, $1, 'd', 't', 'flexible', 'h' || i, 0, 0 FROM generate_series(1, 3) i RETURNING seq",
        [accountSeq],
      )
    ).rows.map((r) => r.seq);
    writer = new PostgresReadingWriter(pool, url);
  });
  beforeEach(async () => {
    await pool.query('TRUNCATE readings, reading_counts, reading_count_deltas, rollup_dirty');
  });
  afterAll(async () => {
    await writer?.close();
    await pool?.end();
    await observer?.end();
    await pg?.stop();
  });

  it('writes what one event-loop pass appends in one transaction, acknowledged only after it committed', async () => {
    const seen: number[] = [];
    let first = true;
    const appends = Array.from({ length: 500 }, (_, i) =>
      writer.append({ deviceSeq: devices[i % 3]!, accountSeq, time: NOW + i, data: `{"i":${i}}` }).then(async (seq) => {
        // The first caller answered already finds the whole batch committed.
        if (first) {
          first = false;
          seen.push(await count());
        }
        return seq;
      }),
    );
    const seqs = await Promise.all(appends);
    expect(seen).toEqual([500]);
    expect(new Set(seqs).size).toBe(500);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    // Rows written by one transaction share its id (xmin).
    expect(await count('SELECT count(DISTINCT xmin::text) AS n FROM readings')).toBe(1);
    const { rows } = await observer.query('SELECT seq, data FROM readings ORDER BY seq');
    expect(rows.map((r) => r.seq)).toEqual(seqs);
    expect(rows[499].data).toBe('{"i":499}');
  });

  it('has two batches in flight at most, and batches what arrives meanwhile into the next one', async () => {
    // Holds the statements at their usage counts until every later append is queued.
    const blocker = await observer.connect();
    await blocker.query('BEGIN');
    await blocker.query('LOCK TABLE reading_count_deltas IN EXCLUSIVE MODE');
    const first = Array.from({ length: 10 }, (_, i) => writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW + i, data: '{}' }));
    const later: Promise<number>[] = [];
    for (let pass = 0; pass < 5; pass++) {
      await new Promise((resolve) => setImmediate(resolve));
      for (let i = 0; i < 20; i++) later.push(writer.append({ deviceSeq: devices[1]!, accountSeq, time: NOW + i, data: '{}' }));
    }
    let settled = 0;
    for (const p of [...first, ...later])
      p.then(
        () => settled++,
        () => settled++,
      );
    await new Promise((resolve) => setTimeout(resolve, 100));
    // Nothing is acknowledged while the statements wait.
    expect(settled).toBe(0);
    await blocker.query('COMMIT');
    blocker.release();
    const seqs = await Promise.all([...first, ...later]);
    // The first pass's readings, the second's (the other slot), then the rest together.
    const { rows } = await observer.query(
      'SELECT xmin::text AS tx, count(*) AS n, min(seq) AS lo, max(seq) AS hi FROM readings GROUP BY 1 ORDER BY 2',
    );
    expect(rows.map((r) => r.n)).toEqual([10, 20, 80]);
    // Each batch's ids are one unbroken range, however the two statements ran side by side.
    for (const r of rows) expect(r.hi - r.lo + 1).toBe(r.n);
    expect(new Set(seqs).size).toBe(110);
  });

  it('answers the callers of a batch that commits first only after those of the batch sent before it', async () => {
    // The first reading is late, so its batch marks its hour dirty; another transaction holds
    // that mark uncommitted, so the batch waits for it while the next batch, of a reading
    // stamped later, commits.
    const blocker = await observer.connect();
    const lateBefore = (await observer.query('SELECT late_before FROM rollup_late')).rows[0].late_before;
    try {
      await observer.query('UPDATE rollup_late SET late_before = $1', [NOW + MINUTE]);
      await blocker.query('BEGIN');
      await blocker.query('INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2)', [devices[0], NOW - (NOW % 3_600_000)]);
      const answered: string[] = [];
      const first = writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data: '{"n":1}' }).then(() => answered.push('first'));
      await new Promise((resolve) => setImmediate(resolve));
      const second = writer
        .append({ deviceSeq: devices[1]!, accountSeq, time: NOW + 5 * 60_000, data: '{"n":2}' })
        .then(() => answered.push('second'));
      // The second batch commits (another connection sees it) but is not answered yet.
      for (let i = 0; i < 200 && (await count()) < 1; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(await count()).toBe(1);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(answered).toEqual([]);
      await blocker.query('COMMIT');
      await Promise.all([first, second]);
      expect(answered).toEqual(['first', 'second']);
    } finally {
      await blocker.query('ROLLBACK').catch(() => {});
      blocker.release();
      await observer.query('UPDATE rollup_late SET late_before = $1', [lateBefore]);
    }
  });

  /**
   * Holds every batch at its commit, after its statement ran: a deferred trigger on its usage
   * counts waits for an advisory lock the test holds. batchHeld() waits until a batch waits
   * there; release() lets it go and drops the trigger (after the held batch committed).
   */
  const holdCommits = async () => {
    const holder = await observer.connect();
    await observer.query(`
      CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END $$;
      CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON reading_count_deltas
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit();`);
    await holder.query('SELECT pg_advisory_lock(4242)');
    let released = false;
    return {
      async batchHeld() {
        const waiting = "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted";
        for (let i = 0; i < 200 && (await count(waiting)) < 1; i++) await new Promise((resolve) => setTimeout(resolve, 10));
        expect(await count(waiting)).toBe(1);
      },
      async release() {
        if (released) return;
        released = true;
        await holder.query('SELECT pg_advisory_unlock_all()');
        holder.release();
        await observer.query('DROP TRIGGER hold_commit ON reading_count_deltas; DROP FUNCTION hold_commit()');
      },
    };
  };

  it("keeps a late reading's hour dirty when a settle of that hour runs while its batch commits", async () => {
    // The hour is already marked, so the batch's mark meets the existing row. The batch is
    // held at its commit, after the mark, until the test lets it go: the settle running then
    // must not clear the mark and store rollups without that reading.
    const hour = NOW - (NOW % 3_600_000);
    const rollups = await postgresRollupsRepo(observer);
    const lateBefore = (await observer.query('SELECT late_before FROM rollup_late')).rows[0].late_before;
    const held = await holdCommits();
    try {
      await observer.query('UPDATE rollup_late SET late_before = $1', [NOW + MINUTE]);
      await observer.query('INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2)', [devices[0], hour]);
      const appended = writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data: '{"t":1}' });
      await held.batchHeld();
      // The settle read the hour before the batch: no readings, nothing to write.
      const settled = rollups.settleHour(devices[0]!, hour, [], { to: hour + 3_600_000, readings: 0 });
      await new Promise((resolve) => setTimeout(resolve, 100));
      await held.release();
      await appended;
      expect(await settled).toBe(false);
      expect(await count('SELECT count(*) AS n FROM rollup_dirty')).toBe(1);
    } finally {
      await held.release();
      await observer.query('UPDATE rollup_late SET late_before = $1', [lateBefore]);
    }
  });

  it('leaves a reading committed after its device’s deletion to the retention sweep, which deletes it with its usage count and rollups', async () => {
    // The batch is held at its commit, after its statement saw the device alive; the device
    // is deleted meanwhile, so the batch commits a reading behind it.
    const repos = await createPostgresRepositories(observer);
    const deviceSeq = (
      await observer.query(
        "INSERT INTO devices (id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at) VALUES ('dev_gone', $1, 'd', 't', 'flexible', 'hgone', 0, 0) RETURNING seq",
        [accountSeq],
      )
    ).rows[0].seq;
    const usage = () =>
      count(
        `SELECT coalesce(sum(n), 0)::int AS n FROM (SELECT n FROM reading_counts WHERE account_seq = ${accountSeq}
         UNION ALL SELECT n FROM reading_count_deltas WHERE account_seq = ${accountSeq}) c`,
      );
    const orphans = () => count(`SELECT count(*)::int AS n FROM readings WHERE device_seq = ${deviceSeq}`);
    const held = await holdCommits();
    try {
      const appended = writer.append({ deviceSeq, accountSeq, time: NOW, data: '{"t":1}' });
      await held.batchHeld();
      await repos.devices.removeWithRollups(deviceSeq);
      await held.release();
      await appended;
    } finally {
      await held.release();
    }
    expect(await orphans()).toBe(1);
    expect(await usage()).toBe(1);
    // What the rollup pass makes of it: its hour marked dirty, a minute rolled up.
    await observer.query('INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2)', [deviceSeq, NOW - (NOW % 3_600_000)]);
    await observer.query(`INSERT INTO rollups (device_seq, level, bucket, stats) VALUES ($1, 0, $2, '{"t":1}')`, [deviceSeq, NOW]);

    expect(await repos.readings.sweepRemovedDevices()).toBe(1);
    expect(await orphans()).toBe(0);
    expect(await usage()).toBe(0);
    expect(await count(`SELECT count(*)::int AS n FROM rollups WHERE device_seq = ${deviceSeq}`)).toBe(0);
    expect(await count(`SELECT count(*)::int AS n FROM rollup_dirty WHERE device_seq = ${deviceSeq}`)).toBe(0);

    // Within a day of the deletion, a later pass still sweeps (a node that had not heard of it);
    // after a day the device is forgotten.
    await observer.query(`INSERT INTO readings (device_seq, time, seq, data) VALUES ($1, $2, nextval('reading_seq'), '{"t":2}')`, [
      deviceSeq,
      NOW,
    ]);
    expect(await repos.readings.sweepRemovedDevices()).toBe(1);
    expect(await count('SELECT count(*)::int AS n FROM removed_devices')).toBe(1);
    await observer.query("UPDATE removed_devices SET removed_at = now() - interval '25 hours'");
    expect(await repos.readings.sweepRemovedDevices()).toBe(0);
    expect(await count('SELECT count(*)::int AS n FROM removed_devices')).toBe(0);
  });

  it('keeps data byte for byte', async () => {
    const data = '{ "t" : 21.50, "note":"Grüße \\u00e9 \\"x\\"",  "z":1e3 }';
    const seq = await writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data });
    expect((await observer.query('SELECT data FROM readings WHERE seq = $1', [seq])).rows).toEqual([{ data }]);
  });

  it('keeps every text of a batch apart, escapes, braces and commas included', async () => {
    // The texts travel joined by U+001E; JSON holds that character only escaped.
    const texts = [
      '{"s":"a\\u001eb"}',
      JSON.stringify({ s: 'sep \u001e inside', q: '"{,}"', b: '\\' }),
      '{"list":[1,2,{"x":"}{"}],"null":null}',
      '{}',
      '{"emoji":"😀","nl":"line\\nnext"}',
    ];
    const seqs = await Promise.all(
      texts.map((data, i) => writer.append({ deviceSeq: devices[i % devices.length]!, accountSeq, time: NOW + i, data })),
    );
    const { rows } = await observer.query<{ seq: number; data: string }>(
      'SELECT seq, data FROM readings WHERE seq = ANY($1) ORDER BY seq',
      [seqs],
    );
    expect(rows.map((r) => r.data)).toEqual(texts);
    expect(texts[1]).toContain('\\u001e');
  });

  it('appends usage counts per account and minute in the same transaction, looking up accounts it was not given', async () => {
    const deleted = (
      await pool.query(
        "INSERT INTO devices (id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at) VALUES ('dev_gone', $1, 'd', 't', 'flexible', 'gone', 0, 0) RETURNING seq",
        [accountSeq],
      )
    ).rows[0].seq;
    await pool.query('DELETE FROM devices WHERE seq = $1', [deleted]);
    const outcomes = await Promise.allSettled([
      writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data: '{}' }),
      // A device deleted meanwhile: neither stored nor counted, and refused; the rest of its batch is stored.
      writer.append({ deviceSeq: deleted, accountSeq, time: NOW, data: '{}' }),
      writer.append({ deviceSeq: devices[1]!, time: NOW + 1, data: '{}' }),
      writer.append({ deviceSeq: devices[2]!, accountSeq, time: NOW + MINUTE, data: '{}' }),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
    expect((outcomes[1] as PromiseRejectedResult).reason).toMatchObject({ status: 401, message: 'device no longer exists' });
    // Each kept reading is answered with its own stored id, across the refused one's gap.
    const ids = [0, 2, 3].map((i) => (outcomes[i] as PromiseFulfilledResult<number>).value);
    const stored = await observer.query('SELECT seq, device_seq, time FROM readings WHERE seq = ANY($1)', [ids]);
    const bySeq = new Map(stored.rows.map((r) => [Number(r.seq), [Number(r.device_seq), Number(r.time)]]));
    expect(ids.map((id) => bySeq.get(id))).toEqual([
      [devices[0], NOW],
      [devices[1], NOW + 1],
      [devices[2], NOW + MINUTE],
    ]);
    await writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW + 2, data: '{}' });
    // One row per batch, account and minute, appended: no batch waits on another's row.
    const { rows } = await observer.query('SELECT account_seq, minute, n, xmin::text AS tx FROM reading_count_deltas ORDER BY minute, n');
    expect(rows.map(({ tx: _, ...r }) => r)).toEqual([
      { account_seq: accountSeq, minute: NOW / MINUTE, n: 1 },
      { account_seq: accountSeq, minute: NOW / MINUTE, n: 2 },
      { account_seq: accountSeq, minute: NOW / MINUTE + 1, n: 1 },
    ]);
    const batchTx = (await observer.query('SELECT DISTINCT xmin::text AS tx FROM readings WHERE time = $1', [NOW + MINUTE])).rows;
    expect(batchTx).toEqual([{ tx: rows[2].tx }]);
    expect(await count('SELECT count(*) AS n FROM reading_counts')).toBe(0);
    expect(await count()).toBe(4);
    expect(await count(`SELECT count(*) AS n FROM readings WHERE device_seq = ${deleted}`)).toBe(0);
  });

  it('keeps the usage counts exact while folds, one at a time, run beside the batches and deletions', async () => {
    const repos = await createPostgresRepositories(observer);
    let writing = true;
    let folded = 0;
    // Two loops, as two nodes that both believe they lead: the lock lets one fold at a time.
    const folding = [0, 1].map(async () => {
      while (writing) folded += await repos.readings.foldUsageCounts();
    });
    try {
      // 40 event-loop passes of 50 readings over 4 minutes: batches in flight as folds run.
      const appends: Promise<number>[] = [];
      for (let pass = 0; pass < 40; pass++) {
        for (let i = 0; i < 50; i++) {
          const n = pass * 50 + i;
          appends.push(writer.append({ deviceSeq: devices[n % 3]!, accountSeq, time: NOW + (n % 4) * MINUTE + n, data: '{}' }));
        }
        await new Promise((resolve) => setImmediate(resolve));
      }
      await Promise.all(appends);
      // Deletions append negative counts; a minute left without readings loses its row.
      await observer.query('DELETE FROM readings WHERE time >= $1 AND time < $2', [NOW + 3 * MINUTE, NOW + 4 * MINUTE]);
      await observer.query('DELETE FROM readings WHERE device_seq = $1 AND time < $2', [devices[0], NOW + MINUTE]);
    } finally {
      writing = false;
      await Promise.all(folding);
    }
    try {
      expect(folded).toBeGreaterThan(0);
      await repos.readings.foldUsageCounts();
      const expected = (
        await observer.query(
          'SELECT $1::bigint AS account_seq, time / 60000 AS minute, count(*)::bigint AS n FROM readings GROUP BY 2 ORDER BY 2',
          [accountSeq],
        )
      ).rows;
      expect(expected.map((r) => r.minute)).toEqual([0, 1, 2].map((m) => NOW / MINUTE + m));
      expect((await observer.query('SELECT account_seq, minute, n FROM reading_counts ORDER BY minute')).rows).toEqual(expected);
      expect(await count('SELECT count(*) AS n FROM reading_count_deltas')).toBe(0);
      expect(await repos.readings.countSinceForAccount(accountSeq, NOW)).toBe(await count());
    } finally {
      await repos.externalCommits.close();
      await repos.leadership.close();
    }
  });

  it('creates the partition of a week it has not seen, also one that was dropped meanwhile', async () => {
    const old = Date.UTC(2011, 2, 3);
    const seq = await writer.append({ deviceSeq: devices[0]!, accountSeq, time: old, data: '{}' });
    expect((await observer.query('SELECT tableoid::regclass::text AS part FROM readings WHERE seq = $1', [seq])).rows).toEqual([
      { part: 'readings_20110228' },
    ]);
    await observer.query('DROP TABLE readings_20110228');
    await writer.append({ deviceSeq: devices[0]!, accountSeq, time: old + 1, data: '{}' });
    expect(await count('SELECT count(*) AS n FROM readings_20110228')).toBe(1);
  });

  it('rejects a batch the database refuses with that error, and goes on with the next', async () => {
    // PostgreSQL text cannot hold a NUL (valid JSON never has one unescaped): a permanent error, not a 503.
    const refused = writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data: `{"a":"${String.fromCharCode(0)}"}` });
    await expect(refused).rejects.toMatchObject({ code: '22021' });
    await expect(refused).rejects.not.toBeInstanceOf(AppError);
    expect(await writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data: '{}' })).toBeGreaterThan(0);
    expect(await count()).toBe(1);
  });

  it('rejects with 503 while the database only reads (a standby after a failover), and writes again after', async () => {
    const database = new URL(url).pathname.slice(1);
    // Settings apply to new sessions: end the writer's, so its pool reconnects.
    const reconnect = async () => {
      await observer.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [
        database,
      ]);
      await new Promise((resolve) => setTimeout(resolve, 200));
    };
    await observer.query(`ALTER DATABASE ${database} SET default_transaction_read_only = on`);
    await reconnect();
    try {
      const refused = writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data: '{}' });
      await expect(refused).rejects.toBeInstanceOf(AppError);
      await expect(refused).rejects.toMatchObject({
        status: 503,
        code: 'storage_unavailable',
        retryAfter: 10,
        message: 'storage unavailable: database read-only',
      });
    } finally {
      await observer.query(`ALTER DATABASE ${database} RESET default_transaction_read_only`);
      await reconnect();
    }
    expect(await writer.append({ deviceSeq: devices[0]!, accountSeq, time: NOW, data: '{}' })).toBeGreaterThan(0);
    expect(await count()).toBe(1);
  });

  it('writes what is queued when closed, and refuses appends after', async () => {
    const closing = new PostgresReadingWriter(pool, url);
    const queued = Array.from({ length: 50 }, (_, i) => closing.append({ deviceSeq: devices[2]!, accountSeq, time: NOW + i, data: '{}' }));
    await closing.close();
    expect(await count()).toBe(50);
    expect((await Promise.all(queued)).length).toBe(50);
    await expect(closing.append({ deviceSeq: devices[2]!, accountSeq, time: NOW, data: '{}' })).rejects.toThrow('writer is closed');
  });

  it('rejects with 503 while the database is down, loses no acknowledged reading, and recovers by itself', async () => {
    const acknowledged = new Map<number, string>();
    const rejections: unknown[] = [];
    let stop = false;
    let sent = 0;
    const load = (async () => {
      while (!stop) {
        for (let i = 0; i < 25; i++) {
          const data = `{"n":${sent++}}`;
          writer.append({ deviceSeq: devices[sent % 3]!, accountSeq, time: NOW + sent, data }).then(
            (seq) => acknowledged.set(seq, data),
            (err) => rejections.push(err),
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const waitFor = async (what: string, check: () => boolean) => {
      const deadline = Date.now() + 30_000;
      while (!check()) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    await waitFor('acknowledged readings', () => acknowledged.size >= 200);
    await pg.kill();
    await waitFor('rejections', () => rejections.length >= 100);
    const ackedWhileDown = acknowledged.size;
    await new Promise((resolve) => setTimeout(resolve, 200));
    await pg.start();
    await waitFor('appends after the restart', () => acknowledged.size >= ackedWhileDown + 200);
    stop = true;
    await load;
    await writer.close();
    writer = new PostgresReadingWriter(pool, url);

    for (const err of rejections) {
      expect(err).toBeInstanceOf(AppError);
      expect(err).toMatchObject({
        status: 503,
        code: 'storage_unavailable',
        retryAfter: 10,
        message: 'storage unavailable: database unreachable',
      });
    }
    const causes = new Set(rejections.map((err) => ((err as Error).cause as Error).message));
    for (const cause of causes) expect(cause).toMatch(new RegExp(`^PostgreSQL at 127\\.0\\.0\\.1:${pg.port}: `));
    expect([...causes].join('\n')).not.toContain(pg.password);

    const { rows } = await observer.query<{ seq: number; data: string }>('SELECT seq, data FROM readings');
    const stored = new Map(rows.map((r) => [r.seq, r.data]));
    for (const [seq, data] of acknowledged) expect(stored.get(seq)).toBe(data);
    expect(acknowledged.size + rejections.length).toBe(sent);
  });
  it('plans its statement once on a pool that asks for generic plans, where by default small batches are planned each time', async () => {
    // One connection per pool: pg_prepared_statements shows that session's statements.
    const plans = async (genericPlans: boolean) => {
      const own = await connectPostgres(url, { max: 1, genericPlans });
      const single = new PostgresReadingWriter(own, url);
      try {
        // Each append awaited alone: eight batches of one reading.
        for (let i = 0; i < 8; i++) await single.append({ deviceSeq: devices[0]!, accountSeq, time: NOW + i, data: `{"i":${i}}` });
        await single.close();
        const { rows } = await own.query<{ generic_plans: number; custom_plans: number }>(
          "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'telemetryd-insert-readings'",
        );
        return rows[0];
      } finally {
        await single.close();
        await own.end();
      }
    };
    expect(await plans(true)).toEqual({ generic_plans: 8, custom_plans: 0 });
    const byDefault = await plans(false);
    expect(byDefault!.custom_plans).toBeGreaterThanOrEqual(5);
    expect(await count()).toBe(16);
  });
});
