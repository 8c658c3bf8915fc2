import { describe, expect, it } from 'vitest';
import { composeServices } from '../../src/composition.js';
import { onPostgres } from '../helpers/backend.js';
import { useTempDatabases } from '../helpers/db.js';

const HOUR = 3_600_000;
const NOW = Date.UTC(2026, 10, 21, 15, 37, 12, 345);

/**
 * Usage counts come from reading_counts (migration 4) plus the partial first hour from the
 * readings index; they must equal a plain count over readings whatever inserts or deletes.
 */
// SQLite's reading_counts triggers and rebuild; PostgreSQL's counts: test/postgres/repositories.test.ts.
describe.skipIf(onPostgres)('readings count of an account (reading_counts, migration 4)', () => {
  const temp = useTempDatabases();

  async function setup() {
    const db = temp.open(temp.dir());
    const composed = composeServices(db, { clock: { now: () => NOW } });
    const repos = composed.storage.repos;
    const services = { ...composed.services, writer: composed.storage.writer };
    const account = await services.accounts.create({ email: 'c@example.com', plan: 'business' });
    const other = await services.accounts.create({ email: 'o@example.com', plan: 'business' });
    const a = (await services.devices.create(account, { name: 'a' })).device;
    const b = (await services.devices.create(account, { name: 'b' })).device;
    const x = (await services.devices.create(other, { name: 'x' })).device;
    const brute = (accountSeq: number, since: number) =>
      (
        db
          .prepare('SELECT count(*) AS n FROM readings r JOIN devices d ON d.seq = r.device_seq WHERE d.account_seq = ? AND r.time >= ?')
          .get(accountSeq, since) as { n: number }
      ).n;
    return { db, repos, services, account, other, a, b, x, brute };
  }

  it('matches a plain count at hour boundaries and inside hours, after inserts and deletes', async () => {
    const { db, repos, services, account, other, a, b, x, brute } = await setup();
    const batch = [];
    // Every 7 minutes over 30 hours, for three devices of two accounts.
    for (let t = NOW - 30 * HOUR; t <= NOW; t += 7 * 60_000)
      for (const d of [a, b, x]) batch.push({ deviceSeq: d.seq, time: t, data: '{"v":1}' });
    repos.readings.insertBatch(batch);
    const sinces = [NOW - 24 * HOUR, Math.floor((NOW - 24 * HOUR) / 60_000) * 60_000, NOW - 90 * 60_000, NOW - 1, NOW + 1];
    for (const since of sinces) {
      expect(repos.readings.countSinceForAccount(account.seq, since)).toBe(brute(account.seq, since));
      expect(repos.readings.countSinceForAccount(other.seq, since)).toBe(brute(other.seq, since));
    }
    expect(repos.readings.countSinceForAccount(account.seq, NOW - 24 * HOUR)).toBeGreaterThan(0);

    // Retention-style deletes and a device deletion keep the counts exact.
    while (repos.readings.deleteOlderBatch(a.seq, NOW - 20 * HOUR - 123, 50) > 0);
    await services.devices.remove(b);
    for (const since of sinces) expect(repos.readings.countSinceForAccount(account.seq, since)).toBe(brute(account.seq, since));
    expect((await services.usage.usage(repos.accounts.findBySeq(account.seq)!)).telemetry.data_points_24h).toBe(
      brute(account.seq, NOW - 24 * HOUR),
    );

    // A bulk load that bypassed the triggers is repaired by rebuildDerived.
    db.exec('DELETE FROM reading_counts');
    repos.readings.rebuildDerived();
    for (const since of sinces) expect(repos.readings.countSinceForAccount(other.seq, since)).toBe(brute(other.seq, since));
  });

  it('counts batches whose readings carry their account (the ingest pipeline) and batches that do not, alike', async () => {
    const { repos, services, account, other, a, b, x, brute } = await setup();
    // Two accounts and several minutes in one batch, with the account given.
    const batch = [];
    for (let t = NOW - 3 * HOUR; t <= NOW; t += 50_000)
      for (const d of [a, b, x]) batch.push({ deviceSeq: d.seq, accountSeq: d.accountSeq, time: t, data: '{}' });
    repos.readings.insertBatch(batch);
    // The same shape through the writer, as ingest sends it.
    await Promise.all([a, x].map((d) => services.writer.append({ deviceSeq: d.seq, accountSeq: d.accountSeq, time: NOW - 1, data: '{}' })));
    for (const since of [NOW - 24 * HOUR, NOW - 90 * 60_000, NOW - 1]) {
      expect(repos.readings.countSinceForAccount(account.seq, since)).toBe(brute(account.seq, since));
      expect(repos.readings.countSinceForAccount(other.seq, since)).toBe(brute(other.seq, since));
    }
    expect(brute(other.seq, NOW - 24 * HOUR)).toBe(batch.length / 3 + 1);
  });
});
