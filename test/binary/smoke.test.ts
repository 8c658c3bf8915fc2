import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { TLSSocket } from 'node:tls';
import mqtt from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/server.js';

/**
 * Smoke test of the single executable (docs/executable.md): dist/telemetryd, made by
 * `npm run build:binary` (.ci/run builds it before `npm test`), run from an empty directory
 * with node_modules out of reach and no `node` on PATH. Building takes a while, so a plain
 * `npm test` without the executable skips this file with a message; CI sets
 * TELEMETRYD_REQUIRE_BINARY=1, which turns a missing executable into a failure.
 */
const BINARY = path.resolve(process.env.TELEMETRYD_BINARY ?? 'dist/telemetryd');
const haveBinary = existsSync(BINARY);
if (!haveBinary) {
  if (process.env.TELEMETRYD_REQUIRE_BINARY === '1') throw new Error(`${BINARY} is missing: run npm run build:binary first`);
  console.warn(`test/binary/smoke.test.ts SKIPPED: ${BINARY} not built (npm run build:binary)`);
}
/**
 * An emulator to run the executable with, for the arm64 build on an x64 machine:
 * TELEMETRYD_BINARY=dist/telemetryd-linux-arm64 TELEMETRYD_BINARY_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu".
 * Resolved here to an absolute path: the executable runs with an empty PATH.
 */
const runner = (process.env.TELEMETRYD_BINARY_RUNNER ?? '').split(' ').filter(Boolean);
if (runner.length > 0) runner[0] = spawnSync('sh', ['-c', `command -v ${runner[0]}`], { encoding: 'utf8' }).stdout.trim() || runner[0];
/** Emulation makes each start take seconds. */
const slow = runner.length > 0 ? 4 : 1;
const command = (exe: string, args: string[]): [string, string[]] =>
  runner.length > 0 ? [runner[0], [...runner.slice(1), exe, ...args]] : [exe, args];
const dashboardBuilt = existsSync('dist/web/index.html');
const hasMqtt = existsSync('src/mqtt');

