// Sustained ingest: telemetryd's own ingest pipeline (device authentication,
// validation, schema check, group-commit writer) driven in-process against a database that
// already holds the big data set; 1,000 devices round-robin, `perPass` readings in flight per
// event-loop pass, as many concurrent connections would produce. Transport cost is measured
// by the HTTP and MQTT scenarios; this one measures what storage sustains.
// argv[2] is a JSON file: {bundle, dir, databaseUrl, durationS, perPass}; with a database URL the
// data is in PostgreSQL. Prints one JSON line.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const require = createRequire(import.meta.url);
const { openStorage } = require(cfg.bundle);
const meta = JSON.parse(readFileSync(path.join(cfg.dir, 'bench.json'), 'utf8'));

const composition = await openStorage({
  dataDir: cfg.dir,
  snapshotsDir: path.join(cfg.dir, 'snapshots'),
  databaseUrl: cfg.databaseUrl ?? null,
});
const { services, storage } = composition;
const devices = meta.devices;
let n = 0;
let acknowledged = 0;
const ack = () => {
  acknowledged++;
};
async function pass() {
  const batch = [];
  for (let i = 0; i < cfg.perPass; i++) {
    const d = devices[n++ % devices.length];
    batch.push(
      services.ingest
        .ingestReading({
          transport: 'http',
          deviceId: d.id,
          token: d.token,
          data: { temperature: 20 + (n % 100) / 10, humidity: 41.5, battery: 3.71 },
        })
        .then(ack),
    );
  }
  await Promise.all(batch);
}
// How many readings the database held (SQLite: the last seq issued; PostgreSQL: the sequence's).
const before =
  storage.backend === 'sqlite'
    ? (storage.db.prepare('SELECT last FROM reading_seq').get()?.last ?? 0)
    : Number((await storage.pool.query('SELECT last_value FROM reading_seq')).rows[0].last_value);
// Warm-up: a second of passes, not counted.
const warmEnd = performance.now() + 1000;
while (performance.now() < warmEnd) await pass();
const t0 = performance.now();
const startCount = acknowledged;
const end = t0 + cfg.durationS * 1000;
while (performance.now() < end) await pass();
const seconds = (performance.now() - t0) / 1000;
// Acknowledged readings: each one committed before its promise resolved.
const rows = acknowledged - startCount;
await composition.close();
console.log(JSON.stringify({ rows_per_s: rows / seconds, rows_before: before, max_batch: storage.writer.maxBatch }));
