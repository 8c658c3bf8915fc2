import { randomUUID } from 'node:crypto';
import type { Client, Pool, PoolConfig } from 'pg';

/**
 * `--database-url` (docs/postgres.md): where the PostgreSQL backend connects. Parsed here
 * rather than by the driver so that a mistake is reported before any connection is tried, in
 * one line that names what is wrong and never shows the password.
 */
export interface DatabaseUrl {
  user: string;
  password: string | undefined;
  /** A host name or address, or a unix socket directory (starts with "/"). */
  host: string;
  port: number;
  database: string;
  /** libpq's sslmode: disable (default), require (encrypted, not verified) or verify-full. */
  sslmode: 'disable' | 'require' | 'verify-full';
}

const DEFAULT_PORT = 5432;
const SSL_MODES = ['disable', 'require', 'verify-full'] as const;
const FORM = 'postgres://USER[:PASSWORD]@HOST[:PORT]/DB';

/** A wrong --database-url or a database that cannot be used: one line, without the password. */
export class DatabaseUrlError extends Error {
  override name = 'DatabaseUrlError';
}

/**
 * The URL with its password replaced by "***"; also for text that does not parse as a URL,
 * typos of the scheme included (`postgres//app:pw@h`, `postgres:app:pw@h`). The password runs
 * from the first ":" after the scheme to the last "@": an unencoded "/" or "@" in a password
 * must not leave part of it in a message.
 */
export function redactDatabaseUrl(url: string): string {
  const at = url.lastIndexOf('@');
  if (at < 0) return url;
  const scheme = /^[a-z][a-z0-9+.-]*:(\/*)/i.exec(url);
  let colon = url.indexOf(':', scheme?.[0].length ?? 0);
  // No ":" after what looked like a scheme without slashes: that one separated a user from a
  // password (`app:pw@h`).
  if ((colon < 0 || colon > at) && scheme?.[1] === '') colon = url.indexOf(':');
  if (colon < 0 || colon > at) return url;
  return `${url.slice(0, colon)}:***${url.slice(at)}`;
}

function decode(part: string, what: string, url: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new DatabaseUrlError(`--database-url: the ${what} is not valid percent-encoding in ${redactDatabaseUrl(url)}`);
  }
}

export function parseDatabaseUrl(url: string): DatabaseUrl {
  const bad = (why: string, hint = '') =>
    new DatabaseUrlError(`--database-url: ${why} in ${redactDatabaseUrl(url)} (expected ${FORM})${hint}`);
  // With the password masked, a URL broken by a character of its password looks right.
  const encodingHint = url.includes('@') ? '; a / # ? @ or % in the user or password must be percent-encoded (%2F %23 %3F %40 %25)' : '';
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw bad('not a URL', encodingHint);
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:')
    throw bad(`the scheme must be postgres:// or postgresql://, not ${u.protocol}//`);
  // An unencoded "/", "?" or "#" in a password that also holds an "@" still parses: the
  // password's tail becomes the host and the rest lands in the path, query or fragment
  // (postgres://app:p@ss/w#rd@db/t names host "ss"). Refused here, before the host named
  // by the password is connected to or shown in a message.
  if (u.hash || url.includes('#')) throw bad('a "#" (a URL fragment)', encodingHint);
  if (u.pathname.includes('@') || u.search.includes('@')) throw bad('an "@" after the host', encodingHint);
  if (!u.username) throw bad('no user', encodingHint);
  if (!u.hostname) throw bad('no host', encodingHint);
  const database = decode(u.pathname.slice(1), 'database name', url);
  if (!database || database.includes('/')) throw bad('no database name', encodingHint);
  let port = DEFAULT_PORT;
  if (u.port) {
    port = Number(u.port);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw bad(`port ${u.port} is not 1-65535`);
  }
  let sslmode: DatabaseUrl['sslmode'] = 'disable';
  for (const [key, value] of u.searchParams) {
    if (key !== 'sslmode') throw bad(`unknown parameter "${key}" (only sslmode is understood)`);
    if (!(SSL_MODES as readonly string[]).includes(value)) throw bad(`sslmode must be one of ${SSL_MODES.join(', ')}`);
    sslmode = value as DatabaseUrl['sslmode'];
  }
  return {
    user: decode(u.username, 'user', url),
    password: u.password ? decode(u.password, 'password', url) : undefined,
    // A percent-encoded path (postgres://me@%2Fvar%2Frun%2Fpostgresql/db) is a socket directory, as in libpq.
    host: decode(u.hostname.replace(/^\[(.*)\]$/, '$1'), 'host', url),
    port,
    database,
    sslmode,
  };
}

/** Where a connection went, for messages: host:port ([address]:port for IPv6), or the socket directory. */
const place = (db: DatabaseUrl) =>
  db.host.startsWith('/') ? `${db.host} (port ${db.port})` : db.host.includes(':') ? `[${db.host}]:${db.port}` : `${db.host}:${db.port}`;

/**
 * Which database a URL names, for the start-up lines, without the password:
 * user@host:port/database, or over a unix socket the socket's file as libpq names it.
 */
export function describeDatabase(url: string): string {
  const db = parseDatabaseUrl(url);
  return db.host.startsWith('/')
    ? `${db.user}@${db.host.replace(/\/+$/, '')}/.s.PGSQL.${db.port}, database ${db.database}`
    : `${db.user}@${place(db)}/${db.database}`;
}

/** Error codes of a connection that is gone or could not be made, rather than of a statement. */
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'ENOENT', // a unix socket that is not there
  '57P01', // admin_shutdown: the server is stopping
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now: starting up or shutting down
  '08000',
  '08001',
  '08003',
  '08004',
  '08006',
]);

