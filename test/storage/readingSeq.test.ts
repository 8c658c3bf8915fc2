import { describe, expect, it } from 'vitest';
import { composeServices } from '../../src/composition.js';
import { createRepositories } from '../../src/storage/index.js';
import { onPostgres } from '../helpers/backend.js';
import { useTempDatabases } from '../helpers/db.js';

/**
 * readings is clustered on (device_seq, time, seq) WITHOUT ROWID (migration 1); seqs come
 * from reading_seq, which only grows: a public id tel_<seq> is never issued twice, even
 * after the newest readings are deleted with their device.
 */
// SQLite's reading_seq table; PostgreSQL's sequence: test/postgres/repositories.test.ts.
describe.skipIf(onPostgres)('reading seqs (migration 1: reading_seq)', () => {
  const temp = useTempDatabases();

  it('are increasing in batch order and never reused after the newest readings are deleted, across reopen', async () => {
    const dir = temp.dir();
    let db = temp.open(dir);
    const composed = composeServices(db);
    let repos = composed.storage.repos;
    const services = { ...composed.services, writer: composed.storage.writer };
    const account = await services.accounts.create({ email: 's@example.com', plan: 'business' });
    const a = (await services.devices.create(account, { name: 'a' })).device;
    const b = (await services.devices.create(account, { name: 'b' })).device;
    const t = Date.now();
    const first = repos.readings.insertBatch([
      { deviceSeq: a.seq, time: t, data: '{"n":1}' },
      { deviceSeq: b.seq, time: t - 5, data: '{"n":2}' },
    ]);
    expect(first[1]).toBe(first[0]! + 1);
    const newest = repos.readings.insertBatch([{ deviceSeq: b.seq, time: t, data: '{"n":3}' }]);
    expect(newest[0]).toBe(first[1]! + 1);
    // Device b held the newest readings; they go with it.
    while (repos.readings.deleteBatchOfDevice(b.seq, 1) > 0);
    expect((db.prepare('SELECT count(*) AS n FROM readings WHERE device_seq = ?').get(b.seq) as { n: number }).n).toBe(0);
    db.close();
    db = temp.open(dir);
    repos = createRepositories(db);
    const after = repos.readings.insertBatch([{ deviceSeq: a.seq, time: t + 1, data: '{"n":4}' }]);
    expect(after[0]).toBeGreaterThan(newest[0]!);
    expect(repos.readings.latest(a.seq)).toMatchObject({ seq: after[0], time: t + 1, data: '{"n":4}' });
    expect(repos.readings.history(a.seq, 0, 10).map((r) => r.seq)).toEqual([after[0], first[0]]);
    expect(repos.readings.deleteOlderBatch(a.seq, t + 1, 10)).toBe(1);
    expect([...repos.readings.iterateRange(a.seq, 0, t + 2)].map((r) => r.data)).toEqual(['{"n":4}']);
  });

  it('are never issued twice by two connections, even after a batch that rolled back', async () => {
    const dir = temp.dir();
    const db = temp.open(dir);
    const services = composeServices(db).services;
    const account = await services.accounts.create({ email: 'r@example.com', plan: 'business' });
    const a = (await services.devices.create(account, { name: 'a' })).device;
    // Two connections stand for two processes writing readings to one file.
    const one = createRepositories(db);
    const two = createRepositories(temp.open(dir));
    const reading = (n: number) => ({ deviceSeq: a.seq, time: Date.now(), data: `{"n":${n}}` });
    // A batch that fails (data is NOT NULL) rolls back with whatever seqs it reserved.
    expect(() => one.readings.insertBatch([reading(1), { deviceSeq: a.seq, time: Date.now(), data: null as unknown as string }])).toThrow(
      /NOT NULL/,
    );
    const issued: number[] = [];
    // Every reading's device exists, so every one gets a seq (never null).
    for (let i = 0; i < 20; i++) {
      issued.push(...(two.readings.insertBatch([reading(i), reading(i)]) as number[]));
      issued.push(...(one.readings.insertBatch([reading(i)]) as number[]));
    }
    expect(new Set(issued).size).toBe(issued.length);
    const stored = db.prepare('SELECT seq FROM readings ORDER BY seq').pluck().all() as number[];
    expect(stored).toEqual([...issued].sort((x, y) => x - y));
    // reading_seq stays at or past every seq issued, so a restart issues only new ones.
    const last = db.prepare('SELECT last FROM reading_seq').pluck().get() as number;
    expect(last).toBeGreaterThanOrEqual(Math.max(...issued));
  });
});
