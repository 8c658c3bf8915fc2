import { execFile } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectPostgres,
  DatabaseUrlError,
  describeDatabase,
  parseDatabaseUrl,
  redactDatabaseUrl,
} from '../../src/storage/postgres/connect.js';
import { inTransaction } from '../../src/storage/postgres/repos/sql.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { freePort } from '../helpers/process.js';
import { tempDir } from '../helpers/server.js';

const SECRET = 's3cr/et@pw';

/** What a failed parse or connection says: one line that names the problem, never the password. */
async function failure(promise: Promise<unknown>): Promise<string> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DatabaseUrlError);
  const message = (err as Error).message;
  expect(message).not.toContain('\n');
  expect(message).not.toContain('s3cr');
  return message;
}
const parseFailure = (url: string) => failure(Promise.resolve().then(() => parseDatabaseUrl(url)));

describe('--database-url parsing', () => {
  it('reads user, password, host, port and database', () => {
    expect(parseDatabaseUrl('postgres://app:pw@db.example.com:6543/telemetry')).toEqual({
      user: 'app',
      password: 'pw',
      host: 'db.example.com',
      port: 6543,
      database: 'telemetry',
      sslmode: 'disable',
    });
    expect(parseDatabaseUrl('postgresql://app@10.0.0.5/telemetry')).toMatchObject({ password: undefined, host: '10.0.0.5', port: 5432 });
    expect(parseDatabaseUrl('postgres://app@[::1]:5433/t')).toMatchObject({ host: '::1', port: 5433 });
  });

  it('decodes percent-encoded parts, a socket directory as host and sslmode', () => {
    expect(parseDatabaseUrl(`postgres://app:${encodeURIComponent(SECRET)}@h/d%20b?sslmode=verify-full`)).toMatchObject({
      password: SECRET,
      database: 'd b',
      sslmode: 'verify-full',
    });
    expect(parseDatabaseUrl('postgres://app@%2Fvar%2Frun%2Fpostgresql/t').host).toBe('/var/run/postgresql');
  });

  it.each([
    ['not a URL at all', 'not a URL'],
    [`mysql://app:${encodeURIComponent(SECRET)}@h/db`, 'the scheme must be postgres:// or postgresql://, not mysql://'],
    [`postgres://:${encodeURIComponent(SECRET)}@h/db`, 'no user'],
    [`postgres://app:${encodeURIComponent(SECRET)}@h`, 'no database name'],
    [`postgres://app:${encodeURIComponent(SECRET)}@h/`, 'no database name'],
    [`postgres://app:${encodeURIComponent(SECRET)}@h:0/db`, 'port 0 is not 1-65535'],
    [`postgres://app:${encodeURIComponent(SECRET)}@h/db?pool=3`, 'unknown parameter "pool"'],
    [`postgres://app:${encodeURIComponent(SECRET)}@h/db?sslmode=prefer`, 'sslmode must be one of disable, require, verify-full'],
    // An unencoded "/" in the password breaks the URL: the message must not show the rest of it.
    [`postgres://app:${SECRET}@h/db`, 'not a URL'],
    // An "@" with a "/", "?" or "#" after it parses, with part of the password as the host:
    // refused before that host is connected to or named.
    ['postgres://app:s3cr@s3cr/x#y@127.0.0.1:5432/telemetry', 'a "#" (a URL fragment)'],
    ['postgres://app:s3cr@s3cr/xy@127.0.0.1:5432', 'an "@" after the host'],
    ['postgres://app:s3cr@s3cr?xy@127.0.0.1:5432/telemetry', 'an "@" after the host'],
    [`postgres://app:${encodeURIComponent(SECRET)}@h/db#x`, 'a "#" (a URL fragment)'],
    // Typos of the scheme, password and all: the message names the URL without it.
    [`postgres//app:${encodeURIComponent(SECRET)}@h/db`, 'not a URL'],
    [`postgres:app:${encodeURIComponent(SECRET)}@h/db`, ''],
  ])('rejects %s', async (url, why) => {
    const message = await parseFailure(url);
    expect(message).toContain(`--database-url: ${why}`);
    expect(message).toContain('(expected postgres://USER[:PASSWORD]@HOST[:PORT]/DB)');
  });

  it('says a character of the password may be what breaks the URL, which its masked form hides', async () => {
    const message = await parseFailure('postgres://app:p/ss@127.0.0.1:5432/telemetry');
    expect(message).toBe(
      '--database-url: not a URL in postgres://app:***@127.0.0.1:5432/telemetry (expected postgres://USER[:PASSWORD]@HOST[:PORT]/DB); ' +
        'a / # ? @ or % in the user or password must be percent-encoded (%2F %23 %3F %40 %25)',
    );
    expect(await parseFailure('not a URL at all')).not.toContain('percent-encoded');
  });

  it('names the database for the start-up line without the password, over TCP or a unix socket', () => {
    expect(describeDatabase('postgres://app:pw@db.lan/telemetry')).toBe('app@db.lan:5432/telemetry');
    expect(describeDatabase('postgres://app:pw@[::1]:6543/telemetry')).toBe('app@[::1]:6543/telemetry');
    expect(describeDatabase('postgres://app@%2Fvar%2Frun%2Fpostgresql/telemetry')).toBe(
      'app@/var/run/postgresql/.s.PGSQL.5432, database telemetry',
    );
  });

  it('redacts the password, also from text that is not a valid URL', () => {
    expect(redactDatabaseUrl('postgres://app:pw@h:5432/db')).toBe('postgres://app:***@h:5432/db');
    expect(redactDatabaseUrl(`postgresql://app:${SECRET}@h/db`)).toBe('postgresql://app:***@h/db');
    expect(redactDatabaseUrl('postgres://app@h/db')).toBe('postgres://app@h/db');
    expect(redactDatabaseUrl('postgres://app@h:5432/db')).toBe('postgres://app@h:5432/db');
    // Typos of the scheme: the password is still hidden.
    expect(redactDatabaseUrl('postgres//app:S3cretPw@127.0.0.1:25432/telemetry')).toBe('postgres//app:***@127.0.0.1:25432/telemetry');
    expect(redactDatabaseUrl('postgres:app:S3cretPw@127.0.0.1/telemetry')).toBe('postgres:app:***@127.0.0.1/telemetry');
    expect(redactDatabaseUrl(`postgresql:/app:${SECRET}@h/db`)).toBe('postgresql:/app:***@h/db');
    expect(redactDatabaseUrl('app:pw@h/db')).toBe('app:***@h/db');
  });
});

