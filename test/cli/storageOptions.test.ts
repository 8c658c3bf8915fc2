/**
 * --database-url and --snapshots-dir (docs/cli.md, "Common options"): every command takes
 * --database-url from any source (flag, env, config file) and uses PostgreSQL then, never
 * the data dir's SQLite database (a database that cannot be reached is one line, exit 1;
 * test/postgres/serve.test.ts runs them on a real server); --snapshots-dir moves the snapshot
 * files of a SQLite installation, for serve, admin commands, backup and restore alike.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { tempDir } from '../helpers/server.js';
import { seedViaCli, startChildServer, stopChild } from '../reliability/helpers.js';

const URL_WITH_PASSWORD = 'postgres://app:Secret-Pw@127.0.0.1:1/telemetry';

describe('--database-url for serve and the admin commands', () => {
  it('is taken from a flag, the environment or the config file: an unreachable database is one line without the password', () => {
    const dir = tempDir();
    const config = path.join(dir, 'config.json');
    writeFileSync(config, JSON.stringify({ 'database-url': URL_WITH_PASSWORD }));
    const refused = 'telemetryd: PostgreSQL at 127.0.0.1:1: connection refused';
    // Where the URL came from, when the user did not type it.
    const cases: [string[], Record<string, string>, string][] = [
      [['serve', '--http-port', '0', '--mqtt-port', 'off', '--database-url', URL_WITH_PASSWORD], {}, ''],
      [['accounts', 'list', '--json'], { TELEMETRYD_DATABASE_URL: URL_WITH_PASSWORD }, ' (from TELEMETRYD_DATABASE_URL)'],
      [['devices', 'list', '--account', 'a@example.com', '--config', config], {}, ` (from config file ${config})`],
      [['serve', '--http-port', '0', '--mqtt-port', 'off', '--config', config], {}, ` (from config file ${config})`],
      [['serve', '--http-port', '0', '--mqtt-port', 'off'], { TELEMETRYD_DATABASE_URL: 'postgres://app:p/w@127.0.0.1:1/t' }, ''],
    ];
    for (const [args, env, from] of cases) {
      const r = runCli([...args, '--data-dir', dir], { env });
      expect(r.status, args.join(' ')).toBe(1);
      expect(r.stdout).toBe('');
      if (from || !env.TELEMETRYD_DATABASE_URL) expect(r.stderr).toBe(`${refused}${from}\n`);
      else expect(r.stderr).toMatch(/^telemetryd: --database-url: not a URL in .*percent-encoded.* \(from TELEMETRYD_DATABASE_URL\)\n$/);
      expect(r.stderr).not.toContain('Secret-Pw');
      expect(r.stderr).not.toContain('p/w');
    }
    // Nothing was opened or created on SQLite instead.
    expect(existsSync(path.join(dir, 'telemetryd.db'))).toBe(false);
  });

  it('an empty value from a flag, the environment or the config file is refused, never read as unset', () => {
    const dir = tempDir();
    const file = (name: string, contents: object) => {
      writeFileSync(path.join(dir, name), JSON.stringify(contents));
      return path.join(dir, name);
    };
    const emptyPort = file('empty-port.json', { 'mqtt-port': '' });
    const typo = file('typo.json', { 'http-prot': 0 });
    const badPort = file('bad-port.json', { 'mqtt-port': 'x' });
    const nullPort = file('null-port.json', { 'mqtt-port': null });
    const nullDir = file('null-dir.json', { 'data-dir': null });
    const listPort = file('list-port.json', { 'http-port': [8080] });
    // trust-proxy takes a list (proxyOptions.test.ts), of strings.
    const badList = file('bad-list.json', { 'trust-proxy': [10] });
    const serve = ['serve', '--http-port', '0', '--host', '127.0.0.1'];
    const cases: [string[], Record<string, string>, string][] = [
      [['accounts', 'list', '--database-url', ''], {}, '--database-url is empty'],
      [['accounts', 'list'], { TELEMETRYD_DATABASE_URL: '' }, 'TELEMETRYD_DATABASE_URL is set but empty; unset it for the default'],
      [[...serve, '--mqtt-port', ' '], {}, '--mqtt-port is empty'],
      [serve, { TELEMETRYD_MQTT_PORT: '' }, 'TELEMETRYD_MQTT_PORT is set but empty; unset it for the default'],
      [[...serve, '--config', emptyPort], {}, `config file ${emptyPort}: "mqtt-port" is empty; leave it out for the default`],
      // null (what a template or jq writes for a missing value) would turn MQTT off, or open a
      // database in the working directory.
      [[...serve, '--config', nullPort], {}, `config file ${nullPort}: "mqtt-port" is null; leave it out for the default`],
      [['accounts', 'list', '--config', nullDir], {}, `config file ${nullDir}: "data-dir" is null; leave it out for the default`],
      [[...serve, '--config', listPort], {}, `config file ${listPort}: "http-port" must be a string, a number or true/false, not a list`],
      [[...serve, '--config', badList], {}, `config file ${badList}: "trust-proxy" must list strings`],
      // A key that is no option is a typo, which would leave its option at the default.
      [[...serve, '--config', typo], {}, `config file ${typo}: unknown option "http-prot" (did you mean "http-port"?)`],
      [
        ['keys', 'list', '--account', 'a@example.com', '--config', typo],
        {},
        `config file ${typo}: unknown option "http-prot" (did you mean "http-port"?)`,
      ],
      // A bad value names its flag, and where it came from when the user never typed it.
      [[...serve, '--mqtt-port', 'x'], {}, '--mqtt-port must be a port number 0-65535 or "off", got "x"'],
      [serve, { TELEMETRYD_MQTT_PORT: 'x' }, '--mqtt-port must be a port number 0-65535 or "off", got "x" (from TELEMETRYD_MQTT_PORT)'],
      [[...serve, '--config', badPort], {}, `--mqtt-port must be a port number 0-65535 or "off", got "x" (from config file ${badPort})`],
    ];
    for (const [args, env, message] of cases) {
      const r = runCli([...args, '--data-dir', dir], { env });
      expect(r.status, args.join(' ')).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(`telemetryd: ${message}\n`);
    }
    // Nothing was opened or created on SQLite instead.
    expect(existsSync(path.join(dir, 'telemetryd.db'))).toBe(false);
    // A file of serve's options serves the admin commands too.
    const shared = file('shared.json', { 'http-port': 0, 'mqtt-port': 'off', 'log-level': 'warn' });
    const r = runCli(['accounts', 'list', '--json', '--config', shared], { dataDir: dir });
    expect(r.status, r.stderr).toBe(0);
  });

  it('is listed in every command help', () => {
    for (const command of [['serve'], ['backup'], ['restore'], ['accounts', 'list'], ['version']]) {
      const help = runCli([...command, '--help']).stdout;
      expect(help, command.join(' ')).toContain('--database-url <url>');
      expect(help, command.join(' ')).toContain('--snapshots-dir <dir>');
    }
  });
});

describe('--snapshots-dir on SQLite', () => {
  it('is where serve writes and reads snapshot files, devices delete removes them, backup and restore carry them', async () => {
    const root = tempDir();
    const dataDir = path.join(root, 'data');
    const snapshotsDir = path.join(root, 'images');
    const seed = await seedViaCli(dataDir);
    const cam = runCli(['devices', 'create', '--account', seed.accountId, '--name', 'cam', '--snapshots', '--json'], { dataDir });
    expect(cam.status, cam.stderr).toBe(0);

    const server = await startChildServer(dataDir, [], { TELEMETRYD_SNAPSHOTS_DIR: snapshotsDir });
    const image = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.alloc(2_000, 7)]);
    let snapshotUrl: string;
    let snapshotId: string;
    try {
      const upload = await fetch(`${server.url}/api/devices/${cam.json.id}/snapshot`, {
        method: 'POST',
        headers: { 'content-type': 'image/jpeg', authorization: `Bearer ${cam.json.access_token}` },
        body: image,
      });
      expect(upload.status).toBe(200);
      const body = (await upload.json()) as { id: string; url: string };
      snapshotUrl = body.url;
      snapshotId = body.id;
      expect(readFileSync(path.join(snapshotsDir, cam.json.id, `${snapshotId}.jpg`))).toEqual(image);
      expect(existsSync(path.join(dataDir, 'snapshots'))).toBe(false);
      const served = await fetch(new URL(snapshotUrl, server.url), { headers: { authorization: `Bearer ${seed.key}` } });
      expect(served.status).toBe(200);
      expect(Buffer.from(await served.arrayBuffer())).toEqual(image);
    } finally {
      await stopChild(server);
    }

    // Without --snapshots-dir, backup looks in the data dir's folder, finds none of the
    // snapshots' files and refuses, rather than write an archive without the images.
    const archive = path.join(root, 'backup.tar.gz');
    const forgot = runCli(['backup', archive], { dataDir });
    expect(forgot.status).toBe(1);
    expect(forgot.stderr).toBe(
      `telemetryd: the database holds 1 snapshot but there is no folder ${path.join(dataDir, 'snapshots')}: give --snapshots-dir the server's snapshots folder (or, if the files are lost, --without-snapshot-files)\n`,
    );
    expect(existsSync(archive)).toBe(false);
    // Files that are lost for good do not keep the database from being backed up.
    const withoutFiles = path.join(root, 'without-files.tar.gz');
    const lost = runCli(['backup', withoutFiles, '--without-snapshot-files', '--json'], { dataDir });
    expect(lost.status, lost.stderr).toBe(0);
    expect(existsSync(withoutFiles)).toBe(true);
    // backup reads the files from --snapshots-dir; restore writes them to its own --snapshots-dir.
    expect(runCli(['backup', archive, '--snapshots-dir', snapshotsDir], { dataDir }).status).toBe(0);
    const restoredDir = path.join(root, 'restored');
    const restoredImages = path.join(root, 'restored-images');
    const restored = runCli(['restore', archive, '--snapshots-dir', restoredImages, '--json'], { dataDir: restoredDir });
    expect(restored.status, restored.stderr).toBe(0);
    const hash = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
    expect(hash(path.join(restoredImages, cam.json.id, `${snapshotId}.jpg`))).toBe(
      hash(path.join(snapshotsDir, cam.json.id, `${snapshotId}.jpg`)),
    );
    expect(existsSync(path.join(restoredDir, 'snapshots'))).toBe(false);

    // An admin command deleting the device removes its files from --snapshots-dir.
    const deleted = runCli(['devices', 'delete', cam.json.id, '--yes', '--snapshots-dir', snapshotsDir], { dataDir });
    expect(deleted.status, deleted.stderr).toBe(0);
    expect(deleted.stderr).toBe('');
    expect(readdirSync(snapshotsDir)).toEqual([]);

    // Given another folder than the one holding its files, it deletes the device and says the
    // files were left behind.
    const elsewhere = runCli(['devices', 'delete', cam.json.id, '--yes'], { dataDir: restoredDir });
    expect(elsewhere.status, elsewhere.stderr).toBe(0);
    expect(elsewhere.stderr).toBe(
      `telemetryd: warning: ${cam.json.id} had 1 snapshot but ${path.join(restoredDir, 'snapshots')} holds no folder of its files: they are left in the server's snapshots folder, under ${cam.json.id}/, to remove by hand (is --snapshots-dir the server's?)\n`,
    );
    expect(existsSync(path.join(restoredImages, cam.json.id, `${snapshotId}.jpg`))).toBe(true);
  });
});
