#!/usr/bin/env node
// A/B of the whole server under the benchmark's real load (BENCHMARKS.md, "Measuring"): this
// work tree's bundle against another revision's, each a `serve` process of its own on a copy
// of the bench's device set, loaded in turn (ABBA) by the same load generators as `npm run
// bench`. For changes whose effect depends on how requests arrive (batching, timers), which
// the in-process pipelineAb.mjs cannot show.
// Usage: node scripts/bench/serverAb.mjs [--base REV] [--rounds N] [--seconds S] [--mqtt] [--connections N] [--rate R] [--executable]
//   --base REV    the revision to compare with (default HEAD: the uncommitted change alone)
//   --rounds N    measured rounds per side (default 8)
//   --seconds S   length of each round, after a 1-second warm-up (default 4)
//   --mqtt        MQTT QoS 1 over plain TCP (10 clients × 50 in flight) instead of HTTP ingest
//   --connections N  HTTP connections, each with one request in flight (default 50, the bench's)
//   --executable  run each tree's single executable (its Node), as `npm run bench` does, not its bundle on this Node
//   --rate R      HTTP at R requests per second in all instead of as fast as answered: the CPU
//                 a change costs a server that is not saturated
// Prints, per side, the median of the rounds' throughput and server CPU µs per reading, and the
// medians of the paired differences (B − A). Run it on a quiet machine only.
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { baseWorktree, benchDeviceSet, flag, option, ROOT } from './abTrees.mjs';

const base = option('--base', 'HEAD');
const rounds = Number(option('--rounds', '8'));
const seconds = Number(option('--seconds', '4'));
const mqtt = flag('--mqtt');
const rate = Number(option('--rate', '0'));
const connections = Number(option('--connections', '50'));
const executable = flag('--executable');

const dataset = benchDeviceSet();
const devices = JSON.parse(readFileSync(path.join(dataset, 'bench.json'), 'utf8')).devices;
const { commit, tree: baseTree } = baseWorktree(base);
// The base tree shares this one's cache (the pinned Node and the addon built for it).
if (executable && !existsSync(path.join(baseTree, '.cache'))) symlinkSync(path.join(ROOT, '.cache'), path.join(baseTree, '.cache'));
for (const tree of [baseTree, ROOT]) {
  execFileSync(process.execPath, ['scripts/build.mjs'], { cwd: tree, stdio: ['ignore', 'ignore', 'inherit'] });
  // Through npm, which ships the node-gyp the addon's build needs.
  if (executable) execFileSync('npm', ['run', '-s', 'build:binary'], { cwd: tree, stdio: ['ignore', 'ignore', 'inherit'] });
}

const temps = [];
const tempDir = (prefix) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  temps.push(dir);
  return dir;
};
const children = new Set();

/** Starts `serve` from a tree's bundle on a copy of the device set; resolves with its pid and port. */
function startServer(tree) {
  const dir = tempDir('tlm-ab-data-');
  cpSync(dataset, dir, { recursive: true });
  const args = ['serve', '--data-dir', dir, '--host', '127.0.0.1', '--http-port', '0', '--mqtt-port', 'off', '--log-level', 'warn'];
  if (mqtt) args.push('--mqtt-plain-port', '0');
  const [cmd, cmdArgs] = executable
    ? [path.join(tree, 'dist', 'telemetryd'), args]
    : [process.execPath, [path.join(tree, 'dist', 'telemetryd.cjs'), ...args]];
  const child = spawn(cmd, cmdArgs, { stdio: ['ignore', 'pipe', 'inherit'] });
  children.add(child);
  const ready = mqtt ? /MQTT without TLS listening on [^\s]*:(\d+)/ : /HTTP listening on [^\s]*:(\d+)/;
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (b) => {
      out += b;
      const m = ready.exec(out);
      if (m) resolve({ pid: child.pid, port: Number(m[1]), child });
    });
    child.once('exit', (code) => reject(new Error(`server of ${tree} exited ${code}: ${out.slice(-300)}`)));
  });
}

/** Runs a load generator script once and resolves with its JSON line. */
function runLoad(script, config) {
  const cfgFile = path.join(tempDir('tlm-ab-cfg-'), 'cfg.json');
  writeFileSync(cfgFile, JSON.stringify(config));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(ROOT, 'scripts', 'bench', script), cfgFile], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (b) => (out += b));
    child.once('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out.trim().split('\n').pop())) : reject(new Error(`${script} exited ${code}`)),
    );
  });
}

