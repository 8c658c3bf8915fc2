import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = path.resolve(__dirname, '..', '..');

const isFigure = (v: unknown) => typeof v === 'number' && Number.isFinite(v) && v > 0;

/**
 * The benchmark's shape, not its figures: targets are checked by the benchmark, never by
 * timed tests. The quick run is the slowest test of the suite.
 */
describe('npm run bench -- --quick --json', () => {
  it('measures every scenario and prints one JSON object as its last line', { timeout: 240_000 }, async () => {
    // --no-build: vitest's globalSetup has just built dist/telemetryd.cjs.
    const { stdout } = await run(process.execPath, ['scripts/bench/run.mjs', '--quick', '--json', '--no-build'], {
      cwd: ROOT,
      maxBuffer: 16 * 1024 * 1024,
      timeout: 230_000,
    });
    const last = stdout.trim().split('\n').pop()!;
    const r = JSON.parse(last);

    expect(r.quick).toBe(true);
    for (const k of ['baseline_rps', 'rps', 'ratio', 'p99_ms'])
      expect(isFigure(r.http_ingest[k]), `http_ingest.${k} = ${r.http_ingest[k]}`).toBe(true);
    expect(r.http_ingest.connections).toBe(50);
    expect(r.http_ingest.devices).toBe(1000);

    for (const k of ['baseline_mps', 'mps', 'ratio', 'mosquitto_mps', 'ratio_to_mosquitto'])
      expect(isFigure(r.mqtt_qos1[k]), `mqtt_qos1.${k} = ${r.mqtt_qos1[k]}`).toBe(true);
    // The server's CPU per reading, telemetryd's and the baseline's, from /proc.
    for (const side of [r.http_ingest, r.mqtt_qos1]) {
      expect(isFigure(side.cpu_us) && isFigure(side.baseline_cpu_us)).toBe(true);
      expect(typeof side.cpu_us_above_baseline).toBe('number');
    }
    expect(r.connections.sessions).toBe(300);
    expect(r.connections.rss_settled_mb).toBeGreaterThan(r.connections.rss_before_mb);
    // The same sessions on bare aedes over TLS (on the server's own Node) and on mosquitto.
    for (const k of ['kb_per_session', 'kb_per_session_connected', 'baseline_kb_per_session', 'mosquitto_kb_per_session'])
      expect(isFigure(r.connections[k]), `connections.${k} = ${r.connections[k]}`).toBe(true);
    expect(r.connections.above_baseline_kb).toBeCloseTo(r.connections.kb_per_session - r.connections.baseline_kb_per_session, 0);
    expect(r.connections.baseline).toMatch(/^bare aedes over TLS on Node \d+\.\d+\.\d+, OpenSSL /);
    // The run says whether the machine was quiet, and by what it judged.
    expect(r.machine.quiet).toBe(r.machine.load_average_1m[0] <= 0.5);
    expect(r.machine.busy_processes).toHaveLength(2);
    // And whether the host is slower than at the report a full run would replace (null: none to compare with).
    const vsLast = r.machine.baseline_cpu_vs_last_report;
    if (vsLast === null) expect(r.machine.slower_host).toBe(false);
    else expect(r.machine.slower_host).toBe(vsLast > 1.5);
    expect(isFigure(r.sustained_rows_per_s)).toBe(true);
    expect(r.history.rows_in_db).toBeGreaterThanOrEqual(100_000);
    expect(r.history.rows_returned).toBeGreaterThan(0);
    for (const k of ['p50_ms', 'p99_ms']) expect(isFigure(r.history[k])).toBe(true);
    expect(r.history.p99_ms).toBeGreaterThanOrEqual(r.history.p50_ms);
    expect(isFigure(r.usage.p50_ms)).toBe(true);
    expect(r.usage.data_points_24h).toBeGreaterThan(0);
    // Aggregates of the dense device at each long range's default interval.
    for (const [range, interval] of [
      ['24h', '5m'],
      ['7d', '1h'],
      ['30d', '6h'],
    ]) {
      const a = r.aggregate[range!];
      for (const k of ['p50_ms', 'p99_ms']) expect(isFigure(a[k]), `aggregate.${range}.${k} = ${a[k]}`).toBe(true);
      expect(a.p99_ms).toBeGreaterThanOrEqual(a.p50_ms);
      expect(a.interval).toBe(interval);
      expect(a.buckets).toBeGreaterThan(0);
    }
    expect(r.aggregate['30d'].readings).toBeGreaterThan(r.aggregate['7d'].readings);
    expect(isFigure(r.database.bytes)).toBe(true);
    expect(isFigure(r.idle_rss_mb)).toBe(true);
    expect(isFigure(r.start_ms)).toBe(true);
    expect(r.machine).toMatchObject({ nproc: expect.any(Number), node: process.version });
    // Every acknowledged reading was stored (the harness notes any shortfall). Timeouts of the
    // load generator on a starved machine are noted too, but are not a failure of telemetryd.
    expect(Array.isArray(r.notes)).toBe(true);
    expect(r.notes.filter((n: string) => /acknowledged but only/.test(n))).toEqual([]);
    expect(r.http_ingest.readings_stored).toBeGreaterThan(0);
  });
});