/**
 * Whether `err` means the database cannot be reached now (a transient failure: retry later)
 * rather than a statement that failed on its own.
 */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  if (!e) return false;
  if (e.code && CONNECTION_CODES.has(e.code)) return true;
  // node-postgres reports a socket closed under it, and a pool that timed out waiting for a
  // connection, as plain errors without a code.
  return /^Connection terminated|^timeout exceeded when trying to connect|^Client has encountered a connection error/.test(e.message ?? '');
}

/** What went wrong with the database, in a few words, naming what failed and never the password. */
export function describeDatabaseError(err: unknown, db: DatabaseUrl): string {
  const e = err as { code?: string; message?: string };
  const at = `PostgreSQL at ${place(db)}`;
  switch (e.code) {
    case 'ECONNREFUSED':
      return `${at}: connection refused`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `${at}: unknown host "${db.host}"`;
    case 'ETIMEDOUT':
      return `${at}: connection timed out`;
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `${at}: host unreachable`;
    case 'ENOENT':
      return `${at}: no server socket in ${db.host}`;
    case '28P01':
      return `${at}: password authentication failed for user "${db.user}"`;
    case '3D000':
      return `${at}: database "${db.database}" does not exist`;
  }
  const message = (e.message ?? String(err)).split('\n')[0]!;
  // The server asked for a password (SCRAM) and the URL has none.
  if (/client password must be a string/.test(message)) return `${at}: user "${db.user}" needs a password`;
  if (/^timeout exceeded when trying to connect/.test(message)) return `${at}: connection timed out`;
  if (/^Connection terminated/.test(message)) return `${at}: connection lost`;
  // Server messages name users and databases, never passwords; strip the password anyway in
  // case one was echoed back.
  return `${at}: ${db.password ? message.split(db.password).join('***') : message}`;
}

export interface PostgresPoolOptions {
  /** Connections at most (default 10). */
  max?: number;
  /** A connection that dropped while idle (the server restarted): the pool replaces it on next use. */
  onIdleError?: (err: Error) => void;
  /**
   * This process's name in change notifications (default: a random UUID) (the `telemetryd.node` setting of each
   * connection, read by the notifying trigger, migration 3), so it can skip its own.
   */
  node?: string;
  /** The connections' application_name in pg_stat_activity (default `telemetryd`). */
  applicationName?: string;
  /**
   * Plan each named statement once for any parameters (plan_cache_mode=force_generic_plan).
   * For the reading writer's pool: its statement's best plan does not depend on the batch,
   * but PostgreSQL's default judges by the first executions' estimates and, when those
   * batches were small (HTTP ingest: tens of readings), plans every later batch again, at
   * two to three times PostgreSQL's CPU per reading. Never for the main pool: its unnamed
   * statements (every read) would lose their plans for the actual values.
   */
  genericPlans?: boolean;
}

const nodes = new WeakMap<Pool, string>();

/** The node name the pool's connections carry (PostgresPoolOptions.node; random unless given). */
export function poolNode(pool: Pool): string {
  const node = nodes.get(pool);
  if (node === undefined) throw new Error('not a pool opened by connectPostgres');
  return node;
}

/** How long a connection attempt may take before it counts as failed (a silent host). */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * A connection pool for `url`, checked with one connection before it is returned, so a wrong
 * URL, a refused connection, an unknown host, a wrong password or a missing database fails
 * here with a DatabaseUrlError. The driver (pg) is loaded on this first use only: SQLite-only
 * starts do not pay for it.
 */
export async function connectPostgres(url: string, options: PostgresPoolOptions = {}): Promise<Pool> {
  const db = parseDatabaseUrl(url);
  const { default: pg } = await import('pg');
  // bigint columns (seqs, millisecond times, counts) come back as numbers: every value the
  // service stores stays below 2^53.
  const types = new pg.TypeOverrides();
  types.setTypeParser(pg.types.builtins.INT8, Number);
  const node = options.node ?? randomUUID();
  const config: PoolConfig = {
    user: db.user,
    password: db.password,
    host: db.host,
    port: db.port,
    database: db.database,
    ssl: db.sslmode === 'disable' ? false : db.sslmode === 'require' ? { rejectUnauthorized: false } : true,
    max: options.max ?? 10,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    keepAlive: true,
    application_name: options.applicationName ?? 'telemetryd',
    types,
    options: `-c telemetryd.node=${node}${options.genericPlans ? ' -c plan_cache_mode=force_generic_plan' : ''}`,
  };
  const pool = new pg.Pool(config);
  // Without a listener, an idle connection dropped by the server would crash the process.
  pool.on('error', options.onIdleError ?? (() => {}));
  // The pool listens to its idle connections only: one checked out (a transaction, a
  // migration, an archive) and ended by the server meanwhile (a restart, an administrator's
  // pg_terminate_backend) would emit an 'error' nobody hears, which ends the process. Its
  // statements fail instead, and it is destroyed when released.
  pool.on('connect', (client) => client.on('error', () => {}));
  try {
    const client = await pool.connect();
    client.release();
  } catch (err) {
    await pool.end().catch(() => {});
    throw new DatabaseUrlError(describeDatabaseError(err, db));
  }
  nodes.set(pool, node);
  return pool;
}

/** Opens one connection outside the pool with the pool's settings (the change listener's). */
export async function connectLike(pool: Pool): Promise<Client> {
  const { default: pg } = await import('pg');
  const client = new pg.Client(pool.options);
  await client.connect();
  return client;
}