const bodies = devices.map((d, i) =>
  JSON.stringify({ device_id: d.id, access_token: d.token, data: { temperature: 20 + (i % 100) / 10, humidity: 41.5, battery: 3.71 } }),
);
const mqttPayload = JSON.stringify({ temperature: 21.5, humidity: 41.5, battery: 3.71, rssi: -61, seq: 123456 });

/** Readings stored and group commits so far, from the server's /metrics (commits null before the metric existed). */
async function commitCounts(server) {
  if (mqtt) return null;
  const text = await (await fetch(`http://127.0.0.1:${server.port}/metrics`)).text();
  const value = (re) => {
    const m = re.exec(text);
    return m ? Number(m[1]) : null;
  };
  return {
    readings: value(/^telemetryd_ingest_readings_total\{transport="http"\} (\S+)/m),
    commits: value(/^telemetryd_writer_commits_total (\S+)/m),
  };
}

/** One round against a server: readings per second, the server's CPU µs per reading and the readings per commit. */
async function round(server) {
  const before = await commitCounts(server);
  const result = await load(server);
  const after = await commitCounts(server);
  result.perCommit =
    after?.commits && before?.commits != null ? (after.readings - before.readings) / (after.commits - before.commits) : null;
  return result;
}

async function load(server) {
  if (!mqtt) {
    const r = await runLoad('httpLoad.mjs', {
      serverPid: server.pid,
      url: `http://127.0.0.1:${server.port}`,
      connections,
      rate,
      durationS: seconds,
      warmupS: 1,
      bodies,
    });
    return { rate: r.rps, cpuUs: (r.server_cpu_s / r.seconds / r.rps) * 1e6, p99: r.p99_ms };
  }
  const r = await runLoad('mqttLoad.mjs', {
    serverPid: server.pid,
    port: server.port,
    clients: devices.slice(0, 10),
    inflight: 50,
    durationS: seconds,
    warmupS: 1,
    payload: mqttPayload,
  });
  return { rate: r.mps, cpuUs: (r.server_cpu_s / seconds / r.mps) * 1e6, p99: null };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const load1 = os.loadavg()[0];
try {
  const A = await startServer(baseTree);
  const B = await startServer(ROOT);
  const results = { A: [], B: [] };
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? ['A', 'B'] : ['B', 'A'];
    for (const side of order) results[side].push(await round(side === 'A' ? A : B));
    const [a, b] = [results.A[r], results.B[r]];
    console.log(
      `round ${r + 1}: A ${a.rate.toFixed(0)}/s ${a.cpuUs.toFixed(2)} µs, B ${b.rate.toFixed(0)}/s ${b.cpuUs.toFixed(2)} µs` +
        (mqtt
          ? ''
          : ` (p99 ${a.p99} / ${b.p99} ms; readings per commit ${a.perCommit?.toFixed(1) ?? '?'} / ${b.perCommit?.toFixed(1) ?? '?'})`),
    );
  }
  const pairs = results.A.map((a, i) => [a, results.B[i]]);
  console.log(`load average at start ${load1.toFixed(2)}, at end ${os.loadavg()[0].toFixed(2)}; A = ${commit}, B = work tree`);
  console.log(
    `median rate A ${median(results.A.map((x) => x.rate)).toFixed(0)}/s, B ${median(results.B.map((x) => x.rate)).toFixed(0)}/s; ratio B/A ${median(pairs.map(([a, b]) => b.rate / a.rate)).toFixed(3)}`,
  );
  console.log(
    `median CPU per reading A ${median(results.A.map((x) => x.cpuUs)).toFixed(2)} µs, B ${median(results.B.map((x) => x.cpuUs)).toFixed(2)} µs; paired B − A ${median(pairs.map(([a, b]) => b.cpuUs - a.cpuUs)).toFixed(2)} µs (B lower in ${pairs.filter(([a, b]) => b.cpuUs < a.cpuUs).length} of ${rounds})`,
  );
} finally {
  for (const c of children) c.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 500));
  for (const d of temps) rmSync(d, { recursive: true, force: true });
}
