#!/usr/bin/env node
// In-process A/B of the ingest pipeline (BENCHMARKS.md, "Measuring"): this work tree against
// another revision, as two servers in one process, each fed the same readings in alternating
// 1-second rounds. Usage: node scripts/bench/pipelineAb.mjs [--base REV] [--rounds N] [--inflight K] [--devices D] [--mqtt | --http]
//   --base REV    the revision to compare with (default HEAD: the uncommitted change alone)
//   --rounds N    measured rounds per side (default 16)
//   --inflight K  readings in flight per event-loop pass, over the bench's 1,000 devices
//                 (default 13: what one pass of the HTTP bench's load delivers)
//   --devices D   spread them over the first D devices only (default all 1,000); the MQTT
//                 bench's shape is --devices 10 --inflight 500 --mqtt
//   --mqtt        hand the pipeline each reading as payload bytes, as the MQTT hook does
//   --http        go through fastify's request handling (inject) instead of calling the
//                 pipeline: adds the route, parsing and hooks, and much more noise
// Prints the median CPU µs per reading of each side and the median of the paired
// differences. Rounds alternate so that a host slowing down or speeding up moves both sides;
// on a noisy host the paired difference is what to read, not a throughput ratio.
import { spawnSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { baseWorktree, benchDeviceSet, flag, option, ROOT } from './abTrees.mjs';

const base = option('--base', 'HEAD');
const rounds = Number(option('--rounds', '16'));
const inflight = Number(option('--inflight', '13'));
const http = flag('--http');
const mqtt = flag('--mqtt');
const deviceCount = Number(option('--devices', '0'));

const deviceSet = benchDeviceSet();
const { commit, tree: baseTree } = baseWorktree(base);
const abDir = path.dirname(baseTree);

const entry = path.join(abDir, 'pipelineAb.entry.ts');
writeFileSync(
  entry,
  `import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as configA from ${JSON.stringify(path.join(baseTree, 'src', 'config.ts'))};
import * as serverA from ${JSON.stringify(path.join(baseTree, 'src', 'server.ts'))};
import * as configB from ${JSON.stringify(path.join(ROOT, 'src', 'config.ts'))};
import * as serverB from ${JSON.stringify(path.join(ROOT, 'src', 'server.ts'))};

const SRC = ${JSON.stringify(deviceSet)};
const dirs: string[] = [];
async function start(config: typeof configB, server: typeof serverB) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'telemetryd-ab-'));
  dirs.push(dir);
  cpSync(SRC, dir, { recursive: true });
  return server.startServer(config.buildServerConfig({ 'data-dir': dir, host: '127.0.0.1', 'http-port': '0', 'mqtt-port': 'off', 'log-level': 'error' }), {});
}
const allDevices: { id: string; token: string }[] = JSON.parse(readFileSync(path.join(SRC, 'bench.json'), 'utf8')).devices;
const devices = ${deviceCount} > 0 ? allDevices.slice(0, ${deviceCount}) : allDevices;
const servers = { A: await start(configA, serverA), B: await start(configB, serverB) };
type Server = typeof servers.B;
let n = 0;
const reading = () => ({ temperature: 20 + (n % 100) / 10, humidity: 41.5, battery: 3.71 });
async function pass(s: Server) {
  const pending = [];
  for (let i = 0; i < ${inflight}; i++, n++) {
    const d = devices[n % devices.length]!;
    pending.push(
      ${http}
        ? s.app.inject({ method: 'POST', url: '/api/devices/ingest', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ device_id: d.id, access_token: d.token, data: reading() }) })
            .then((r) => { if (r.statusCode !== 200) throw new Error(r.body); })
        : ${mqtt}
          ? s.services.ingest.ingestReading({ transport: 'mqtt', deviceId: d.id, token: d.token, data: Buffer.from(JSON.stringify(reading())) })
          : s.services.ingest.ingestReading({ transport: 'http', deviceId: d.id, token: d.token, data: reading() }),
    );
  }
  await Promise.all(pending);
}
async function round(s: Server, ms: number) {
  const cpu = process.cpuUsage();
  const n0 = n;
  for (const end = performance.now() + ms; performance.now() < end; ) await pass(s);
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / (n - n0);
}
for (const s of Object.values(servers)) await round(s, 3000);
const us: Record<'A' | 'B', number[]> = { A: [], B: [] };
for (let r = 0; r < ${rounds}; r++) for (const k of (r % 2 ? ['A', 'B'] : ['B', 'A']) as ('A' | 'B')[]) us[k].push(await round(servers[k], 1000));
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;
const saved = us.A.map((a, i) => a - us.B[i]!);
console.log(
  \`base ${commit}: \${median(us.A).toFixed(2)} µs per reading; this tree: \${median(us.B).toFixed(2)} µs; \` +
    \`paired difference (base − this) median \${median(saved).toFixed(2)} µs, this tree cheaper in \${saved.filter((d) => d > 0).length} of ${rounds} rounds\`,
);
for (const s of Object.values(servers)) await s.close();
for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
`,
);
const bundle = path.join(abDir, 'pipelineAb.mjs');
await build({
  entryPoints: [entry],
  bundle: true,
  platform: 'node',
  format: 'esm',
  packages: 'external',
  outfile: bundle,
  logLevel: 'warning',
});
const run = spawnSync(process.execPath, [bundle], { stdio: ['ignore', 'inherit', 'inherit'] });
rmSync(entry, { force: true });
process.exit(run.status ?? 1);
