// Measures the single executable for the benchmark report, not for tests:
// size, time from exec to the HTTP listener accepting connections (median of N starts),
// and idle RSS. Usage: node scripts/measure-binary.mjs [path/to/telemetryd] [--runs 5]
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const args = process.argv.slice(2);
const runsAt = args.indexOf('--runs');
const runs = runsAt >= 0 ? Number(args[runsAt + 1]) : 5;
const exe = path.resolve(args.find((a, i) => !a.startsWith('--') && args[i - 1] !== '--runs') ?? 'dist/telemetryd');
const dir = mkdtempSync(path.join(tmpdir(), 'telemetryd-measure-'));
const dataDir = path.join(dir, 'data');

/**
 * Starts serve and resolves when the listening line is printed (it is printed once listen()
 * has resolved, so the socket accepts from then on) and a request has been answered.
 */
function start() {
  const t0 = process.hrtime.bigint();
  const child = spawn(
    exe,
    ['serve', '--data-dir', dataDir, '--host', '127.0.0.1', '--http-port', '0', '--mqtt-port', '0', '--log-level', 'warn'],
    {
      cwd: dir,
      env: { PATH: '/usr/bin:/bin', HOME: dir },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  let out = '';
  return new Promise((resolve, reject) => {
    child.on('exit', (code) => reject(new Error(`serve exited with ${code}: ${out}`)));
    child.stdout.on('data', async (d) => {
      out += d;
      const m = /HTTP listening on [^\s]+:(\d+)/.exec(out);
      if (!m || child.listening) return;
      child.listening = true;
      const listenedMs = Number(process.hrtime.bigint() - t0) / 1e6;
      const res = await fetch(`http://127.0.0.1:${m[1]}/healthz`);
      if (res.status !== 200) reject(new Error(`healthz ${res.status}`));
      resolve({ child, listenedMs });
    });
  });
}

const stop = (child) =>
  new Promise((resolve) => {
    child.removeAllListeners('exit');
    child.on('exit', resolve);
    child.kill('SIGTERM');
  });

const rssMb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]) / 1024;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

try {
  const sizeMb = statSync(exe).size / 1024 / 1024;
  // The first start on a new data dir extracts the addon (and dashboard) into .cache/.
  const first = await start();
  await stop(first.child);
  const times = [];
  let idle = null;
  for (let i = 0; i < runs; i++) {
    const { child, listenedMs } = await start();
    times.push(listenedMs);
    if (i === runs - 1) {
      await new Promise((r) => setTimeout(r, 5000));
      idle = rssMb(child.pid);
    }
    await stop(child);
  }
  const result = {
    executable: exe,
    size_mb: Number(sizeMb.toFixed(1)),
    first_start_ms: Math.round(first.listenedMs),
    start_to_listening_ms: { median: Math.round(median(times)), runs: times.map(Math.round) },
    idle_rss_mb: Number(idle.toFixed(1)),
  };
  console.log(JSON.stringify(result, null, 2));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
