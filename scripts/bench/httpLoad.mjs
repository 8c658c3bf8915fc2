// HTTP load generator, run as its own process so load never shares the server's process. argv[2] is a JSON file:
// {url, connections, durationS, warmupS, bodies: [string], serverPid, dbPid?, rate?} (rate: requests per second in all, else as fast as answered). Bodies are sent round-robin, so every device of
// the list writes. Prints one JSON line, with the server's CPU seconds over the measured window (and PostgreSQL's, the
// postmaster's process tree, when dbPid is given).

import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import { cpuSeconds, treeCpuSeconds } from './procStats.mjs';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const bodies = cfg.bodies;
let next = 0;

function run(durationS) {
  return autocannon({
    url: cfg.url,
    connections: cfg.connections,
    duration: durationS,
    pipelining: 1,
    ...(cfg.rate ? { overallRate: cfg.rate } : {}),
    requests: [
      {
        method: 'POST',
        path: '/api/devices/ingest',
        headers: { 'content-type': 'application/json' },
        setupRequest: (req) => ({ ...req, body: bodies[next++ % bodies.length] }),
      },
    ],
  });
}

if (cfg.warmupS > 0) await run(cfg.warmupS);
const cpu0 = cpuSeconds(cfg.serverPid);
const db0 = cfg.dbPid ? treeCpuSeconds(cfg.dbPid) : null;
const r = await run(cfg.durationS);
const cpu1 = cpuSeconds(cfg.serverPid);
const db1 = cfg.dbPid ? treeCpuSeconds(cfg.dbPid) : null;
console.log(
  JSON.stringify({
    rps: r['2xx'] / (r.duration || cfg.durationS),
    p50_ms: r.latency.p50,
    p99_ms: r.latency.p99,
    ok: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors,
    timeouts: r.timeouts,
    server_cpu_s: cpu0 == null || cpu1 == null ? null : cpu1 - cpu0,
    db_cpu_s: db0 == null || db1 == null ? null : db1 - db0,
    seconds: r.duration || cfg.durationS,
  }),
);
