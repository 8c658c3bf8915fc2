// MQTT QoS 1 load generator, run as its own process. argv[2] is a JSON file:
// {port, clients: [{id, token}], inflight, durationS, warmupS, payload, serverPid, dbPid?}. Each client
// keeps `inflight` QoS 1 publishes outstanding and publishes again on each PUBACK. Prints one
// JSON line: acknowledged messages per second over the measured window, and the server's CPU
// seconds over that window.

import { readFileSync } from 'node:fs';
import mqtt from 'mqtt';
import { cpuSeconds, treeCpuSeconds } from './procStats.mjs';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
let counting = false;
let acked = 0;
let failed = 0;
let stopping = false;

const clients = await Promise.all(
  cfg.clients.map(
    (c) =>
      new Promise((resolve, reject) => {
        const client = mqtt.connect({
          host: '127.0.0.1',
          port: cfg.port,
          protocolVersion: 4,
          clientId: `bench-${c.id}-${process.pid}`,
          username: c.id,
          password: c.token,
          reconnectPeriod: 0,
          connectTimeout: 20_000,
        });
        client.once('connect', () => resolve({ client, topic: `d/${c.id}/t` }));
        client.once('error', reject);
      }),
  ),
);

const payload = Buffer.from(cfg.payload);
function publish(c) {
  if (stopping) return;
  c.client.publish(c.topic, payload, { qos: 1 }, (err) => {
    if (err) failed++;
    else if (counting) acked++;
    publish(c);
  });
}
for (const c of clients) for (let i = 0; i < cfg.inflight; i++) publish(c);

await new Promise((r) => setTimeout(r, cfg.warmupS * 1000));
counting = true;
const cpu0 = cpuSeconds(cfg.serverPid);
const db0 = cfg.dbPid ? treeCpuSeconds(cfg.dbPid) : null;
const t0 = performance.now();
await new Promise((r) => setTimeout(r, cfg.durationS * 1000));
counting = false;
const cpu1 = cpuSeconds(cfg.serverPid);
const db1 = cfg.dbPid ? treeCpuSeconds(cfg.dbPid) : null;
const seconds = (performance.now() - t0) / 1000;
stopping = true;
console.log(
  JSON.stringify({
    mps: acked / seconds,
    acked,
    failed,
    seconds,
    server_cpu_s: cpu0 == null || cpu1 == null ? null : cpu1 - cpu0,
    db_cpu_s: db0 == null || db1 == null ? null : db1 - db0,
  }),
);
await Promise.all(clients.map((c) => new Promise((r) => c.client.end(true, {}, r))));
process.exit(0);