describe.skipIf(!haveBinary)('single executable smoke test', () => {
  let dir: string;
  let exe: string;
  /** PATH holding one empty directory: no node, no npm, nothing else. */
  let env: NodeJS.ProcessEnv;

  const runExe = (args: string[], input?: string) =>
    spawnSync(...command(exe, args), { cwd: dir, env, encoding: 'utf8', input, timeout: 30_000 * slow });
  const runExeAsync = (args: string[]) =>
    new Promise<{ status: number | null; stdout: string }>((resolve, reject) => {
      const child = spawn(...command(exe, args), { cwd: dir, env, stdio: ['ignore', 'pipe', 'inherit'] });
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.on('error', reject);
      child.on('close', (status) => resolve({ status, stdout }));
    });
  const runJson = (args: string[]) => {
    const r = runExe([...args, '--json', '--data-dir', 'data']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    return JSON.parse(r.stdout);
  };

  beforeAll(() => {
    dir = tempDir('telemetryd-smoke-');
    exe = path.join(dir, 'telemetryd');
    copyFileSync(BINARY, exe);
    mkdirSync(path.join(dir, 'emptybin'));
    env = { PATH: path.join(dir, 'emptybin'), HOME: dir, LANG: 'C.UTF-8' };
    // Nothing of the checkout is reachable: no node_modules up the tree from the temp dir.
    let up = dir;
    while (up !== path.dirname(up)) {
      expect(existsSync(path.join(up, 'node_modules'))).toBe(false);
      up = path.dirname(up);
    }
  });

  it('runs without node on PATH and prints its version and build commit', () => {
    expect(spawnSync('node', ['--version'], { env }).error).toBeTruthy(); // no node here
    const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
    const r = runExe(['version', '--json']);
    expect(r.status).toBe(0);
    const v = JSON.parse(r.stdout);
    expect(v.version).toBe(pkg.version);
    expect(v.commit).toMatch(/^[0-9a-f]{7,}$/);
    expect(runExe(['version']).stdout).toBe(`telemetryd ${pkg.version} (${v.commit})\n`);
  });

  it(
    'has complete help: every command and subcommand has a description and its own help',
    async () => {
      const seen: string[] = [];
      // Each level's helps run at once: one start of a 100 MB executable is slow on a busy machine.
      const visit = async (cmdPath: string[]): Promise<void> => {
        const r = await runExeAsync([...cmdPath, '--help']);
        expect(r.status, `${cmdPath.join(' ')} --help`).toBe(0);
        expect(r.stdout).toMatch(/^Usage: telemetryd/);
        seen.push(cmdPath.join(' '));
        const commands = r.stdout.split(/\nCommands:\n/)[1];
        if (!commands) return;
        const children: string[] = [];
        // "  name [options] ARGS   description" lines; continuation lines are indented deeper.
        for (const line of commands.split('\n')) {
          const m = /^ {2}([a-z][a-z-]*)(.*?)(?: {2,}(\S.*))?$/.exec(line);
          if (!m || m[1] === 'help') continue;
          expect(m[3], `description of "${[...cmdPath, m[1]].join(' ')}"`).toBeTruthy();
          children.push(m[1]);
        }
        await Promise.all(children.map((child) => visit([...cmdPath, child])));
      };
      await visit([]);
      for (const expected of ['serve', 'accounts create', 'keys create', 'devices create', 'alerts create', 'version']) {
        expect(seen).toContain(expected);
      }
      // Every serve option is in its help (docs/operations.md, "Configuration").
      const serveHelp = runExe(['serve', '--help']).stdout;
      for (const flag of [
        '--data-dir',
        '--http-port',
        '--mqtt-port',
        '--mqtt-plain-port',
        '--host',
        '--public-url',
        '--tls-cert',
        '--tls-key',
        '--smtp-url',
        '--smtp-from',
        '--durability',
        '--config',
      ]) {
        expect(serveHelp).toContain(flag);
      }
    },
    120_000 * slow,
  );

  describe('serve', () => {
    let server: ChildProcess;
    let output = '';
    let base: string;

    beforeAll(async () => {
      server = spawn(...command(exe, ['serve', '--data-dir', 'data', '--host', '127.0.0.1', '--http-port', '0', '--mqtt-port', '0']), {
        cwd: dir,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      server.stdout!.on('data', (d) => (output += d));
      server.stderr!.on('data', (d) => (output += d));
      const port = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line in:\n${output}`)), 20_000 * slow);
        const check = () => {
          // The data dir is new: the setup URL line follows the listener lines.
          const m = /HTTP listening on [^\s]+:(\d+)/.exec(output);
          if (m && /First run:.*\n/.test(output) && (!hasMqtt || /MQTT over TLS listening.*\n/.test(output))) {
            clearTimeout(timer);
            resolve(m[1]);
          }
        };
        server.stdout!.on('data', check);
        server.on('exit', (code) => reject(new Error(`serve exited with ${code}:\n${output}`)));
      });
      base = `http://127.0.0.1:${port}`;
    }, 60_000 * slow);

    afterAll(async () => {
      if (server.exitCode === null) {
        server.kill('SIGKILL');
      }
    });

    it('prints the first-run setup URL', () => {
      expect(output).toMatch(/First run: open http:\/\/\S+\/setup\?token=\S+/);
    });

    it('extracted the SQLite addon under the data dir, not /tmp', () => {
      const cache = path.join(dir, 'data', '.cache');
      const addonDirs = readdirSync(cache).filter((d) => existsSync(path.join(cache, d, 'better_sqlite3.node')));
      expect(addonDirs).toHaveLength(1);
    });

    it('creates an account, a key and a device with the admin CLI, ingests over HTTP and reads back over /v1', async () => {
      const account = runJson(['accounts', 'create', '--email', 'owner@example.com']);
      expect(account.id).toMatch(/^acc_/);
      const key = runJson(['keys', 'create', '--account', account.id, '--name', 'smoke']);
      expect(key.key).toMatch(/^tlm_/);
      const device = runJson(['devices', 'create', '--account', 'owner@example.com', '--name', 'boiler', '--schema', 'flexible']);
      expect(device.id).toMatch(/^dev_/);

      const ingest = await fetch(`${base}/api/devices/ingest`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${device.access_token}` },
        body: JSON.stringify({ device_id: device.id, data: { temperature: 21.5, env: { rh: 40 } } }),
      });
      expect(ingest.status).toBe(200);
      expect(await ingest.json()).toEqual({ success: true });

      const latest = await fetch(`${base}/v1/devices/${device.id}/telemetry/latest`, { headers: { authorization: `Bearer ${key.key}` } });
      expect(latest.status).toBe(200);
      const body = (await latest.json()) as { data: { data: unknown; time: string } };
      expect(body.data.data).toEqual({ temperature: 21.5, env: { rh: 40 } });
      expect(body.data.time).toMatch(/Z$/);
    });

    it('exports readings as xlsx from the dashboard: exceljs loads from its own asset on first use', async () => {
      // In the executable exceljs is not part of the main script (src/seaLazy.ts).
      const r = runExe(
        ['accounts', 'create', '--email', 'export@example.com', '--password-stdin', '--json', '--data-dir', 'data'],
        'password-123\n',
      );
      expect(r.status, r.stderr).toBe(0);
      const device = runJson(['devices', 'create', '--account', 'export@example.com', '--name', 'xlsx', '--schema', 'flexible']);
      const ingest = await fetch(`${base}/api/devices/ingest`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${device.access_token}` },
        body: JSON.stringify({ device_id: device.id, data: { temperature: 19.5 } }),
      });
      expect(ingest.status).toBe(200);
      const signIn = await fetch(`${base}/ui/api/sign-in`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' },
        body: JSON.stringify({ email: 'export@example.com', password: 'password-123' }),
      });
      expect(signIn.status).toBe(200);
      const cookie = (signIn.headers.get('set-cookie') ?? '').split(';')[0]!;
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`${base}/ui/api/devices/${device.id}/export?format=xlsx&range=24h`, { headers: { cookie } });
        expect(res.status).toBe(200);
        const bytes = Buffer.from(await res.arrayBuffer());
        expect(bytes.subarray(0, 2).toString('latin1')).toBe('PK'); // a zip container
        expect(bytes.includes(Buffer.from('xl/worksheets/sheet1.xml'))).toBe(true);
      }
    });

    it('backs up the running server and restores the archive: tar loads from its own asset on first use', async () => {
      const backup = runJson(['backup', 'backup.tar.gz']);
      expect(backup.bytes).toBeGreaterThan(0);
      const r = runExe(['restore', 'backup.tar.gz', '--data-dir', 'restored', '--json']);
      expect(r.status, r.stderr).toBe(0);
      expect(JSON.parse(r.stdout).data_dir).toBe(path.join(dir, 'restored'));
      expect(existsSync(path.join(dir, 'restored', 'telemetryd.db'))).toBe(true);
    });

    it.skipIf(!hasMqtt)('accepts a reading published over MQTT with TLS (mqtt.js), pinned to the printed certificate', async () => {
      const m = /MQTT over TLS listening on [^\s]+:(\d+) \(.*certificate (\S+), SHA-256 fingerprint ([0-9A-Fa-f:]+)\)/.exec(output);
      expect(m, output).toBeTruthy();
      const [, port, certPath, fingerprint] = m!;
      const account = runJson(['accounts', 'create', '--email', 'mqtt@example.com']);
      const key = runJson(['keys', 'create', '--account', account.id, '--name', 'mqtt']);
      const device = runJson(['devices', 'create', '--account', account.id, '--name', 'meter', '--schema', 'flexible']);
      const client = await mqtt.connectAsync(
        `mqtts://127.0.0.1:${port}`,
        {
          username: device.id,
          password: device.access_token,
          ca: readFileSync(path.resolve(dir, certPath)),
          rejectUnauthorized: true,
          reconnectPeriod: 0,
        },
        false,
      );
      try {
        const socket = (client as unknown as { stream: TLSSocket }).stream;
        expect(socket.getPeerCertificate().fingerprint256.replace(/:/g, '').toLowerCase()).toBe(
          fingerprint.replace(/:/g, '').toLowerCase(),
        );
        await client.publishAsync(`d/${device.id}/t`, JSON.stringify({ kwh: 12.5 }), { qos: 1 });
      } finally {
        await client.endAsync();
      }
      const latest = await fetch(`${base}/v1/devices/${device.id}/telemetry/latest`, { headers: { authorization: `Bearer ${key.key}` } });
      expect(latest.status).toBe(200);
      expect(((await latest.json()) as { data: { data: unknown } }).data.data).toEqual({ kwh: 12.5 });
    });

    it.skipIf(!dashboardBuilt)('serves the dashboard page from its SEA assets', async () => {
      const res = await fetch(`${base}/`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/text\/html/);
      expect(await res.text()).toBe(readFileSync('dist/web/index.html', 'utf8'));
      const cache = path.join(dir, 'data', '.cache');
      expect(readdirSync(cache).some((d) => d.startsWith('web-'))).toBe(true);
    });

    it('shuts down cleanly on SIGTERM with exit code 0', async () => {
      const exited = new Promise<number | null>((resolve) => server.on('exit', (code) => resolve(code)));
      server.kill('SIGTERM');
      expect(await exited).toBe(0);
    });
  });
});
