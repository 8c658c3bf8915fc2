import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import Database from 'better-sqlite3';
import mqtt from 'mqtt';
import pg from 'pg';
import { expect } from 'vitest';
import { backendEnv, databaseUrlFor, onPostgres } from '../helpers/backend.js';
import { CLI, runCliAsync } from '../helpers/cli.js';
import { killWhenTestEnds } from '../helpers/process.js';

/** The real server as a child process (what a user runs), so it can be killed for real. */
export interface ChildServer {
  proc: ChildProcess;
  url: string;
  port: number;
  /** Plain MQTT port when started with --mqtt-plain-port. */
  mqttPlainPort: number | null;
  /** Everything the child printed on stdout and stderr so far. */
  output: () => string;
  /** Resolves with the exit code (null when killed by a signal) and the signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export async function startChildServer(dataDir: string, extraArgs: string[] = [], env: Record<string, string> = {}): Promise<ChildServer> {
  const proc = spawn(
    process.execPath,
    [
      CLI,
      'serve',
      '--data-dir',
      dataDir,
      '--host',
      '127.0.0.1',
      '--http-port',
      '0',
      '--mqtt-port',
      'off',
      '--log-level',
      'silent',
      ...extraArgs,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...backendEnv(dataDir), ...env } },
  );
  killWhenTestEnds(proc);
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    proc.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const wantsMqtt = extraArgs.includes('--mqtt-plain-port');
  const [port, mqttPlainPort] = await new Promise<[number, number | null]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 20_000);
    const check = () => {
      const m = /HTTP listening on [^\s]+:(\d+)/.exec(out);
      const mq = /MQTT without TLS listening on [^\s]+:(\d+)/.exec(out);
      if (m && (!wantsMqtt || mq)) {
        clearTimeout(timer);
        resolve([Number(m[1]), mq ? Number(mq[1]) : null]);
      }
    };
    proc.stdout!.on('data', check);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`server exited before listening: ${out}`));
    });
  });
  return { proc, port, mqttPlainPort, url: `http://127.0.0.1:${port}`, output: () => out, exited };
}

export interface Seed {
  accountId: string;
  key: string;
  deviceId: string;
  token: string;
}

/** An account (business plan: flexible schema, API access), an API key and one device, via the CLI. */
export async function seedViaCli(dataDir: string, email = `rel-${Math.random().toString(36).slice(2)}@example.com`): Promise<Seed> {
  const acc = await runCliAsync(['accounts', 'create', '--email', email, '--plan', 'business', '--json'], { dataDir });
  if (acc.status !== 0) throw new Error(acc.stderr);
  const key = await runCliAsync(['keys', 'create', '--account', acc.json.id, '--name', 'rel', '--json'], { dataDir });
  const dev = await runCliAsync(['devices', 'create', '--account', acc.json.id, '--name', 'rel device', '--json'], { dataDir });
  if (key.status !== 0 || dev.status !== 0) throw new Error(key.stderr + dev.stderr);
  return { accountId: acc.json.id, key: key.json.key, deviceId: dev.json.id, token: dev.json.access_token };
}

/**
 * Keeps `concurrency` ingest requests in flight, each reading carrying a unique `n`, until
 * `shouldStop()` or `max` requests were started. Returns the numbers acknowledged with 200
 * and the statuses seen (a connection error counts as status 0: not acknowledged).
 */
export async function ingestLoad(opts: {
  url: string;
  deviceId: string;
  token: string;
  firstN: number;
  concurrency: number;
  max: number;
  shouldStop?: () => boolean;
  onAck?: (acked: number, inFlight: number) => void;
}): Promise<{ acked: number[]; statuses: Map<number, number>; started: number }> {
  const acked: number[] = [];
  const statuses = new Map<number, number>();
  let next = opts.firstN;
  let inFlight = 0;
  const end = opts.firstN + opts.max;
  const worker = async () => {
    while (next < end && !(opts.shouldStop?.() ?? false)) {
      const n = next++;
      let status = 0;
      inFlight++;
      try {
        const res = await fetch(`${opts.url}/api/devices/ingest`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ device_id: opts.deviceId, access_token: opts.token, data: { n, temp: 20 + (n % 10) } }),
        });
        status = res.status;
        await res.arrayBuffer();
      } catch {
        status = 0;
      }
      inFlight--;
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (status === 200) {
        acked.push(n);
        opts.onAck?.(acked.length, inFlight);
      }
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, worker));
  return { acked, statuses, started: next - opts.firstN };
}

export const dbFile = (dataDir: string) => path.join(dataDir, 'telemetryd.db');

/** Reads the SQLite database read-only (the server may be running: WAL lets readers in). */
function withReadonlyDb<T>(dataDir: string, fn: (db: Database.Database) => T): T {
  const db = new Database(dbFile(dataDir), { readonly: true, fileMustExist: true });
  try {
    db.pragma('busy_timeout = 10000');
    return fn(db);
  } finally {
    db.close();
  }
}

