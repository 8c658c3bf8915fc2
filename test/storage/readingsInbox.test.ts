import path from 'node:path';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { composeServices } from '../../src/composition.js';
import { DB_FILE } from '../../src/storage/db.js';
import { createRepositories } from '../../src/storage/index.js';
import { MIGRATIONS, REBUILD_READING_COUNTS } from '../../src/storage/migrations.js';
import { INBOX_MERGE_ROWS } from '../../src/storage/readingWriter.js';
import { DIRECT_READINGS_PER_DEVICE } from '../../src/storage/repos/readings.js';
import type { PendingReading } from '../../src/storage/repositories.js';
import { onPostgres } from '../helpers/backend.js';
import { useTempDatabases } from '../helpers/db.js';

const HOUR = 3_600_000;
const NOW = Date.UTC(2026, 10, 21, 15, 37, 12, 345);

/**
 * Readings are appended to readings_inbox and merged into readings_by_device in batches
 * (migration 5). Every read must give the same answer whichever table a reading sits in,
 * and a merge must move every reading exactly once.
 */
// SQLite's readings inbox and its merge into the clustered table: no such thing on PostgreSQL.
describe.skipIf(onPostgres)('readings inbox (migration 5)', () => {
  const temp = useTempDatabases();

  async function setup() {
    const db = temp.open(temp.dir());
    const composed = composeServices(db, { clock: { now: () => NOW } });
    const repos = composed.storage.repos;
    const services = { ...composed.services, writer: composed.storage.writer };
    const account = await services.accounts.create({ email: 'i@example.com', plan: 'business' });
    const a = (await services.devices.create(account, { name: 'a' })).device;
    const b = (await services.devices.create(account, { name: 'b' })).device;
    const inInbox = () => (db.prepare('SELECT count(*) AS n FROM readings_inbox').get() as { n: number }).n;
    const inTable = () => (db.prepare('SELECT count(*) AS n FROM readings_by_device').get() as { n: number }).n;
    /** Everything a reader can see of the two devices. */
    const snapshot = () => ({
      history: [a, b].map((d) => repos.readings.history(d.seq, NOW - 30 * HOUR, 25)),
      historyAll: repos.readings.history(a.seq, 0, 10_000),
      latest: [a, b].map((d) => repos.readings.latest(d.seq)),
      range: [...repos.readings.iterateRange(a.seq, NOW - 10 * HOUR, NOW)],
      countSince: repos.readings.countSince([a.seq, b.seq], NOW - 5 * HOUR),
      usage: repos.readings.countSinceForAccount(account.seq, NOW - 24 * HOUR - 30_000),
      lastSeen: [
        repos.devices.findBySeq(a.seq)!.lastSeen,
        repos.devices.listByAccount(account.seq, { limit: 10, offset: 0 }).map((d) => d.lastSeen),
      ],
    });
    /** Readings one batch each: a batch of one device's one reading always goes to the inbox. */
    const appendToInbox = (readings: PendingReading[]) => readings.map((r) => repos.readings.insertBatch([r])[0]!);
    return { db, repos, services, account, a, b, inInbox, inTable, snapshot, appendToInbox };
  }

  it('answers every query alike before and after a merge, with readings split across both tables', async () => {
    const { repos, a, b, inInbox, inTable, snapshot, appendToInbox } = await setup();
    // Older readings merged, newer ones still in the inbox; equal times break ties by seq.
    const older = [];
    for (let t = NOW - 30 * HOUR; t < NOW - 6 * HOUR; t += 17 * 60_000)
      older.push({ deviceSeq: a.seq, time: t, data: `{"t":${t}}` }, { deviceSeq: b.seq, time: t, data: '{"b":1}' });
    appendToInbox(older);
    expect(repos.readings.mergeInbox()).toBe(older.length);
    const newer = [];
    for (let t = NOW - 8 * HOUR; t <= NOW; t += 13 * 60_000)
      newer.push({ deviceSeq: a.seq, time: t, data: `{"t":${t}}` }, { deviceSeq: a.seq, time: t, data: '{"same time":1}' });
    appendToInbox(newer);
    expect(inInbox()).toBe(newer.length);
    expect(inTable()).toBe(older.length);

    const split = snapshot();
    expect(split.historyAll).toHaveLength(older.length / 2 + newer.length);
    // Newest first by (time, seq) across both tables.
    const keys = split.historyAll.map((r) => [r.time, r.seq] as const);
    for (let i = 1; i < keys.length; i++)
      expect(keys[i - 1]![0] > keys[i]![0] || (keys[i - 1]![0] === keys[i]![0] && keys[i - 1]![1] > keys[i]![1])).toBe(true);
    expect(split.latest[0]!.data).toBe('{"same time":1}');
    expect(split.lastSeen[0]).toBe(split.latest[0]!.time);
    // The range holds readings of both tables, oldest first.
    expect(split.range.some((r) => r.time < NOW - 6 * HOUR) && split.range.some((r) => r.time >= NOW - 6 * HOUR)).toBe(true);

    expect(repos.readings.mergeInbox()).toBe(newer.length);
    expect(inInbox()).toBe(0);
    expect(snapshot()).toEqual(split);
    // Nothing left to merge.
    expect(repos.readings.mergeInbox()).toBe(0);
  });

  it('gives the rollups every reading in (time, seq) order, in chunks, from both tables or the clustered one alone', async () => {
    const { db, repos, a, b, appendToInbox } = await setup();
    const older = [];
    for (let t = NOW - 5 * HOUR; t < NOW - 2 * HOUR; t += 10 * 60_000)
      older.push({ deviceSeq: a.seq, time: t, data: `{"t":${t}}` }, { deviceSeq: b.seq, time: t, data: `{"b":${t}}` });
    older.push({ deviceSeq: b.seq, time: NOW - 3 * HOUR, data: '{"same time":1}' });
    appendToInbox(older);
    repos.readings.mergeInbox();
    // Device a also has readings in the inbox before `to`; device b only in the clustered table.
    const newer = [];
    for (let t = NOW - 3 * HOUR - 30_000; t < NOW; t += 11 * 60_000) newer.push({ deviceSeq: a.seq, time: t, data: `{"n":${t}}` });
    appendToInbox(newer);
    const to = NOW - HOUR;
    const chunked = async (deviceSeq: number) => {
      const rows = [...(await repos.rollups.rawFirst(deviceSeq, NOW - 6 * HOUR, to, 4))];
      for (let chunk = rows; chunk.length === 4; ) {
        const [time, seq] = rows[rows.length - 1]!;
        chunk = await repos.rollups.rawAfter(deviceSeq, time, seq, to, 4);
        rows.push(...chunk);
      }
      return rows;
    };
    const stored = (deviceSeq: number) =>
      db
        .prepare(
          `SELECT time, seq, data FROM (SELECT time, seq, data, device_seq FROM readings_by_device UNION ALL SELECT time, seq, data, device_seq FROM readings_inbox)
           WHERE device_seq = ? AND time < ? ORDER BY time, seq`,
        )
        .raw(true)
        .all(deviceSeq, to);
    const ofA = await chunked(a.seq);
    expect(ofA.length).toBe([...older, ...newer].filter((r) => r.deviceSeq === a.seq && r.time < to).length);
    expect(ofA).toEqual(stored(a.seq));
    expect(ofA.some(([, , data]) => data.startsWith('{"n"'))).toBe(true);
    const ofB = await chunked(b.seq);
    expect(ofB).toEqual(stored(b.seq));
    expect(ofB.filter(([time]) => time === NOW - 3 * HOUR)).toHaveLength(2);
  });

  it('keeps device deletion, retention and usage counts exact with readings in the inbox', async () => {
    const { db, repos, services, account, a, b, inInbox, appendToInbox } = await setup();
    const batch = [];
    for (let t = NOW - 40 * HOUR; t <= NOW; t += 11 * 60_000)
      batch.push({ deviceSeq: a.seq, time: t, data: '{"v":1}' }, { deviceSeq: b.seq, time: t, data: '{"v":2}' });
    // Half merged into the clustered table, half straight there, the newest still in the inbox.
    appendToInbox(batch.slice(0, 100));
    repos.readings.mergeInbox();
    repos.readings.insertBatch(batch.slice(100, 200));
    appendToInbox(batch.slice(200));
    expect(inInbox()).toBe(batch.length - 200);
    const brute = (since: number) =>
      (
        db
          .prepare('SELECT count(*) AS n FROM readings r JOIN devices d ON d.seq = r.device_seq WHERE d.account_seq = ? AND r.time >= ?')
          .get(account.seq, since) as { n: number }
      ).n;
    expect(repos.readings.countSinceForAccount(account.seq, NOW - 24 * HOUR)).toBe(brute(NOW - 24 * HOUR));

    // Retention deletes what is older than the cutoff, wherever it was.
    while (repos.readings.deleteOlderBatch(a.seq, NOW - 20 * HOUR, 37) > 0);
    expect(repos.readings.history(a.seq, 0, 10_000).every((r) => r.time >= NOW - 20 * HOUR)).toBe(true);
    expect(repos.readings.countSinceForAccount(account.seq, NOW - 24 * HOUR)).toBe(brute(NOW - 24 * HOUR));

    // A new reading of b lands in the inbox; deleting b removes it too.
    repos.readings.insertBatch([{ deviceSeq: b.seq, time: NOW, data: '{"v":3}' }]);
    expect(inInbox()).toBe(1);
    await services.devices.remove(b);
    expect((db.prepare('SELECT count(*) AS n FROM readings WHERE device_seq = ?').get(b.seq) as { n: number }).n).toBe(0);
    expect(repos.readings.countSinceForAccount(account.seq, NOW - 24 * HOUR)).toBe(brute(NOW - 24 * HOUR));
  });

  it('takes batches of a few busy devices straight into the clustered table, batches spread over many devices into the inbox', async () => {
    const { repos, a, b, inInbox, inTable } = await setup();
    const busy = Array.from({ length: 2 * DIRECT_READINGS_PER_DEVICE }, (_, i) => ({
      deviceSeq: i % 2 ? a.seq : b.seq,
      time: NOW + i,
      data: '{}',
    }));
    repos.readings.insertBatch(busy);
    expect([inInbox(), inTable()]).toEqual([0, busy.length]);
    repos.readings.insertBatch(busy.slice(0, 2 * DIRECT_READINGS_PER_DEVICE - 1));
    expect([inInbox(), inTable()]).toEqual([2 * DIRECT_READINGS_PER_DEVICE - 1, busy.length]);
    expect(repos.readings.inboxRows()).toBe(inInbox());
  });

  it('stores every reading of a large batch over many devices with its own seq, device, time and data', async () => {
    const { db, services, account, repos, inInbox } = await setup();
    const many = await Promise.all(
      Array.from({ length: 70 }, async (_, i) => (await services.devices.create(account, { name: `m${i}` })).device),
    );
    // 63 = 32 + 16 + 8 + 4 + 2 + 1 rows: one statement of every size the batch is split into.
    const batch = many.slice(0, 63).map((d, i) => ({ deviceSeq: d.seq, time: NOW - i, data: `{"i":${i}}` }));
    const seqs = repos.readings.insertBatch(batch);
    expect(inInbox()).toBe(63);
    const rows = db.prepare('SELECT seq, device_seq, time, data FROM readings_inbox ORDER BY seq').all();
    expect(rows).toEqual(batch.map((r, i) => ({ seq: seqs[i], device_seq: r.deviceSeq, time: r.time, data: r.data })));
    // The same for a large batch of two busy devices, straight into the clustered table.
    const busy = Array.from({ length: 70 }, (_, i) => ({ deviceSeq: many[i % 2]!.seq, time: NOW + i, data: `{"b":${i}}` }));
    const busySeqs = repos.readings.insertBatch(busy);
    const stored = db.prepare('SELECT seq, device_seq, time, data FROM readings_by_device ORDER BY seq').all();
    expect(stored).toEqual(busy.map((r, i) => ({ seq: busySeqs[i], device_seq: r.deviceSeq, time: r.time, data: r.data })));
  });

  it('is merged by the writer once INBOX_MERGE_ROWS readings arrived, after their commit', async () => {
    const { repos, services, a, inInbox, inTable } = await setup();
    // One reading per event-loop pass: each batch goes to the inbox.
    const first: number[] = [];
    for (let i = 0; i < INBOX_MERGE_ROWS - 1; i++)
      first.push(await services.writer.append({ deviceSeq: a.seq, time: NOW - i, data: '{}' }));
    await new Promise((r) => setImmediate(r));
    expect(inInbox()).toBe(INBOX_MERGE_ROWS - 1);
    const last = await services.writer.append({ deviceSeq: a.seq, time: NOW + 1, data: '{"last":1}' });
    // Acknowledged from the inbox; the merge follows in its own event-loop step.
    expect(last).toBeGreaterThan(first.at(-1)!);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(inInbox()).toBe(0);
    expect(inTable()).toBe(INBOX_MERGE_ROWS);
    expect(repos.readings.latest(a.seq)!.data).toBe('{"last":1}');
  });

  it('counts readings left in the inbox by an earlier process (a crash, a restored backup) when it opens', async () => {
    const { db, repos, a, inInbox } = await setup();
    repos.readings.insertBatch([{ deviceSeq: a.seq, time: NOW, data: '{}' }]);
    const reopened = createRepositories(db);
    expect(reopened.readings.inboxRows()).toBe(1);
    expect(reopened.readings.mergeInbox()).toBe(1);
    expect(inInbox()).toBe(0);
  });

  it('is merged on close, so a stopped server leaves an empty inbox', async () => {
    const { services, a, inInbox, inTable } = await setup();
    await services.writer.append({ deviceSeq: a.seq, time: NOW, data: '{}' });
    expect(inInbox()).toBe(1);
    services.writer.close();
    expect(inInbox()).toBe(0);
    expect(inTable()).toBe(1);
  });
});