describe('connecting to PostgreSQL', () => {
  let pg: PostgresServer;
  let url: URL;
  /** The working URL with some parts changed. */
  const variant = (change: (u: URL) => void) => {
    const u = new URL(url.href);
    change(u);
    return u.href;
  };

  beforeAll(async () => {
    pg = await startPostgres();
    url = new URL(await createDatabase(pg));
  });
  afterAll(async () => {
    await pg?.stop();
  });

  it('returns a working pool; bigint columns come back as numbers', async () => {
    const pool = await connectPostgres(url.href);
    try {
      const { rows } = await pool.query('SELECT 9007199254740991::bigint AS big, current_database() AS db');
      expect(rows[0]).toEqual({ big: Number.MAX_SAFE_INTEGER, db: url.pathname.slice(1) });
    } finally {
      await pool.end();
    }
  });

  it('survives the server ending a connection that is checked out, between two statements of a transaction', async () => {
    const pool = await connectPostgres(url.href, { max: 2 });
    const other = await connectPostgres(url.href, { max: 1 });
    try {
      // Without an error listener of its own, the connection's 'error' event would be
      // unhandled and end the process (vitest reports it as an unhandled error).
      const failed = await inTransaction(pool, async (client) => {
        const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        await other.query('SELECT pg_terminate_backend($1)', [pid]);
        await new Promise((r) => setTimeout(r, 200));
        await client.query('SELECT 1');
      }).then(
        () => null,
        (err: Error) => err,
      );
      expect(failed).toBeInstanceOf(Error);
      // The broken connection went away; the pool hands out a working one.
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
      await other.end();
    }
  });

  it('connects through a unix socket directory given as the host', async () => {
    const pool = await connectPostgres(`postgres://${pg.user}@${encodeURIComponent(pg.dir)}:${pg.port}${url.pathname}`);
    try {
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
    }
  });

  it('names a wrong password, never showing it', async () => {
    const message = await failure(connectPostgres(variant((u) => (u.password = encodeURIComponent(SECRET)))));
    expect(message).toBe(`PostgreSQL at 127.0.0.1:${pg.port}: password authentication failed for user "postgres"`);
  });

  it('names a missing password', async () => {
    const message = await failure(connectPostgres(variant((u) => (u.password = ''))));
    expect(message).toBe(`PostgreSQL at 127.0.0.1:${pg.port}: user "postgres" needs a password`);
  });

  it('names a database that does not exist', async () => {
    const message = await failure(connectPostgres(variant((u) => (u.pathname = '/no_such_db'))));
    expect(message).toBe(`PostgreSQL at 127.0.0.1:${pg.port}: database "no_such_db" does not exist`);
  });

  it('names a refused connection', async () => {
    const closed = await freePort();
    const message = await failure(connectPostgres(variant((u) => (u.port = String(closed)))));
    expect(message).toBe(`PostgreSQL at 127.0.0.1:${closed}: connection refused`);
  });

  it('names an unknown host', async () => {
    const message = await failure(connectPostgres(variant((u) => (u.hostname = 'no-such-host.invalid'))));
    expect(message).toBe(`PostgreSQL at no-such-host.invalid:${pg.port}: unknown host "no-such-host.invalid"`);
  });

  it('names a server without TLS when the URL asks for it', async () => {
    const message = await failure(connectPostgres(variant((u) => u.searchParams.set('sslmode', 'require'))));
    expect(message).toBe(`PostgreSQL at 127.0.0.1:${pg.port}: The server does not support SSL connections`);
  });

  it('reports a wrong URL before connecting', async () => {
    const message = await failure(connectPostgres(`postgres://postgres:${SECRET}@127.0.0.1:${pg.port}`));
    expect(message).toMatch(/^--database-url: not a URL in postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:\d+ \(expected/);
  });

  it("works from the single executable's bundled driver, which leaves pg-native out", async () => {
    // Built exactly as scripts/build-binary.mjs builds the lazily loaded asset, then run by a
    // fresh node in a directory without node_modules: only what the bundle holds is there.
    const dir = tempDir();
    try {
      const asset = path.join(dir, 'pg.cjs');
      const build = `import { build } from 'esbuild'; import { lazyBundleOptions } from './scripts/bundle-options.mjs';
        await build(lazyBundleOptions('pg', ${JSON.stringify(asset)}));`;
      await promisify(execFile)(process.execPath, ['--input-type=module', '-e', build], { cwd: process.cwd() });
      expect(readFileSync(asset, 'utf8')).not.toMatch(/require\(["']pg-native["']\)/);
      const use = `const pg = require(${JSON.stringify(asset)});
        const client = new pg.Client(process.argv[1]);
        client.connect().then(() => client.query('SELECT 41 + 1 AS n')).then((r) => {
          console.log(JSON.stringify({ native: pg.native, n: r.rows[0].n }));
          return client.end();
        });`;
      const { stdout } = await promisify(execFile)(process.execPath, ['-e', use, url.href], { cwd: dir });
      expect(JSON.parse(stdout)).toEqual({ native: null, n: 42 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
