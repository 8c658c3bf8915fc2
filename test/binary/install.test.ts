import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/server.js';

/**
 * install.sh into a temporary prefix with systemd skipped, installing the already
 * built dist/telemetryd (--binary). It creates the system user `telemetryd`, so it needs root:
 * CI runs as root; elsewhere, and without the executable, this file is skipped with a message.
 */
const BINARY = path.resolve(process.env.TELEMETRYD_BINARY ?? 'dist/telemetryd');
const isRoot = process.getuid?.() === 0;
const canRun = existsSync(BINARY) && isRoot;
if (!canRun) {
  if (process.env.TELEMETRYD_REQUIRE_BINARY === '1') throw new Error(`install.sh test needs root and ${BINARY}`);
  console.warn(`test/binary/install.test.ts SKIPPED: needs root and ${BINARY} (npm run build:binary)`);
}

const install = (args: string[]) => spawnSync('bash', ['install.sh', ...args], { encoding: 'utf8', timeout: 60_000 });

describe('install.sh --print-unit', () => {
  it('prints the hardened unit for the given prefix and data dir', () => {
    const r = install(['--print-unit', '--prefix', '/opt/tel/bin', '--data-dir', '/srv/tel']);
    expect(r.status).toBe(0);
    const lines = r.stdout.split('\n');
    for (const line of [
      'ExecStart=/opt/tel/bin/telemetryd serve --data-dir /srv/tel',
      'User=telemetryd',
      'Restart=on-failure',
      'KillSignal=SIGTERM',
      'NoNewPrivileges=true',
      'ProtectSystem=strict',
      'ReadWritePaths=/srv/tel',
      'PrivateTmp=true',
      'WantedBy=multi-user.target',
    ]) {
      expect(lines).toContain(line);
    }
    expect(lines.some((l) => /^TimeoutStopSec=\d+$/.test(l))).toBe(true);
  });

  it('refuses an unknown option', () => {
    const r = install(['--frobnicate']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('unknown option --frobnicate');
  });
});

describe.skipIf(!canRun)('install.sh into a temporary prefix, systemd skipped', () => {
  let root: string;
  let prefix: string;
  let dataDir: string;
  const args = () => ['--binary', BINARY, '--prefix', prefix, '--data-dir', dataDir, '--no-systemd'];

  beforeAll(() => {
    root = tempDir('telemetryd-install-');
    prefix = path.join(root, 'bin');
    dataDir = path.join(root, 'var', 'lib', 'telemetryd');
  });

  it('installs the executable, the system user and a 0700 data dir, and says systemd was skipped', () => {
    const r = install(args());
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const exe = path.join(prefix, 'telemetryd');
    expect(statSync(exe).mode & 0o777).toBe(0o755);
    expect(spawnSync(exe, ['version'], { encoding: 'utf8' }).stdout).toMatch(/^telemetryd \d+\.\d+\.\d+ /);
    const user = spawnSync('id', ['-u', 'telemetryd'], { encoding: 'utf8' });
    expect(user.status).toBe(0);
    const st = statSync(dataDir);
    expect(st.mode & 0o777).toBe(0o700);
    expect(st.uid).toBe(Number(user.stdout.trim()));
    expect(r.stdout).toContain('service unit not installed');
  });

  it('the service user can run the installed executable against the data dir', () => {
    chmodSync(root, 0o755); // mkdtemp made it 0700: let the service user through, as /var/lib is
    const r = spawnSync(
      'runuser',
      ['-u', 'telemetryd', '--', path.join(prefix, 'telemetryd'), 'accounts', 'list', '--json', '--data-dir', dataDir],
      {
        encoding: 'utf8',
        cwd: root,
      },
    );
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual({ data: [] });
    expect(statSync(path.join(dataDir, 'telemetryd.db')).mode & 0o777).toBe(0o600);
  });

  it('is idempotent: a second run succeeds and changes nothing', () => {
    writeFileSync(path.join(dataDir, 'keep.txt'), 'readings');
    const r = install(args());
    expect(r.status).toBe(0);
    expect(r.stdout).not.toContain('created system user');
    expect(statSync(dataDir).mode & 0o777).toBe(0o700);
    expect(readFileSync(path.join(dataDir, 'keep.txt'), 'utf8')).toBe('readings');
  });

  it('--uninstall removes the executable and keeps the data', () => {
    const r = install(['--uninstall', '--prefix', prefix, '--data-dir', dataDir, '--no-systemd']);
    expect(r.status).toBe(0);
    expect(existsSync(path.join(prefix, 'telemetryd'))).toBe(false);
    expect(readFileSync(path.join(dataDir, 'keep.txt'), 'utf8')).toBe('readings');
    expect(r.stdout).toContain('kept the data');
    // Uninstalling twice is harmless too.
    expect(install(['--uninstall', '--prefix', prefix, '--data-dir', dataDir, '--no-systemd']).status).toBe(0);
  });
});