/** A database as a release at schema `version` left it, with one account (seq 1). */
function databaseOfVersion(dir: string, version: number): Database.Database {
  const old = new Database(path.join(dir, DB_FILE));
  for (const m of MIGRATIONS.filter((m) => m.version <= version)) old.exec(m.sql);
  old.pragma(`user_version = ${version}`);
  old.exec(`INSERT INTO accounts (seq, id, email, plan, rate_per_minute, rate_per_day, device_limit, retention_days, snapshots_per_day,
      snapshot_retention_days, field_limit, created_at, updated_at) VALUES (1, 'acc_1', 'm@example.com', 'business', 60, 1000, 10, 30, 10, 7, 50, 0, 0)`);
  return old;
}

// A SQLite migration.
describe.skipIf(onPostgres)('migration 5 on a database of version 4', () => {
  const temp = useTempDatabases();

  it('keeps every reading: they stay in readings_by_device and are read as before', async () => {
    const dir = temp.dir();
    // A version-4 database with readings, as the previous release left it.
    const old = databaseOfVersion(dir, 4);
    old.exec(
      `INSERT INTO devices (seq, id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at) VALUES (1, 'dev_1', 1, 'd', 'sensor', 'flexible', 'x', 0, 0)`,
    );
    const insert = old.prepare('INSERT INTO readings (device_seq, time, seq, data) VALUES (1, ?, ?, ?)');
    for (let i = 1; i <= 50; i++) insert.run(NOW - i * 60_000, i, `{"i":${i}}`);
    old.exec('UPDATE reading_seq SET last = 50');
    old.exec(REBUILD_READING_COUNTS);
    old.close();

    const db = temp.open(dir);
    expect(db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.at(-1)!.version);
    const repos = createRepositories(db);
    expect((db.prepare('SELECT count(*) AS n FROM readings_by_device').get() as { n: number }).n).toBe(50);
    expect(repos.readings.history(1, 0, 100).map((r) => r.seq)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(repos.readings.countSinceForAccount(1, NOW - 24 * HOUR)).toBe(50);
    // New readings go to the inbox with the next seq; deletions still update the counts.
    expect(repos.readings.insertBatch([{ deviceSeq: 1, time: NOW, data: '{"new":1}' }])).toEqual([51]);
    while (repos.readings.deleteOlderBatch(1, NOW - 30 * 60_000, 7) > 0);
    // 30 old readings of the last half hour, and the new one.
    expect(repos.readings.countSinceForAccount(1, NOW - 24 * HOUR)).toBe(31);
    expect(repos.readings.latest(1)!.seq).toBe(51);
  });
});

describe.skipIf(onPostgres)('migration 9 on a database of version 8', () => {
  const temp = useTempDatabases();

  it('gives a device whose last_seen retention had set to 0 no last_seen, and keeps a real one', () => {
    const dir = temp.dir();
    const old = databaseOfVersion(dir, 8);
    const device = old.prepare(
      `INSERT INTO devices (seq, id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at, last_seen) VALUES (?, ?, 1, 'd', 'sensor', 'flexible', ?, 0, 0, ?)`,
    );
    device.run(1, 'dev_never', 'x', 0);
    device.run(2, 'dev_seen', 'y', NOW);
    old.close();

    const db = temp.open(dir);
    expect(db.prepare('SELECT id, last_seen FROM devices ORDER BY seq').all()).toEqual([
      { id: 'dev_never', last_seen: null },
      { id: 'dev_seen', last_seen: NOW },
    ]);
  });
});
