// Sustained ingest: telemetryd's own ingest pipeline (device authentication,
// validation, schema check, group-commit writer) driven in-process against a database that
// already holds the big data set; 1,000 devices round-robin, `perPass` readings in flight per
// event-loop pass, as many concurrent connections would produce. Transport cost is measured
// by the HTTP and MQTT scenarios; this one measures what storage sustains.
// argv[2] is a JSON file: {bundle, dir, durationS, perPass}. Prints one JSON line.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const require = createRequire(import.meta.url);
const { openDatabase, composeServices } = require(cfg.bundle);
const meta = JSON.parse(readFileSync(path.join(cfg.dir, 'bench.json'), 'utf8'));

const db = openDatabase(cfg.dir);
const { services, storage } = composeServices(db);
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
// The last reading seq issued before the run: how many readings the database held.
const before = db.prepare('SELECT last FROM reading_seq').get()?.last ?? 0;
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
storage.writer.close();
db.close();
console.log(JSON.stringify({ rows_per_s: rows / seconds, rows_before: before, max_batch: storage.writer.maxBatch }));