/**
 * Rows of a query on the data dir's database from a connection of the test's own, beside
 * the server (a child process, perhaps killed): SQLite's file read-only, or its PostgreSQL
 * database. `$1` in the SQL is `param`.
 */
async function queryDataDir<T>(dataDir: string, sql: { sqlite: string; postgres: string }, param: string): Promise<T[]> {
  const url = databaseUrlFor(dataDir);
  if (!url) return withReadonlyDb(dataDir, (db) => db.prepare<[string], T>(sql.sqlite.replace('$1', '?')).all(param));
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql.postgres, [param])).rows as T[];
  } finally {
    await client.end();
  }
}

/** Every stored `n` of one device, in the order committed (duplicates kept, to be counted). */
export async function storedNumbers(dataDir: string, deviceId: string): Promise<number[]> {
  const rows = await queryDataDir<{ n: number }>(
    dataDir,
    {
      sqlite:
        "SELECT json_extract(r.data, '$.n') AS n FROM readings r JOIN devices d ON d.seq = r.device_seq WHERE d.id = $1 ORDER BY r.seq",
      postgres:
        "SELECT (r.data::json->>'n')::float8 AS n FROM readings r JOIN devices d ON d.seq = r.device_seq WHERE d.id = $1 ORDER BY r.seq",
    },
    deviceId,
  );
  return rows.map((r) => r.n);
}

/**
 * Asserts SQLite's integrity_check of the data dir's database file; nothing on PostgreSQL,
 * whose storage is the database server's own, not a file of ours to check.
 */
export function expectIntactDatabase(dataDir: string): void {
  if (onPostgres) return;
  expect(withReadonlyDb(dataDir, (db) => db.pragma('integrity_check', { simple: true }))).toBe('ok');
}

/** A digest of every stored reading: equal before and after means nothing changed. */
export async function readingsDigest(dataDir: string, excludeDeviceId = ''): Promise<{ count: number; sha256: string }> {
  const sql =
    'SELECT seq, device_seq, time, data FROM readings WHERE device_seq NOT IN (SELECT seq FROM devices WHERE id = $1) ORDER BY seq';
  const rows = await queryDataDir<{ seq: number; device_seq: number; time: number; data: string }>(
    dataDir,
    { sqlite: sql, postgres: sql },
    excludeDeviceId,
  );
  const h = createHash('sha256');
  for (const r of rows) h.update(`${r.seq}|${r.device_seq}|${r.time}|${r.data}\n`);
  return { count: rows.length, sha256: h.digest('hex') };
}

export async function stopChild(server: ChildServer, signal: NodeJS.Signals = 'SIGTERM') {
  if (server.proc.exitCode === null && server.proc.signalCode === null) server.proc.kill(signal);
  return server.exited;
}

/**
 * Sends raw bytes on a TCP connection and returns what came back (the HTTP status line's
 * code, or 0 when the server closed without answering) once the server closes or
 * `waitMs` passes.
 */
export function rawHttp(
  port: number,
  chunks: (string | Buffer)[],
  waitMs = 3_000,
): Promise<{ status: number; text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      resolve({ status: m ? Number(m[1]) : 0, text, closed });
    };
    const timer = setTimeout(() => finish(false), waitMs);
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
    socket.on('connect', () => {
      for (const c of chunks) socket.write(c);
    });
  });
}

/**
 * MQTT QoS 1 publishers: each message carries a unique `n`; a PUBACK is the acknowledgement.
 * The clients never reconnect, so nothing is resent after a crash (a resend would be a
 * legitimate QoS 1 duplicate and blur the "none duplicated" check).
 */
export async function mqttLoad(opts: {
  port: number;
  deviceId: string;
  token: string;
  firstN: number;
  clients: number;
  inFlightPerClient: number;
  shouldStop: () => boolean;
}): Promise<{ acked: number[] }> {
  const acked: number[] = [];
  let next = opts.firstN;
  const clients = await Promise.all(
    Array.from({ length: opts.clients }, () =>
      mqtt.connectAsync(
        `mqtt://127.0.0.1:${opts.port}`,
        { username: opts.deviceId, password: opts.token, reconnectPeriod: 0, connectTimeout: 5_000 },
        false,
      ),
    ),
  );
  await Promise.all(
    clients.map(async (client) => {
      const lane = async () => {
        while (!opts.shouldStop() && client.connected) {
          const n = next++;
          try {
            await client.publishAsync(`d/${opts.deviceId}/t`, JSON.stringify({ n, via: 'mqtt' }), { qos: 1 });
            acked.push(n);
          } catch {
            return;
          }
        }
      };
      // publishAsync settles only on PUBACK, or rejects when the connection goes away.
      await Promise.race([
        Promise.all(Array.from({ length: opts.inFlightPerClient }, lane)),
        new Promise<void>((resolve) => client.once('close', () => resolve())),
      ]);
      client.end(true);
    }),
  );
  return { acked };
}
