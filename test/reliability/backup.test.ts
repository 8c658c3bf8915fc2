/**
 * Backup and restore (docs/reliability.md): `telemetryd backup FILE` under ingest load makes
 * a consistent archive; `telemetryd restore FILE --data-dir NEW` puts it back; the restored
 * server serves the same data with the same API key.
 */

import { spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../helpers/backend.js';
import { CLI, runCliAsync } from '../helpers/cli.js';
import { tempDir } from '../helpers/server.js';
import { expectIntactDatabase, ingestLoad, seedViaCli, startChildServer, stopChild, storedNumbers } from './helpers.js';

const root = tempDir('telemetryd-backup-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('backup and restore', () => {
  it('backs up while the server ingests, restores into a new data dir, and the restored server serves it', async () => {
    const dataDir = path.join(root, 'live');
    const seed = await seedViaCli(dataDir);
    const cam = await runCliAsync(['devices', 'create', '--account', seed.accountId, '--name', 'cam', '--snapshots', '--json'], {
      dataDir,
    });
    expect(cam.status, cam.stderr).toBe(0);
    const server = await startChildServer(dataDir);
    // A real snapshot, uploaded through the Device API before the backup.
    const image = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.alloc(3_000, 9)]);
    const upload = await fetch(`${server.url}/api/devices/${cam.json.id}/snapshot`, {
      method: 'POST',
      headers: { 'content-type': 'image/jpeg', authorization: `Bearer ${cam.json.access_token}` },
      body: image,
    });
    expect(upload.status).toBe(200);
    const snapshotUrl = ((await upload.json()) as { url: string }).url;
    // A temporary file of an upload in progress is not part of a backup.
    writeFileSync(path.join(dataDir, 'snapshots', cam.json.id, '.half-written.1234.tmp'), 'partial');
    const archive = path.join(root, 'backup.tar.gz');
    let backupDone = false;
    const load = ingestLoad({
      url: server.url,
      deviceId: seed.deviceId,
      token: seed.token,
      firstN: 0,
      concurrency: 16,
      max: 200_000,
      shouldStop: () => backupDone,
    });
    // Start the backup once a few hundred readings are in, while the load keeps running.
    while ((await storedNumbers(dataDir, seed.deviceId)).length < 300) await new Promise((r) => setTimeout(r, 50));
    // Everything committed before the backup starts (read from the database itself).
    const committedBeforeBackup = await storedNumbers(dataDir, seed.deviceId);
    const result = await runCliAsync(['backup', archive, '--json'], { dataDir });
    backupDone = true;
    const { acked } = await load;
    expect(result.status, result.stderr).toBe(0);
    expect(result.json.file).toBe(archive);
    expect(result.json.bytes).toBe(statSync(archive).size);
    expect(statSync(archive).mode & 0o777).toBe(0o600);
    // Not a terminal: no progress noise on stderr.
    expect(result.stderr).toBe('');
    expect(acked.length).toBeGreaterThan(300);

    // Restoring onto the live data dir is refused: it has a database (and a server holds it).
    const refused = await runCliAsync(['restore', archive, '--json'], { dataDir });
    expect(refused.status).not.toBe(0);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toMatch(onPostgres ? /is in use by a running server/ : /already holds a database/);
    // --force does not replace what a running server holds: SQLite sees its file in use,
    // PostgreSQL the server's node lock.
    const refusedForced = await runCliAsync(['restore', archive, '--force'], { dataDir });
    expect(refusedForced.status).not.toBe(0);
    expect(refusedForced.stderr).toMatch(/in use/);
    expect((await stopChild(server)).code).toBe(0);

    const restoredDir = path.join(root, 'restored');
    const restored = await runCliAsync(['restore', archive, '--json'], { dataDir: restoredDir });
    expect(restored.status, restored.stderr).toBe(0);
    if (!onPostgres) expect(restored.json.data_dir).toBe(restoredDir);
    expectIntactDatabase(restoredDir);
    const inBackup = await storedNumbers(restoredDir, seed.deviceId);
    expect(inBackup.length, 'no duplicates').toBe(new Set(inBackup).size);
    expect(restored.json.readings).toBe(inBackup.length);
    const inBackupSet = new Set(inBackup);
    expect(
      committedBeforeBackup.filter((n) => !inBackupSet.has(n)),
      'everything committed before the backup began',
    ).toEqual([]);
    // Every reading in the backup was really stored by the live server (a consistent prefix).
    const live = new Set(await storedNumbers(dataDir, seed.deviceId));
    expect(inBackup.filter((n) => !live.has(n))).toEqual([]);
    expect(existsSync(path.join(restoredDir, 'snapshots', cam.json.id, '.half-written.1234.tmp'))).toBe(false);
    if (!onPostgres) expect(statSync(restoredDir).mode & 0o777).toBe(0o700);

    // The restored server answers the same key with the same device and its readings.
    const again = await startChildServer(restoredDir);
    try {
      const devices = await fetch(`${again.url}/v1/devices`, { headers: { authorization: `Bearer ${seed.key}` } });
      expect(devices.status).toBe(200);
      const body = (await devices.json()) as { data: { id: string }[] };
      expect(body.data.map((d) => d.id)).toEqual([seed.deviceId, cam.json.id]);
      // The snapshot is served from the restored files, byte for byte.
      const snap = await fetch(new URL(snapshotUrl, again.url), { headers: { authorization: `Bearer ${seed.key}` } });
      expect(snap.status).toBe(200);
      expect(Buffer.from(await snap.arrayBuffer())).toEqual(image);
      const telemetry = await fetch(`${again.url}/v1/devices/${seed.deviceId}/telemetry?limit=1`, {
        headers: { authorization: `Bearer ${seed.key}` },
      });
      expect(telemetry.status).toBe(200);
      // A second restore onto it needs --force, and is refused while this server holds it.
      const busy = await runCliAsync(['restore', archive, '--force'], { dataDir: restoredDir });
      expect(busy.stderr).toMatch(/in use/);
    } finally {
      await stopChild(again);
    }
    // Stopped: --force replaces it.
    const forced = await runCliAsync(['restore', archive, '--force', '--json'], { dataDir: restoredDir });
    expect(forced.status, forced.stderr).toBe(0);
  }, 120_000);

  // SQLite's progress in pages of its file (PostgreSQL's backup progress: test/postgres/archive.test.ts).
  it.skipIf(spawnSync('script', ['--version']).status !== 0 || onPostgres)('shows progress on stderr when it is a terminal', async () => {
    const dataDir = path.join(root, 'tty');
    await seedViaCli(dataDir);
    const file = path.join(root, 'tty.tar.gz');
    // util-linux `script` gives the command a pseudo-terminal, as an operator's shell would.
    const r = spawnSync(
      'script',
      [
        '-qec',
        `${JSON.stringify(process.execPath)} ${JSON.stringify(CLI)} backup ${JSON.stringify(file)} --data-dir ${JSON.stringify(dataDir)}`,
        '/dev/null',
      ],
      { encoding: 'utf8' },
    );
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/backup: database 100% \(\d+\/\d+ pages\)/);
    expect(r.stdout).toContain(`wrote ${file}`);
  });

  it.skipIf(onPostgres)('restore --force replaces a database file that is not a database any more, naming the file', async () => {
    const good = path.join(root, 'good');
    await seedViaCli(good);
    const archive = path.join(root, 'good.tar.gz');
    const wrote = await runCliAsync(['backup', archive], { dataDir: good });
    expect(wrote.status, wrote.stderr).toBe(0);
    // The line names the database it read, so an environment's TELEMETRYD_DATABASE_URL winning over --data-dir shows.
    expect(wrote.stdout).toBe(`wrote ${archive} (${statSync(archive).size} bytes) from SQLite ${path.join(good, 'telemetryd.db')}\n`);
    const damaged = path.join(root, 'damaged');
    mkdirSync(damaged, { mode: 0o700 });
    writeFileSync(path.join(damaged, 'telemetryd.db'), Buffer.alloc(8192, 0x5a));
    const broken = await runCliAsync(['accounts', 'list'], { dataDir: damaged });
    expect(broken.status).toBe(1);
    expect(broken.stderr).toBe(`telemetryd: ${path.join(damaged, 'telemetryd.db')}: file is not a database\n`);
    const refused = await runCliAsync(['restore', archive], { dataDir: damaged });
    expect(refused.stderr).toBe(`telemetryd: ${damaged} already holds a database; pass --force to replace it\n`);
    const forced = await runCliAsync(['restore', archive, '--force', '--json'], { dataDir: damaged });
    expect(forced.status, forced.stderr).toBe(0);
    expect((await runCliAsync(['accounts', 'list', '--json'], { dataDir: damaged })).json.data.length).toBeGreaterThan(0);
    // A data dir that is a file is named as such.
    const notFolder = await runCliAsync(['accounts', 'list'], { dataDir: archive });
    expect(notFolder.stderr).toBe(`telemetryd: the data dir ${archive} is a file, not a folder\n`);
    // restore and backup say it in the same words, not with a staging folder's errno or "no database".
    for (const args of [
      ['restore', archive],
      ['backup', path.join(root, 'from-a-file.tar.gz')],
    ]) {
      const r = await runCliAsync(args, { dataDir: archive });
      expect(r.status).toBe(1);
      expect(r.stderr).toBe(`telemetryd: the data dir ${archive} is a file, not a folder\n`);
    }

    // An archive whose database was cut short: refused, naming the archive, and nothing made.
    const unpacked = path.join(root, 'cut-open');
    mkdirSync(unpacked);
    expect(spawnSync('tar', ['-xzf', archive, '-C', unpacked]).status).toBe(0);
    const dbFile = path.join(unpacked, 'telemetryd.db');
    const bytes = readFileSync(dbFile);
    expect(bytes.length).toBeGreaterThan(16_384);
    writeFileSync(dbFile, bytes.subarray(0, Math.floor(bytes.length / 2)));
    const cut = path.join(root, 'cut.tar.gz');
    expect(spawnSync('tar', ['-czf', cut, '-C', unpacked, ...readdirSync(unpacked)]).status).toBe(0);
    const target = path.join(root, 'from-cut');
    const refusedCut = await runCliAsync(['restore', cut], { dataDir: target });
    expect(refusedCut.status).toBe(1);
    expect(refusedCut.stderr).toMatch(
      new RegExp(`^telemetryd: the database in ${cut.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} is damaged: .+\n$`),
    );
    expect(existsSync(target)).toBe(false);
  });

  // sudo telemetryd restore … --data-dir /var/lib/telemetryd: the service user must be able to open what it restored.
  it.skipIf(onPostgres || process.getuid?.() !== 0)(
    "run as root, restore and a first command give the files the data dir's owner",
    async () => {
      const source = path.join(root, 'owned-source');
      await seedViaCli(source);
      const archive = path.join(root, 'owned.tar.gz');
      expect((await runCliAsync(['backup', archive], { dataDir: source })).status).toBe(0);
      const service = path.join(root, 'service');
      mkdirSync(service, { mode: 0o700 });
      mkdirSync(path.join(service, 'snapshots', 'dev_x'), { recursive: true });
      writeFileSync(path.join(service, 'snapshots', 'dev_x', 'a.jpg'), 'old');
      chownSync(service, 65534, 65534);
      const r = await runCliAsync(['restore', archive, '--json'], { dataDir: service });
      expect(r.status, r.stderr).toBe(0);
      expect(statSync(path.join(service, 'telemetryd.db')).uid).toBe(65534);
      expect(statSync(service).uid).toBe(65534);
      if (existsSync(path.join(service, 'snapshots'))) expect(statSync(path.join(service, 'snapshots')).uid).toBe(65534);
      // So does the database a first admin command creates there before the service's first start.
      const fresh = path.join(root, 'fresh-service');
      mkdirSync(fresh, { mode: 0o700 });
      chownSync(fresh, 65534, 65534);
      expect((await runCliAsync(['accounts', 'create', '--email', 'first@example.com'], { dataDir: fresh })).status).toBe(0);
      expect(statSync(path.join(fresh, 'telemetryd.db')).uid).toBe(65534);
      // A data dir made by the restore itself stays root's, as anything else root creates.
      const made = path.join(root, 'made-by-root');
      expect((await runCliAsync(['restore', archive, '--json'], { dataDir: made })).status).toBe(0);
      expect(statSync(path.join(made, 'telemetryd.db')).uid).toBe(0);
    },
  );

  it('refuses a file that is not a backup and leaves the data dir untouched', async () => {
    const junk = path.join(root, 'junk.tar.gz');
    writeFileSync(junk, 'this is not an archive');
    const dir = path.join(root, 'junk-target');
    const r = await runCliAsync(['restore', junk], { dataDir: dir });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/not a telemetryd backup/);
    // The data dir the restore would have made is not left behind.
    if (!onPostgres) expect(existsSync(dir)).toBe(false);
    const nowhere = path.join(root, 'no-such-folder', 'x.tgz');
    const missing = await runCliAsync(['backup', nowhere], { dataDir: path.join(root, 'live') });
    expect(missing.status).toBe(1);
    expect(missing.stderr).toBe(`telemetryd: no folder ${path.dirname(nowhere)} to write x.tgz into\n`);
    // A folder as FILE is refused before the copy, not by the final rename.
    const folder = await runCliAsync(['backup', root], { dataDir: path.join(root, 'live') });
    expect(folder.status).toBe(1);
    expect(folder.stdout).toBe('');
    expect(folder.stderr).toBe(
      `telemetryd: ${root} is a folder: give the archive's file name (${path.join(root, 'telemetryd-backup.tar.gz')})\n`,
    );
    expect(readdirSync(path.dirname(root)).filter((f) => f.startsWith(`${path.basename(root)}.partial-`))).toEqual([]);
    if (!onPostgres) {
      // Never over the database it copies (or its WAL): the rename would swap it for the archive.
      const own = path.join(root, 'own-target');
      await seedViaCli(own);
      const header = () => readFileSync(path.join(own, 'telemetryd.db')).subarray(0, 16).toString('latin1');
      expect(header()).toBe('SQLite format 3\0');
      for (const target of [path.join(own, 'telemetryd.db'), path.join(own, 'telemetryd.db-wal'), path.join(own, '.', 'telemetryd.db')]) {
        const r = await runCliAsync(['backup', target], { dataDir: own });
        expect(r.status, target).toBe(1);
        expect(r.stderr).toMatch(/is the database itself: write the archive somewhere else/);
      }
      expect(header()).toBe('SQLite format 3\0');
      expect((await runCliAsync(['accounts', 'list', '--json'], { dataDir: own })).status).toBe(0);
    }
    const b = await runCliAsync(['backup', path.join(root, 'x.tgz')], { dataDir: path.join(root, 'empty') });
    expect(b.status).not.toBe(0);
    expect(b.stderr).toMatch(onPostgres ? /no telemetryd data/ : /no database/);
  });
});
