// Latency client, run as its own process like the load generators, so the harness's
// own heap and GC stay out of the figures. argv[2] is a JSON file:
// {url, key, warmup, paths: [string]}: GETs each path in turn from one keep-alive connection
// (node:http, body read as Buffers: fetch + text() would add its own decoding of each 130 KB
// history body to the figure). Prints one JSON line: {times_ms: [...]} of the requests after
// the warm-up ones.

import { readFileSync } from 'node:fs';
import http from 'node:http';

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const { hostname, port } = new URL(cfg.url);
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const get = (p) =>
  new Promise((resolve, reject) => {
    http
      .get({ host: hostname, port, path: p, agent, headers: { authorization: `Bearer ${cfg.key}` } }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      })
      .on('error', reject);
  });

const times = [];
for (let i = 0; i < cfg.paths.length; i++) {
  const t0 = performance.now();
  const { status, body } = await get(cfg.paths[i]);
  const ms = performance.now() - t0;
  if (status !== 200 || body.length === 0) {
    console.error(`GET ${cfg.paths[i]}: ${status} ${body.toString('utf8', 0, 200)}`);
    process.exit(1);
  }
  if (i >= cfg.warmup) times.push(ms);
}
agent.destroy();
console.log(JSON.stringify({ times_ms: times }));
