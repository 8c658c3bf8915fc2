/**
 * Security at rest and in logs (docs/reliability.md, "Security": secrets are never stored in
 * clear and never logged): the raw database, WAL and shared-memory files and a backup archive never
 * hold an issued API key, device token or password; the data dir is 0700 and the database
 * files 0600; a debug-level log of a session that uses and misuses every secret holds none.
 */

import { existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { failReadingInsertsIn, onPostgres } from '../helpers/backend.js';
import { runCliAsync } from '../helpers/cli.js';
import { tempDir } from '../helpers/server.js';
import { dbFile, startChildServer, stopChild } from './helpers.js';

const root = tempDir('telemetryd-security-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const JPEG = Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0]), Buffer.alloc(200, 7)]);

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(path.join(dir, e.name)) : [path.join(dir, e.name)],
  );
}

describe('secrets at rest, file modes, logs', () => {
  it('stores only hashes, keeps files private, and logs no secret', async () => {
    const dataDir = path.join(root, 'data');
    const password = 'correct horse battery staple 42';
    const acc = await runCliAsync(
      ['accounts', 'create', '--email', 'sec@example.com', '--plan', 'business', '--password-stdin', '--json'],
      { dataDir, input: password },
    );
    expect(acc.status, acc.stderr).toBe(0);
    const key: string = (await runCliAsync(['keys', 'create', '--account', acc.json.id, '--name', 'k', '--json'], { dataDir })).json.key;
    const dev = (await runCliAsync(['devices', 'create', '--account', acc.json.id, '--name', 'cam', '--snapshots', '--json'], { dataDir }))
      .json;
    const regenerated = (await runCliAsync(['devices', 'regenerate-token', dev.id, '--json'], { dataDir })).json.access_token as string;
    const oldToken = dev.access_token as string;
    const token = regenerated;
    const secrets: Record<string, string> = { key, token, oldToken, password };

    const server = await startChildServer(dataDir, ['--log-level', 'debug']);
    const url = server.url;
    const post = (p: string, init: RequestInit) =>
      fetch(url + p, { method: 'POST', ...init }).then(async (r) => ({ status: r.status, text: await r.text() }));
    try {
      // Use every secret the way clients do, and misuse them.
      expect(
        (
          await post('/api/devices/ingest', {
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ device_id: dev.id, access_token: token, data: { t: 1 } }),
          })
        ).status,
      ).toBe(200);
      expect(
        (
          await post('/api/devices/ingest', {
            headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
            body: JSON.stringify({ device_id: dev.id, data: { t: 2 } }),
          })
        ).status,
      ).toBe(200);
      expect(
        (
          await post('/api/devices/ingest', {
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ device_id: dev.id, access_token: oldToken, data: { t: 3 } }),
          })
        ).status,
      ).toBe(401);
      expect(
        (
          await post('/api/devices/ingest', {
            headers: { 'content-type': 'application/json' },
            body: `{"device_id":"${dev.id}","access_token":"${token}","data":{"t":`,
          })
        ).status,
      ).toBe(400);
      expect(
        (
          await post(`/api/devices/${dev.id}/snapshot`, {
            headers: { 'content-type': 'image/jpeg', authorization: `Bearer ${token}` },
            body: JPEG,
          })
        ).status,
      ).toBe(200);
      expect(
        (
          await post(`/api/devices/${dev.id}/snapshot`, {
            headers: { 'content-type': 'image/png', authorization: `Bearer ${token}` },
            body: JPEG,
          })
        ).status,
      ).toBe(400);
      expect((await fetch(`${url}/v1/devices`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
      expect((await fetch(`${url}/v1/devices`, { headers: { authorization: `Bearer ${key}x` } })).status).toBe(401);
      expect(
        (await fetch(`${url}/v1/devices/${dev.id}`, { headers: { authorization: `Bearer ${key}`, cookie: `session=${password}` } })).status,
      ).toBe(200);

      // The dashboard: sign in with the password, fail a few times, use the session.
      const signIn = (pw: string) =>
        fetch(`${url}/ui/api/sign-in`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-csrf-token': 'x' },
          body: JSON.stringify({ email: 'sec@example.com', password: pw }),
        });
      for (let i = 0; i < 3; i++) expect((await signIn(`${password}-wrong${i}`)).status).toBeGreaterThanOrEqual(400);
      const signedIn = await signIn(password);
      expect(signedIn.status).toBe(200);
      const cookie = signedIn.headers.get('set-cookie') ?? '';
      const sessionId = /telemetryd_session=([^;]+)/.exec(cookie)?.[1] ?? '';
      expect(sessionId.length).toBeGreaterThanOrEqual(32);
      secrets.sessionId = sessionId;
      // (The CSRF token is stored as is, by design: it proves nothing without the session
      // cookie, whose id is stored only as a hash; docs/dashboard.md, "How it behaves".)
      // Cookie flags: not readable by script, not sent on cross-site subrequests, whole site.
      expect(cookie).toMatch(/;\s*HttpOnly/i);
      expect(cookie).toMatch(/;\s*SameSite=Lax/i);
      expect(cookie).toMatch(/;\s*Path=\//i);
      expect((await fetch(`${url}/ui/api/devices`, { headers: { cookie: `telemetryd_session=${sessionId}` } })).status).toBe(200);
      // Dashboard security headers: a CSP without inline script, no framing.
      const page = await fetch(`${url}/`);
      expect(page.status).toBe(200);
      const csp = page.headers.get('content-security-policy') ?? '';
      const scriptSrc = /script-src ([^;]*)/.exec(csp)?.[1] ?? /default-src ([^;]*)/.exec(csp)?.[1] ?? '';
      expect(scriptSrc).toContain("'self'");
      expect(scriptSrc).not.toMatch(/unsafe-inline|unsafe-eval|\*/);
      expect(csp).toMatch(/frame-ancestors 'none'/);
      expect(page.headers.get('x-content-type-options')).toBe('nosniff');
      expect(page.headers.get('x-frame-options')).toBe('DENY');
      // No inline <script> in the page itself (the CSP would block it anyway).
      expect(await page.text()).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/i);

      // A server-side failure on a request that carries a token: the error is logged.
      const heal = await failReadingInsertsIn(dataDir);
      expect(
        (
          await post('/api/devices/ingest', {
            headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
            body: JSON.stringify({ device_id: dev.id, access_token: token, data: { t: 4 } }),
          })
        ).status,
      ).toBe(500);
      await heal();

      // Modes while running: the WAL and shared-memory files of SQLite exist now.
      expect(statSync(dataDir).mode & 0o777).toBe(0o700);
      const dbSuffixes = onPostgres ? [] : ['', '-wal', '-shm'];
      for (const suffix of dbSuffixes) {
        expect(existsSync(dbFile(dataDir) + suffix), suffix).toBe(true);
        expect(statSync(dbFile(dataDir) + suffix).mode & 0o777, `telemetryd.db${suffix}`).toBe(0o600);
      }
      const snapshotsDir = path.join(dataDir, 'snapshots');
      expect(statSync(snapshotsDir).mode & 0o777).toBe(0o700);
      for (const f of filesUnder(snapshotsDir)) expect(statSync(f).mode & 0o777, f).toBe(0o600);

      // Raw bytes of the SQLite database, its WAL and shm (on PostgreSQL, the backup archive
      // below holds every row): no secret in any encoding a row could hold.
      const findings: string[] = [];
      const scan = (label: string, bytes: Buffer) => {
        for (const [name, secret] of Object.entries(secrets)) {
          for (const form of [
            Buffer.from(secret, 'utf8'),
            Buffer.from(secret, 'utf16le'),
            Buffer.from(Buffer.from(secret).toString('base64')),
          ]) {
            if (bytes.includes(form)) findings.push(`${name} in ${label}`);
          }
        }
      };
      for (const suffix of dbSuffixes) scan(`telemetryd.db${suffix}`, readFileSync(dbFile(dataDir) + suffix));

      // A backup archive is as private as the database.
      const archive = path.join(root, 'b.tar.gz');
      const backup = await runCliAsync(['backup', archive, '--json'], { dataDir });
      expect(backup.status, backup.stderr).toBe(0);
      scan('backup archive', gunzipSync(readFileSync(archive)));

      expect(await stopChild(server)).toMatchObject({ code: 0 });
      if (!onPostgres) scan(`telemetryd.db after shutdown`, readFileSync(dbFile(dataDir)));
      // The log of the whole session, at debug level.
      const log = server.output();
      expect(log).toMatch(/request failed/);
      scan('server log', Buffer.from(log));
      expect(findings).toEqual([]);
    } finally {
      await stopChild(server);
    }
  }, 90_000);
});
