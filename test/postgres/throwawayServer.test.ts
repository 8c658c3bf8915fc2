import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase, type PostgresServer, psql, startPostgres } from '../helpers/postgres.js';

/** The throwaway server the PostgreSQL tests run against (test/helpers/postgres.ts). */
describe('throwaway PostgreSQL server', () => {
  let pg: PostgresServer;

  beforeAll(async () => {
    pg = await startPostgres();
  });
  afterAll(async () => {
    await pg?.stop();
  });

  it('runs PostgreSQL 15 or newer with fsync off and synchronous commit on', async () => {
    const version = Number(await psql(pg, 'postgres', 'SHOW server_version_num'));
    expect(version).toBeGreaterThanOrEqual(150_000);
    expect(await psql(pg, 'postgres', 'SHOW fsync')).toBe('off');
    expect(await psql(pg, 'postgres', 'SHOW synchronous_commit')).toBe('on');
  });

  it('gives each caller its own empty database', async () => {
    const a = new URL(await createDatabase(pg));
    const b = new URL(await createDatabase(pg));
    expect(a.pathname).not.toBe(b.pathname);
    const dbA = a.pathname.slice(1);
    await psql(pg, dbA, 'CREATE TABLE t (x int); INSERT INTO t VALUES (1)');
    expect(await psql(pg, dbA, 'SELECT count(*) FROM t')).toBe('1');
    expect(await psql(pg, b.pathname.slice(1), "SELECT count(*) FROM pg_tables WHERE tablename = 't'")).toBe('0');
    expect(a.port).toBe(String(pg.port));
    expect(a.password).toBe(pg.password);
  });

  it('keeps committed data across an immediate stop and a start', async () => {
    const db = new URL(await createDatabase(pg)).pathname.slice(1);
    await psql(pg, db, 'CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 1000)');
    await pg.kill();
    await expect(psql(pg, db, 'SELECT 1')).rejects.toThrow(/connection|socket/i);
    await pg.start();
    expect(await psql(pg, db, 'SELECT sum(x) FROM t')).toBe('500500');
  });

  it('removes everything when stopped', async () => {
    const other = await startPostgres();
    expect(existsSync(other.dir)).toBe(true);
    await other.stop();
    expect(existsSync(other.dir)).toBe(false);
  });
});
