// Generates a benchmark database in the telemetryd schema, quickly and directly:
// account, API key and devices through telemetryd's own services, the plan set
// through the real CLI (`accounts set-plan`), then readings bulk-inserted with better-sqlite3
// in big transactions, with readings' triggers dropped and restored afterwards.
// argv[2] is a JSON file: {bundle, cli, dir, rows, devices, spanMs, dense?: {rows, stepMs}}.
// `dense` adds one more device with a reading every stepMs up to generation (its rows count
// toward `rows`): the aggregate endpoint's subject. Writes <dir>/bench.json.

import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const require = createRequire(import.meta.url);
const { openDatabase, composeServices } = require(cfg.bundle);

const db = openDatabase(cfg.dir);
const { services, storage } = composeServices(db);
const email = 'bench@example.com';
const account = await services.accounts.create({ email, plan: 'enterprise' });
const { key } = await services.keys.create(account, 'bench');
const devices = [];
for (let i = 0; i < cfg.devices; i++) {
  const { device, accessToken } = await services.devices.create(account, { name: `sensor ${i + 1}`, schemaMode: 'flexible' });
  devices.push({ id: device.id, seq: device.seq, token: accessToken });
}

const dense =
  cfg.dense?.rows > 0 ? (await services.devices.create(account, { name: 'dense sensor', schemaMode: 'flexible' })).device : null;
const denseRows = dense ? cfg.dense.rows : 0;

// Readings: interleaved over all devices in time order, as real ingest writes them (reading
// i belongs to device i mod N, has time start + i·step and seq i + 1), so the clustered table
// (device_seq, time, seq) gets the partly filled pages that live ingest leaves behind.
const generatedAt = Date.now();
if (cfg.rows > 0) {
  // Secondary indexes and triggers of readings go during the load and come back after it.
  const indexes = db
    .prepare(
      "SELECT type, name, sql FROM sqlite_master WHERE type IN ('index', 'trigger') AND tbl_name = 'readings_by_device' AND sql IS NOT NULL",
    )
    .all();
  for (const ix of indexes) db.exec(`DROP ${ix.type.toUpperCase()} ${ix.name}`);
  db.pragma('synchronous = OFF');
  const insert = db.prepare('INSERT INTO readings_by_device (device_seq, time, seq, data) VALUES (?, ?, ?, ?)');
  const regularRows = cfg.rows - denseRows;
  const start = generatedAt - cfg.spanMs;
  const step = cfg.spanMs / regularRows;
  const chunk = 200_000;
  const insertChunk = db.transaction((from, to) => {
    for (let i = from; i < to; i++) {
      const d = devices[i % devices.length];
      const v = i % 1000;
      insert.run(
        d.seq,
        Math.floor(start + i * step),
        i + 1,
        `{"temperature":${(15 + v / 50).toFixed(2)},"humidity":${(30 + (v % 400) / 10).toFixed(1)},"battery":${(3 + (v % 100) / 100).toFixed(2)}}`,
      );
    }
  });
  for (let from = 0; from < regularRows; from += chunk) insertChunk(from, Math.min(regularRows, from + chunk));
  // The dense device: one reading every stepMs, the newest one stepMs before generation.
  const insertDense = db.transaction((from, to) => {
    for (let i = from; i < to; i++) {
      const v = i % 1000;
      insert.run(
        dense.seq,
        generatedAt - (denseRows - i) * cfg.dense.stepMs,
        regularRows + i + 1,
        `{"temperature":${(15 + v / 50).toFixed(2)},"env":{"humidity":${(30 + (v % 400) / 10).toFixed(1)}},"battery":${(3 + (v % 100) / 100).toFixed(2)}}`,
      );
    }
  });
  for (let from = 0; from < denseRows; from += chunk) insertDense(from, Math.min(denseRows, from + chunk));
  db.prepare('UPDATE reading_seq SET last = ?').run(cfg.rows);
  for (const ix of indexes) db.exec(ix.sql);
  // Tables the triggers keep (reading_counts) are refilled from readings the way migration 4 does.
  if (typeof storage.repos.readings.rebuildDerived === 'function') storage.repos.readings.rebuildDerived();
  // Rollups for aggregates, as the server's background job would have left them.
  if (typeof services.rollups?.rebuild === 'function') await services.rollups.rebuild();
  db.pragma('wal_checkpoint(TRUNCATE)');
}
db.close();

// Enterprise with rate limits raised, so the Public API measurements never meet a 429.
execFileSync(
  process.execPath,
  [
    cfg.cli,
    'accounts',
    'set-plan',
    email,
    'enterprise',
    '--rate-per-minute',
    '100000000',
    '--rate-per-day',
    '1000000000',
    '--data-dir',
    cfg.dir,
    '--json',
  ],
  {
    stdio: ['ignore', 'ignore', 'inherit'],
  },
);
writeFileSync(
  path.join(cfg.dir, 'bench.json'),
  JSON.stringify({ email, key, devices, dense: dense && { id: dense.id, seq: dense.seq, rows: denseRows }, rows: cfg.rows, generatedAt }),
);
console.log(JSON.stringify({ rows: cfg.rows, devices: devices.length }));
