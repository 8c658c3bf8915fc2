import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './process.js';

const run = promisify(execFile);

/**
 * A throwaway PostgreSQL server for tests: initdb into a temp dir, pg_ctl start on a free
 * port with its unix socket in that dir, one database per test file (createDatabase), and
 * everything removed by stop(). Debian's `postgresql` package provides the binaries.
 *
 * Only what the tests can observe is traded for speed: fsync is off (the tests never lose
 * the machine's power, and an immediate stop of the server still keeps everything it wrote
 * to the kernel), but synchronous_commit stays on, so a COMMIT the server acknowledged is in
 * its WAL and survives `pg_ctl stop -m immediate` exactly as in production.
 *
 * TCP connections need the superuser's password (scram-sha-256), so tests can check what a
 * wrong password does; the unix socket trusts the local user, for the helper's own psql.
 *
 * Everything a test process needs to reach the server is in PostgresServerInfo (plain data),
 * so one server can be started by a vitest globalSetup and handed to every test file with
 * `provide`/`inject`, each file then creating its own database.
 */
export interface PostgresServerInfo {
  binDir: string;
  /** The temp dir: data directory (data/), unix socket, log and password file. */
  dir: string;
  port: number;
  user: string;
  password: string;
  /** PostgreSQL's shared_buffers setting. */
  sharedBuffers: string;
}

export interface PostgresServer extends PostgresServerInfo {
  /** Stops the server at once, like a crash (pg_ctl -m immediate); the data stays for start(). */
  kill(): Promise<void>;
  /** Starts it again on the same port and data. */
  start(): Promise<void>;
  /** Stops it (if running) and removes the temp dir. */
  stop(): Promise<void>;
}

const SUPERUSER = 'postgres';
const MIN_MAJOR = 15;

/** Debian's server binaries: pg_config's bindir where it has initdb, else the newest /usr/lib/postgresql/<major>/bin. */
function findPostgresBin(): string | null {
  try {
    const dir = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    if (existsSync(path.join(dir, 'initdb')) && existsSync(path.join(dir, 'pg_ctl'))) return dir;
  } catch {
    // no pg_config (libpq-dev missing): look where Debian installs the server
  }
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const majors = readdirSync(base)
    .map(Number)
    .filter((v) => v >= MIN_MAJOR && existsSync(path.join(base, String(v), 'bin', 'initdb')))
    .sort((a, b) => b - a);
  return majors.length > 0 ? path.join(base, String(majors[0]), 'bin') : null;
}

// initdb and the server refuse to run as root: as root, they run as the `postgres` system
// user (created by Debian's package), which then owns the temp dir.
const asRoot = process.getuid?.() === 0;

function command(binDir: string, tool: string, args: string[]): [string, string[]] {
  const exe = path.join(binDir, tool);
  return asRoot ? ['runuser', ['-u', SUPERUSER, '--', exe, ...args]] : [exe, args];
}

async function pgCtl(info: PostgresServerInfo, args: string[]): Promise<void> {
  const [cmd, argv] = command(info.binDir, 'pg_ctl', ['-D', path.join(info.dir, 'data'), ...args]);
  try {
    await run(cmd, argv, { cwd: info.dir });
  } catch (err) {
    const log = path.join(info.dir, 'server.log');
    const tail = existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-20).join('\n') : '';
    throw new Error(`pg_ctl ${args[0]} failed: ${(err as Error).message}\n${tail}`);
  }
}

