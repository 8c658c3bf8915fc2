import type { Client, Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeListener } from '../../src/storage/postgres/changeListener.js';
import { connectPostgres } from '../../src/storage/postgres/connect.js';
import { CHANGES_CHANNEL, migratePostgres, READINGS_CHANNEL } from '../../src/storage/postgres/migrations.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';

const waitFor = async (what: string, check: () => boolean | Promise<boolean>, timeoutMs = 5_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
};

describe('PostgreSQL change listener: the readings channel on demand', () => {
  let pg: PostgresServer;
  let pool: Pool;
  let sender: Pool;
  let listener: ChangeListener;
  let stopWatching: () => void;

  /** What the listening connection shows in pg_stat_activity (an operator's query looks for it). */
  const listenerQuery = async () =>
    (
      await sender.query<{ query: string }>(
        `SELECT query FROM pg_stat_activity WHERE application_name = 'telemetryd' AND query LIKE '%LISTEN%' AND pid <> pg_backend_pid()`,
      )
    ).rows.map((r) => r.query);

  /** Sends readings notices until `heard` grows past `before`, so a LISTEN still on its way is waited for. */
  const hears = async (heard: () => number, from = 'node-b') => {
    const before = heard();
    await waitFor('a readings notice', async () => {
      await sender.query('SELECT pg_notify($1, $2)', [READINGS_CHANNEL, `${from} notice`]);
      await new Promise((resolve) => setTimeout(resolve, 20));
      return heard() > before;
    });
  };

  beforeAll(async () => {
    pg = await startPostgres();
    const url = await createDatabase(pg);
    pool = await connectPostgres(url, { node: 'node-a' });
    sender = await connectPostgres(url, { max: 2, applicationName: 'test' });
    await migratePostgres(pool);
    listener = new ChangeListener(pool, 'node-a', () => {});
    stopWatching = listener.watch(() => {}, 0);
    await waitFor('the listening connection', () => listener.listening);
  });
  afterAll(async () => {
    stopWatching?.();
    await listener?.close();
    await pool?.end();
    await sender?.end();
    await pg?.stop();
  });

  /**
   * Counts what PostgreSQL delivers on the listening connection itself, per channel: what the
   * readings channel costs is a delivery per batch to every connection that LISTENs there.
   */
  const delivered = () => {
    const client = (listener as unknown as { client: Client }).client;
    const counts = { readings: 0, changes: 0 };
    client.on('notification', (n) => {
      if (n.channel === READINGS_CHANNEL) counts.readings++;
      if (n.channel === CHANGES_CHANNEL) counts.changes++;
    });
    return counts;
  };

  /** A readings notice, then a change notice as a fence: PostgreSQL delivers in commit order, so once the fence is in, the notice would be too. */
  const sendWithFence = async (counts: { changes: number }) => {
    const fenced = counts.changes;
    await sender.query('SELECT pg_notify($1, $2)', [READINGS_CHANNEL, 'node-b fenced']);
    await sender.query('SELECT pg_notify($1, $2)', [CHANGES_CHANNEL, 'devices node-b']);
    await waitFor('the fence', () => counts.changes > fenced);
  };

  it('LISTENs on the readings channel only while a handler follows it, across a reconnect', async () => {
    let counts = delivered();
    await sendWithFence(counts);
    expect(counts.readings).toBe(0);

    const payloads: string[] = [];
    let stop = listener.onPeer(READINGS_CHANNEL, (payload, own) => payloads.push(`${own ? 'own' : 'peer'} ${payload}`));
    await hears(() => payloads.length);
    expect(payloads.at(-1)).toBe('peer notice');
    await hears(() => payloads.length, 'node-a');
    expect(payloads.at(-1)).toBe('own notice');
    expect(counts.readings).toBeGreaterThanOrEqual(2);
    // Still found by the operator's query while following.
    expect(await listenerQuery()).toEqual([`LISTEN ${CHANGES_CHANNEL}`]);

    stop();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const before = { readings: counts.readings, payloads: payloads.length };
    await sendWithFence(counts);
    expect(counts.readings).toBe(before.readings);
    expect(payloads).toHaveLength(before.payloads);

    stop = listener.onPeer(READINGS_CHANNEL, (payload) => payloads.push(`again ${payload}`));
    await hears(() => payloads.length);
    expect(payloads.at(-1)).toBe('again notice');

    await sender.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'telemetryd' AND query LIKE '%LISTEN%' AND pid <> pg_backend_pid()`,
    );
    await waitFor('the connection to drop', () => !listener.listening);
    await waitFor('the connection to come back', () => listener.listening);
    counts = delivered();
    await hears(() => payloads.length);
    expect(payloads.at(-1)).toBe('again notice');
    expect(await listenerQuery()).toEqual([`LISTEN ${CHANGES_CHANNEL}`]);

    stop();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const after = counts.readings;
    await sendWithFence(counts);
    expect(counts.readings).toBe(after);
  });
});

describe('PostgreSQL change listener: what counts as a change', () => {
  it("another node's use of an API key (last_used_at) empties no cache; a key's revocation and a device change do", async () => {
    const pg = await startPostgres();
    const url = await createDatabase(pg);
    const pool = await connectPostgres(url, { node: 'node-a' });
    const sender = await connectPostgres(url, { max: 1, node: 'node-b' });
    let external = 0;
    const listener = new ChangeListener(pool, 'node-a', () => external++);
    const stop = listener.watch(() => {}, 0);
    try {
      await migratePostgres(pool);
      await waitFor('the listening connection', () => listener.listening);
      await waitFor('the change counted for the first LISTEN', () => external > 0);
      const before = external;
      // What a key's use on node-b commits, then a device change as a fence (notices arrive in
      // commit order). Both statement-level triggers fire on a statement that matches no row.
      await sender.query('UPDATE api_keys SET last_used_at = 1');
      await sender.query('UPDATE devices SET name = name');
      await waitFor('the fence', () => external > before);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(external - before).toBe(1);
      // The Public API caches keys by hash: a revocation elsewhere must reach it.
      await sender.query('UPDATE api_keys SET revoked_at = 1');
      await waitFor('the revocation', () => external > before + 1);
    } finally {
      stop();
      await listener.close();
      await pool.end();
      await sender.end();
      await pg.stop();
    }
  });
});
