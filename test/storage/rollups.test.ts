/**
 * Rollups of numeric paths (migration 7, docs/architecture.md, "Rollups") stay equal to the readings:
 * across many background passes while readings keep arriving, after retention deletes old
 * readings, after device deletion, after backup and restore, and on a data dir made before
 * rollups existed (upgraded in place, rolled up in the background).
 */
import { rmSync } from 'node:fs';
import path from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LEVELS, ROWS_PER_STEP } from '../../src/domain/rollups.js';
import { openDatabase } from '../../src/storage/db.js';
import { MIGRATIONS } from '../../src/storage/migrations.js';
import { onPostgres, sqliteDb, storedRows } from '../helpers/backend.js';
import { runCliAsync } from '../helpers/cli.js';
import { ingest, seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { type Bucket, expectedBuckets, expectSameBuckets, insertReadings, type Reading, seededRandom } from '../http/aggregateHelpers.js';

const MIN = 60_000;
const HOUR = 3_600_000;
const DAY = 86_400_000;
const START = Date.UTC(2025, 5, 2, 8, 17, 41, 3);

const servers: TestServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function start(clock: { now(): number }, dataDir?: string) {
  const server = await startTestServer(dataDir ? { 'data-dir': dataDir } : {}, { clock });
  servers.push(server);
  // On PostgreSQL the node takes the lead of the background jobs a moment after it starts,
  // and starting them then would undo a stop() a test made before: wait for it.
  await vi.waitFor(() => expect(server.leadsJobs()).toBe(true), { timeout: 5_000 });
  await nextTurn();
  return server;
}

/**
 * A server on its own data dir, and a restart of it: readings committed before the restart
 * are rolled from the database, those committed after from the figures held in memory.
 */
async function startOnOwnDir(clock: { now(): number }) {
  const dir = tempDir();
  dirs.push(dir);
  return start(clock, dir);
}
async function restart(server: TestServer, clock: { now(): number }) {
  servers.splice(servers.indexOf(server), 1);
  await server.stop();
  return start(clock, server.dataDir);
}

/** Every stored reading of a device (not capped at 1,000 like the history endpoint). */
async function storedReadings(server: TestServer, deviceSeq: number): Promise<Reading[]> {
  return (await storedRows(server.storage, deviceSeq)).map((r) => ({ time: r.time, data: JSON.parse(r.data) as Record<string, unknown> }));
}

async function aggregate(server: TestServer, key: string, deviceId: string, qs: string): Promise<Bucket[]> {
  const res = await server.request(`/v1/devices/${deviceId}/telemetry/aggregate?${qs}`, { key });
  expect(res.status, qs).toBe(200);
  return ((await res.json()) as { data: Bucket[] }).data;
}

const MINUTES = 0;
const HOURS = 2;
const rollupCount = async (server: TestServer, level: number, deviceSeq: number) =>
  (await server.storage.repos.rollups.rows(deviceSeq, level, 0, Number.MAX_SAFE_INTEGER)).length;

async function expectMatchesReadings(server: TestServer, key: string, device: { id: string; seq: number }, now: number) {
  const readings = await storedReadings(server, device.seq);
  const cases = [
    ['1h', '1m'],
    ['6h', '1m'],
    ['6h', '15m'],
    ['24h', '5m'],
    ['24h', '1h'],
    ['7d', '1h'],
    ['7d', '15m'],
    ['30d', '6h'],
    ['30d', '1d'],
  ];
  for (const [range, interval] of cases) {
    const got = await aggregate(server, key, device.id, `range=${range}&interval=${interval}`);
    expectSameBuckets(got, expectedBuckets(readings, now, range!, interval!, null).buckets);
  }
}

describe('reading rollups', () => {
  it('stay equal to the readings over many passes while readings arrive, minute rollups kept for a day', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    const rnd = seededRandom(3);
    let sent = 0;
    // 40 passes, 50 minutes apart (33 hours): each adds the readings of its interval at
    // irregular times, one adds a burst of more readings in one hour than a pass step reads.
    for (let pass = 0; pass < 40; pass++) {
      const from = clock.t;
      clock.t += 50 * MIN;
      const n = pass === 17 ? ROWS_PER_STEP + 1_500 : Math.floor(rnd() * 25);
      const batch: Reading[] = [];
      for (let i = 0; i < n; i++) {
        const time = pass === 17 ? from + 10 * MIN + Math.floor((i * 40 * MIN) / n) : from + Math.floor(rnd() * 50 * MIN);
        batch.push({ time, data: { t: Math.round(rnd() * 4000) / 100 - 10, env: { rh: Math.floor(rnd() * 100) }, i: sent++ } });
      }
      await insertReadings(server, seed.device.seq, batch);
      const run = await server.services.rollups.runOnce();
      expect(run.readings).toBeGreaterThanOrEqual(0);
    }
    expect(server.storage.repos.rollups.rolledUntil()).toBe(Math.floor((clock.t - 5_000) / MIN) * MIN);
    await expectMatchesReadings(server, seed.key, seed.device, clock.t);
    // Rows older than a level keeps are pruned (hourly); hour rollups stay.
    const oldest = async (level: number) =>
      (await server.storage.repos.rollups.rows(seed.device.seq, level, 0, Number.MAX_SAFE_INTEGER))[0]![0];
    expect(await oldest(0)).toBeGreaterThanOrEqual(clock.t - LEVELS[0].keepMs - HOUR);
    expect(await oldest(0)).toBeLessThan(clock.t - LEVELS[0].keepMs + HOUR);
    expect(await oldest(1)).toBeGreaterThanOrEqual(clock.t - LEVELS[1].keepMs - HOUR);
    expect(await oldest(HOURS)).toBe(Math.floor(START / HOUR) * HOUR);
    // A rebuild from the readings gives the same answers.
    await server.services.rollups.rebuild();
    await expectMatchesReadings(server, seed.key, seed.device, clock.t);
  });

  it('are rolled from the values ingest parsed, and from the database for what came before a restart mid-hour', async () => {
    const clock = { t: START, now: () => clock.t };
    let server = await startOnOwnDir(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    const rnd = seededRandom(11);
    let total = 0;
    // Three hours of readings over HTTP, a pass every 20 minutes, a restart 1 h 45 min in.
    for (let minute = 0; minute < 180; minute++) {
      for (let i = 0, n = Math.floor(rnd() * 4); i < n; i++) {
        clock.t += Math.floor(rnd() * 10_000);
        const data = { t: Math.round(rnd() * 4000) / 100 - 10, env: { rh: Math.floor(rnd() * 100), ok: true }, tag: 'x', list: [1, 2] };
        expect((await ingest(server, { device_id: seed.device.id, access_token: seed.token, data })).status).toBe(200);
        total++;
      }
      clock.t = START + (minute + 1) * MIN;
      if (minute % 20 === 19) await server.services.rollups.runOnce();
      if (minute === 105) server = await restart(server, clock);
    }
    clock.t += 10 * MIN;
    await server.services.rollups.runOnce();
    expect(await storedReadings(server, seed.device.seq)).toHaveLength(total);
    await expectMatchesReadings(server, seed.key, seed.device, clock.t);
    // The rollups alone (no raw tail: everything is rolled) hold every reading once.
    const minuteRows = await server.storage.repos.rollups.rows(seed.device.seq, MINUTES, 0, clock.t);
    const counted = minuteRows.reduce((n, [, text]) => {
      const t = (JSON.parse(text) as Record<string, number | number[]>).t!;
      return n + (typeof t === 'number' ? 1 : t[0]!);
    }, 0);
    expect(counted).toBe(total);
  });

  it('follow retention: rollups of deleted readings go, so a longer retention later counts only what is left', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    const readings: Reading[] = [];
    for (let t = START - 6 * DAY; t < START - MIN; t += 17 * MIN) readings.push({ time: t, data: { v: (t / MIN) % 97, env: { x: 1 } } });
    await insertReadings(server, seed.device.seq, readings);
    await server.services.rollups.runOnce();
    const hoursBefore = await rollupCount(server, HOURS, seed.device.seq);
    expect(hoursBefore).toBeGreaterThan(6 * 24 - 2);

    await server.services.accounts.setPlan(seed.account.id, 'enterprise', { retentionDays: 2 });
    const run = await server.retention.runOnce();
    expect(run.deleted).toBeGreaterThan(0);
    const cutoff = START - 2 * DAY;
    for (const level of LEVELS.keys())
      expect(await server.storage.repos.rollups.rows(seed.device.seq, level, 0, cutoff), `level ${level}`).toEqual([]);
    expect(await rollupCount(server, HOURS, seed.device.seq)).toBeLessThan(hoursBefore / 2);

    // Back to a long retention: the 7-day figures are those of the readings still stored.
    await server.services.accounts.setPlan(seed.account.id, 'enterprise');
    await expectMatchesReadings(server, seed.key, seed.device, clock.t);
    const week = await aggregate(server, seed.key, seed.device.id, 'range=7d&interval=1d');
    expect(week.reduce((n, b) => n + b.values.v!.count, 0)).toBe((await storedReadings(server, seed.device.seq)).length);
    expect(Date.parse(week[0]!.time)).toBeGreaterThanOrEqual(Math.floor(cutoff / DAY) * DAY);
  });

  it('go with their device', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    await insertReadings(server, seed.device.seq, [{ time: START - 2 * HOUR, data: { v: 1 } }]);
    await server.services.rollups.runOnce();
    expect(await rollupCount(server, HOURS, seed.device.seq)).toBe(1);
    expect(await rollupCount(server, MINUTES, seed.device.seq)).toBe(1);
    await server.services.devices.remove(seed.device);
    expect(await rollupCount(server, HOURS, seed.device.seq)).toBe(0);
    expect(await rollupCount(server, MINUTES, seed.device.seq)).toBe(0);
  });

  it('of a device deleted before the pass reached its readings never become those of a device created after it', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const gone = await seedAccount(server, { plan: 'enterprise' });
    // Past the first whole minute of this process: held in memory until the next pass.
    clock.t = START + 2 * MIN;
    expect((await ingest(server, { device_id: gone.device.id, access_token: gone.token, data: { v: 1000 } })).status).toBe(200);
    await server.services.devices.remove(gone.device);

    const next = await seedAccount(server, { plan: 'enterprise' });
    clock.t += 10_000;
    expect((await ingest(server, { device_id: next.device.id, access_token: next.token, data: { v: 1 } })).status).toBe(200);
    clock.t += 10 * MIN;
    await server.services.rollups.runOnce();
    const minutes = await server.storage.repos.rollups.rows(next.device.seq, MINUTES, 0, clock.t);
    expect(minutes.map(([, stats]) => JSON.parse(stats))).toEqual([{ v: 1 }]);
    const buckets = await aggregate(server, next.key, next.device.id, 'range=1h&interval=1m');
    expect(buckets.flatMap((b) => (b.values.v ? [b.values.v] : []))).toEqual([{ count: 1, min: 1, max: 1, avg: 1 }]);
  });

  it('a pass that reaches a device deleted after the pass began writes nothing for it', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const gone = await seedAccount(server, { plan: 'enterprise' });
    // Past the first whole minute of this process: held in memory until the next pass.
    clock.t = START + 2 * MIN;
    expect((await ingest(server, { device_id: gone.device.id, access_token: gone.token, data: { v: 7 } })).status).toBe(200);
    clock.t += 10 * MIN;
    // The pass lists the devices first and works through them a step at a time, yielding in
    // between: here the deletion lands right after the pass read the device's readings (on
    // SQLite, where the minutes since the start are held in memory, it read none).
    const rollups = server.storage.repos.rollups as { rawFirst(seq: number, from: number, to: number, limit: number): unknown };
    const rawFirst = rollups.rawFirst;
    rollups.rawFirst = async (seq, from, to, limit) => {
      const rows = await rawFirst(seq, from, to, limit);
      if (seq === gone.device.seq) {
        rollups.rawFirst = rawFirst;
        await server.services.devices.remove(gone.device);
      }
      return rows;
    };
    await server.services.rollups.runOnce();
    for (const level of LEVELS.keys())
      expect(await server.storage.repos.rollups.rows(gone.device.seq, level, 0, clock.t), `level ${level}`).toEqual([]);
  });

  it('are carried by backup and restore', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    const readings: Reading[] = [];
    for (let t = START - 3 * DAY; t < START; t += 7 * MIN) readings.push({ time: t, data: { v: t % 1013, nested: { w: -(t % 17) } } });
    await insertReadings(server, seed.device.seq, readings);
    await server.services.rollups.runOnce();
    const before = await aggregate(server, seed.key, seed.device.id, 'range=7d');
    const archive = path.join(tempDir(), 'backup.tar.gz');
    dirs.push(path.dirname(archive));
    const backup = await runCliAsync(['backup', archive, '--json'], { dataDir: server.dataDir });
    expect(backup.status, backup.stderr).toBe(0);
    const restoredDir = tempDir();
    dirs.push(restoredDir);
    rmSync(restoredDir, { recursive: true });
    const restore = await runCliAsync(['restore', archive, '--json'], { dataDir: restoredDir });
    expect(restore.status, restore.stderr).toBe(0);
    const restored = await start(clock, restoredDir);
    // Rows came with the archive: no pass has run on the restored server yet.
    expect(await rollupCount(restored, HOURS, seed.device.seq)).toBe(await rollupCount(server, HOURS, seed.device.seq));
    expect(restored.storage.repos.rollups.rolledUntil()).toBe(server.storage.repos.rollups.rolledUntil());
    expect(await aggregate(restored, seed.key, seed.device.id, 'range=7d')).toEqual(before);
    await expectMatchesReadings(restored, seed.key, seed.device, clock.t);
  });

  // A SQLite data dir of an older schema, upgraded by SQLite's migrations.
  it.skipIf(onPostgres)('are built in the background for a data dir made before them (migration 7 upgrades it in place)', async () => {
    const clock = { t: START, now: () => clock.t };
    const dataDir = tempDir();
    dirs.push(dataDir);
    let seed: Awaited<ReturnType<typeof seedAccount>>;
    {
      const server = await startTestServer({ 'data-dir': dataDir }, { clock });
      seed = await seedAccount(server, { plan: 'enterprise' });
      const readings: Reading[] = [];
      for (let t = START - 10 * DAY; t < START; t += 11 * MIN) readings.push({ time: t, data: { v: t % 101, a: { b: { c: 2 } } } });
      await insertReadings(server, seed.device.seq, readings);
      await server.close();
    }
    // Make it a data dir of the version before rollups: schema 5, without what migrations 7
    // (rollup tables), 8 (alert kinds and state) and 10 (the device seq counter) added.
    const db = openDatabase(dataDir);
    db.exec('DROP TABLE rollups; DROP TABLE rollup_state; DROP TABLE rollup_dirty; DROP TABLE device_seq');
    db.exec('DROP INDEX alerts_no_data');
    for (const column of ['kind', 'state', 'notify_resolved', 'clear_value', 'slack_url', 'discord_url', 'ntfy_url', 'enabled_at'])
      db.exec(`ALTER TABLE alerts DROP COLUMN ${column}`);
    db.exec('ALTER TABLE alert_events DROP COLUMN resolved_at; ALTER TABLE alert_events DROP COLUMN resolution_deliveries');
    db.exec('ALTER TABLE devices DROP COLUMN resumed_at');
    db.pragma('user_version = 5');
    db.close();

    const server = await start(clock, dataDir);
    expect(sqliteDb(server.storage).pragma('user_version', { simple: true })).toBe(MIGRATIONS.at(-1)!.version);
    expect(server.storage.repos.rollups.rolledUntil()).toBe(0);
    // Before the job has run, answers come from the readings and are already right.
    await expectMatchesReadings(server, seed.key, seed.device, clock.t);
    const run = await server.services.rollups.runOnce();
    expect(run.readings).toBe((await storedReadings(server, seed.device.seq)).length);
    expect(await rollupCount(server, HOURS, seed.device.seq)).toBeGreaterThan(10 * 24 - 2);
    await expectMatchesReadings(server, seed.key, seed.device, clock.t);
  });

  it('wait while ingest commits fast, then catch up, when they read readings back after a restart', { timeout: 20_000 }, async () => {
    const clock = { t: START, now: () => clock.t };
    let server = await startOnOwnDir(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    const other = (await server.services.devices.create(seed.account, { name: 'busy' })).device;
    await server.services.rollups.runOnce();
    clock.t += 3 * MIN;
    const rolledBefore = server.storage.repos.rollups.rolledUntil();
    const readings: Reading[] = Array.from({ length: ROWS_PER_STEP * 2 }, (_, i) => ({
      time: rolledBefore + Math.floor((i * 2 * MIN) / (ROWS_PER_STEP * 2)),
      data: { v: i },
    }));
    await insertReadings(server, seed.device.seq, readings);
    server = await restart(server, clock);
    // Another device's readings through the writer, ~4,000 a second.
    const noise = setInterval(() => {
      for (let i = 0; i < 200; i++) void server.storage.writer.append({ deviceSeq: other.seq, time: clock.now(), data: '{"n":1}' });
    }, 50);
    let done = false;
    try {
      await new Promise((r) => setTimeout(r, 1_200)); // one sampling window of ingest
      const pass = server.services.rollups.runOnce().then((run) => {
        done = true;
        return run;
      });
      await new Promise((r) => setTimeout(r, 2_500));
      expect(done).toBe(false);
      expect(server.storage.repos.rollups.rolledUntil()).toBe(rolledBefore);
      clearInterval(noise);
      const run = await pass;
      expect(run.readings).toBe(readings.length);
      expect(server.storage.repos.rollups.rolledUntil()).toBeGreaterThan(rolledBefore);
    } finally {
      clearInterval(noise);
    }
  });

  it('an hour denser than a step is read in chunks of a step, and its rollups equal the readings', async () => {
    const clock = { t: START, now: () => clock.t };
    let server = await startOnOwnDir(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    await server.services.rollups.runOnce();
    const rolledBefore = server.storage.repos.rollups.rolledUntil();
    const hour = Math.ceil(rolledBefore / HOUR) * HOUR;
    // 2.5 steps of readings in one hour, seven to a millisecond (chunks end mid-millisecond),
    // plus a few before and after it.
    const dense = Math.floor(ROWS_PER_STEP * 2.5);
    const readings: Reading[] = [
      { time: hour - 10 * MIN, data: { v: -1 } },
      ...Array.from({ length: dense }, (_, i) => ({ time: hour + 7 * MIN + Math.floor(i / 7), data: { v: i % 100, w: i } })),
      { time: hour + HOUR + 3 * MIN, data: { v: 1e6 } },
    ];
    await insertReadings(server, seed.device.seq, readings);
    clock.t = hour + 2 * HOUR;
    server = await restart(server, clock);
    const run = await server.services.rollups.runOnce();
    expect(run.readings).toBe(readings.length);
    await expectMatchesReadings(server, seed.key, seed.device, clock.t);

    // The same again, stopped at the pass's first yield: one step's worth was read.
    const next = clock.t + HOUR;
    await insertReadings(
      server,
      seed.device.seq,
      Array.from({ length: dense }, (_, i) => ({ time: next + Math.floor(i / 7), data: { v: i } })),
    );
    clock.t = next + 2 * HOUR;
    server = await restart(server, clock);
    const pass = server.services.rollups.runOnce();
    await server.services.rollups.stop();
    expect((await pass).readings).toBe(ROWS_PER_STEP);
  });

  it('a pass asked for while the job stops (shutdown) still ends at its next step', async () => {
    const clock = { t: START, now: () => clock.t };
    let server = await startOnOwnDir(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    await server.services.rollups.runOnce();
    const rolledBefore = server.storage.repos.rollups.rolledUntil();
    // Four hours of readings, a few steps' worth.
    const readings: Reading[] = Array.from({ length: ROWS_PER_STEP * 3 }, (_, i) => ({
      time: rolledBefore + Math.floor((i * 4 * HOUR) / (ROWS_PER_STEP * 3)),
      data: { v: i },
    }));
    await insertReadings(server, seed.device.seq, readings);
    clock.t += 5 * HOUR;
    server = await restart(server, clock);
    const rollups = server.services.rollups;
    const pass = rollups.runOnce();
    const stopping = rollups.stop();
    const joined = rollups.runOnce();
    const [run] = await Promise.all([pass, joined, stopping]);
    expect(run.readings).toBeGreaterThan(0);
    expect(run.readings).toBeLessThan(readings.length);
    expect(server.storage.repos.rollups.rolledUntil()).toBe(rolledBefore);
  });

  // Storage refusing writes is SQLite's query_only here (PostgreSQL's read-only standby: test/postgres/readingWriter.test.ts).
  it.skipIf(onPostgres)('a query answers from the readings when a dirty hour cannot be recomputed (storage refusing writes)', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    await insertReadings(server, seed.device.seq, [{ time: START - 2 * HOUR, data: { v: 1 } }]);
    await server.services.rollups.runOnce();
    // A late reading marks its (rolled-up) hour dirty; then writes start failing.
    await insertReadings(server, seed.device.seq, [{ time: START - 2 * HOUR + 1, data: { v: 5 } }]);
    expect(await server.storage.repos.rollups.dirtyHours(seed.device.seq)).toHaveLength(1);
    sqliteDb(server.storage).pragma('query_only = ON');
    try {
      const account = (await server.services.accounts.get(seed.account.seq))!;
      const result = await server.services.aggregates.aggregate(account, seed.device, { range: '6h', interval: '1h' });
      const buckets = JSON.parse(result.dataJson) as Bucket[];
      expect(buckets.map((b) => b.values.v)).toEqual([{ count: 2, min: 1, max: 5, avg: 3 }]);
    } finally {
      sqliteDb(server.storage).pragma('query_only = OFF');
    }
    expect(await server.storage.repos.rollups.dirtyHours(seed.device.seq)).toHaveLength(1);
  });

  it('a dirty hour is not settled from readings that changed after they were read', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    const hour = Math.floor((START - 2 * HOUR) / HOUR) * HOUR;
    await insertReadings(server, seed.device.seq, [{ time: START - 2 * HOUR, data: { v: 1 } }]);
    await server.services.rollups.runOnce();
    await insertReadings(server, seed.device.seq, [{ time: START - 2 * HOUR + 1, data: { v: 5 } }]);
    const rollups = server.storage.repos.rollups;
    expect(await rollups.dirtyHours(seed.device.seq)).toEqual([hour]);
    // Rows computed from the one reading read before the late one committed: refused, the
    // mark stays and the stored rollup is left as it was.
    const stale = [{ level: HOURS, deleteFrom: hour, deleteTo: hour + HOUR, rows: [[hour, '{"v":[9,9,9,9]}']] as [number, string][] }];
    expect(await rollups.settleHour(seed.device.seq, hour, stale, { to: hour + HOUR, readings: 1 })).toBe(false);
    expect(await rollups.dirtyHours(seed.device.seq)).toEqual([hour]);
    expect((await rollups.rows(seed.device.seq, HOURS, hour, hour + HOUR)).map(([, text]) => text)).not.toContain('{"v":[9,9,9,9]}');
    // The next settle reads both readings and clears the mark.
    expect(await server.services.rollups.settleDevice(seed.device.seq)).toBe(1);
    expect(await rollups.dirtyHours(seed.device.seq)).toEqual([]);
    await expectMatchesReadings(server, seed.key, seed.device, START);
  });

  it('a query does not hide a fault that is not storage: recomputing a corrupt dirty hour fails the query', async () => {
    const clock = { t: START, now: () => clock.t };
    const server = await start(clock);
    const seed = await seedAccount(server, { plan: 'enterprise' });
    await insertReadings(server, seed.device.seq, [{ time: START - 2 * HOUR, data: { v: 1 } }]);
    await server.services.rollups.runOnce();
    // A late reading days before the queried range, whose data is not JSON: recomputing its
    // (dirty) hour throws, and the fallback to the readings of the range would hide that.
    await server.storage.writer.append({ deviceSeq: seed.device.seq, time: START - 3 * DAY, data: '{not json' });
    expect(await server.storage.repos.rollups.dirtyHours(seed.device.seq)).toHaveLength(1);
    const account = (await server.services.accounts.get(seed.account.seq))!;
    await expect(server.services.aggregates.aggregate(account, seed.device, { range: '6h', interval: '1h' })).rejects.toThrow(SyntaxError);
  });
});