async function startServer(info: PostgresServerInfo): Promise<void> {
  const options = [
    `-p ${info.port}`,
    // TCP on loopback only, and the unix socket in the temp dir (not /var/run/postgresql).
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${info.dir}`,
    '-c fsync=off',
    '-c full_page_writes=off',
    `-c shared_buffers=${info.sharedBuffers}`,
    '-c max_connections=200',
  ].join(' ');
  await pgCtl(info, ['start', '-w', '-t', '60', '-l', path.join(info.dir, 'server.log'), '-o', options]);
}

/**
 * A watchdog beside each server: a shell that checks once a second whether this test process
 * still exists and, once it is gone without having stopped the server (a crash, a killed test
 * worker, which runs no exit handlers), stops the server and removes its temp dir, so no
 * server outlives its tests on the machine.
 */
function watchdog(info: PostgresServerInfo): ChildProcess {
  const [cmd, argv] = command(info.binDir, 'pg_ctl', ['-D', path.join(info.dir, 'data'), 'stop', '-m', 'immediate', '-w']);
  const script = 'while kill -0 "$WATCHED_PID" 2>/dev/null; do sleep 1; done; "$@" >/dev/null 2>&1; rm -rf "$PG_TEMP_DIR"';
  const child = spawn('sh', ['-c', script, 'postgres-watchdog', cmd, ...argv], {
    detached: true,
    stdio: 'ignore',
    env: { ...process.env, WATCHED_PID: String(process.pid), PG_TEMP_DIR: info.dir },
  });
  child.unref();
  return child;
}

/**
 * Starts a throwaway server. `sharedBuffers` defaults to 16MB, small because many test files
 * may hold a server each on a shared machine; the benchmark asks for Debian's default.
 */
export async function startPostgres({ sharedBuffers = '16MB' }: { sharedBuffers?: string } = {}): Promise<PostgresServer> {
  const binDir = findPostgresBin();
  if (!binDir) throw new Error(`PostgreSQL ${MIN_MAJOR}+ server binaries not found (Debian package "postgresql")`);
  const dir = mkdtempSync(path.join(tmpdir(), 'telemetryd-pg-'));
  const info: PostgresServerInfo = {
    binDir,
    dir,
    port: await freePort(),
    user: SUPERUSER,
    password: randomBytes(12).toString('hex'),
    sharedBuffers,
  };
  const pwfile = path.join(dir, 'pwfile');
  writeFileSync(pwfile, `${info.password}\n`, { mode: 0o600 });
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', SUPERUSER], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', SUPERUSER], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
    chownSync(pwfile, uid, gid);
  }
  const initdb = command(binDir, 'initdb', [
    '-D',
    path.join(dir, 'data'),
    '-U',
    SUPERUSER,
    `--pwfile=${pwfile}`,
    '--auth-local=trust',
    '--auth-host=scram-sha-256',
    '--encoding=UTF8',
    '--locale=C',
    // Nothing here has to survive a power loss.
    '--no-sync',
  ]);
  try {
    await run(initdb[0], initdb[1], { cwd: dir });
    await startServer(info);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const guard = watchdog(info);
  let up = true;
  return {
    ...info,
    async kill() {
      await pgCtl(info, ['stop', '-m', 'immediate', '-w']);
      up = false;
    },
    async start() {
      await startServer(info);
      up = true;
    },
    async stop() {
      if (up) await pgCtl(info, ['stop', '-m', 'immediate', '-w']);
      up = false;
      guard.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** postgres://user:password@127.0.0.1:port/database (TCP, password required). */
function databaseUrl(info: PostgresServerInfo, database: string): string {
  return `postgres://${info.user}:${info.password}@127.0.0.1:${info.port}/${database}`;
}

/** Runs SQL as the superuser over the unix socket, returns psql's unaligned output. */
export async function psql(info: PostgresServerInfo, database: string, sql: string): Promise<string> {
  const { stdout } = await run(
    path.join(info.binDir, 'psql'),
    ['-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-h', info.dir, '-p', String(info.port), '-U', info.user, '-d', database, '-c', sql],
    { cwd: info.dir },
  );
  return stdout.trim();
}

/** A new empty database (one per test file); returns its URL. */
export async function createDatabase(info: PostgresServerInfo, prefix = 'test'): Promise<string> {
  const name = `${prefix}_${randomBytes(6).toString('hex')}`;
  await psql(info, 'postgres', `CREATE DATABASE ${name}`);
  return databaseUrl(info, name);
}
