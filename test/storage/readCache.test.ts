import { rmSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { composeServices } from '../../src/composition.js';
import { DB_FILE, type Db, openDatabase } from '../../src/storage/db.js';
import { EXTERNAL_CHECK_MS } from '../../src/storage/readCache.js';
import { onPostgres } from '../helpers/backend.js';
import { tempDir } from '../helpers/server.js';

/**
 * Device authentication is cached (readCache.ts); every change made by this connection
 * through any code path must be seen by the very next call, and a change by another process
 * by any call that starts EXTERNAL_CHECK_MS after its commit.
 */
const nextRequest = () => new Promise((r) => setTimeout(r, EXTERNAL_CHECK_MS + 1));

// SQLite's cache of look-ups, dropped on PRAGMA data_version; PostgreSQL's: test/postgres/repositories.test.ts.
describe.skipIf(onPostgres)('cached device authentication', () => {
  let db: Db | null = null;
  let other: Database.Database | null = null;
  let dir = '';
  afterEach(() => {
    other?.close();
    db?.close();
    other = db = null;
    rmSync(dir, { recursive: true, force: true });
  });

  async function setup() {
    dir = tempDir();
    db = openDatabase(dir);
    const composed = composeServices(db);
    const repos = composed.storage.repos;
    const services = { ...composed.services, writer: composed.storage.writer };
    const account = await services.accounts.create({ email: 'a@example.com', plan: 'business' });
    const { device, accessToken } = await services.devices.create(account, { name: 'd' });
    // Another connection on the same file stands for the admin CLI (another process).
    other = new Database(path.join(dir, DB_FILE));
    return { repos, storage: composed.storage, services, account, device, token: accessToken };
  }

  it('serves repeated lookups from memory, as values: the ingest path awaits no promise for them', async () => {
    const { services, device, token } = await setup();
    const first = services.devices.authenticate(device.id, token);
    const second = services.devices.authenticate(device.id, token);
    const session = services.devices.authorizeSession(device.id);
    expect(first).not.toBeInstanceOf(Promise);
    expect(session).not.toBeInstanceOf(Promise);
    if (first instanceof Promise || second instanceof Promise) throw new Error('unreachable');
    expect(second.device).toBe(first.device);
    expect(second.account).toBe(first.account);
  });

  it('accepts only the very token that matched once: any other, of the same length or not, is refused', async () => {
    const { services, device, token } = await setup();
    await services.devices.authenticate(device.id, token);
    const last = token.at(-1) === 'a' ? 'b' : 'a';
    for (const wrong of [token.slice(0, -1) + last, last + token.slice(1), token.slice(0, -1), `${token}x`, '']) {
      expect(() => services.devices.authenticate(device.id, wrong)).toThrow(/invalid device id or access token/);
    }
    expect((await services.devices.authenticate(device.id, token)).device.id).toBe(device.id);
  });

  it('sees a pause, a resume and a token change made by another connection at once', async () => {
    const { services, device, token } = await setup();
    await services.devices.authenticate(device.id, token);
    other!.prepare("UPDATE devices SET status = 'paused' WHERE id = ?").run(device.id);
    await nextRequest();
    expect(() => services.devices.authenticate(device.id, token)).toThrow(/paused/);
    other!.prepare("UPDATE devices SET status = 'active' WHERE id = ?").run(device.id);
    await nextRequest();
    expect((await services.devices.authenticate(device.id, token)).device.status).toBe('active');
    other!.prepare("UPDATE devices SET token_hash = 'ab' WHERE id = ?").run(device.id);
    await nextRequest();
    expect(() => services.devices.authenticate(device.id, token)).toThrow(/invalid device id or access token/);
  });

  it('sees an account suspended by another connection at once', async () => {
    const { services, device, token, account } = await setup();
    await services.devices.authenticate(device.id, token);
    other!.prepare("UPDATE accounts SET status = 'suspended' WHERE seq = ?").run(account.seq);
    await nextRequest();
    expect(() => services.devices.authenticate(device.id, token)).toThrow(/suspended/);
  });

  it('sees changes made in-process through services and through raw SQL on the same connection', async () => {
    const { services, device, token, account, storage } = await setup();
    await services.devices.authenticate(device.id, token);
    await services.devices.pause(device);
    expect(() => services.devices.authenticate(device.id, token)).toThrow(/paused/);
    await services.devices.resume(device);
    const fresh = (await services.devices.regenerateToken(device)).accessToken;
    expect(() => services.devices.authenticate(device.id, token)).toThrow(/invalid/);
    expect((await services.devices.authenticate(device.id, fresh)).account.plan).toBe('business');
    await services.accounts.setPlan(account.id, 'scale');
    expect((await services.devices.authenticate(device.id, fresh)).account.plan).toBe('scale');
    storage.db.prepare("UPDATE accounts SET status = 'suspended' WHERE seq = ?").run(account.seq);
    expect(() => services.devices.authenticate(device.id, fresh)).toThrow(/suspended/);
  });

  it('does not remember a row read inside a transaction that rolls back', async () => {
    const { services, device, token, storage } = await setup();
    expect(() =>
      storage.db
        .transaction(() => {
          storage.db.prepare("UPDATE devices SET status = 'paused' WHERE seq = ?").run(device.seq);
          expect(() => services.devices.authenticate(device.id, token)).toThrow(/paused/);
          throw new Error('roll back');
        })
        .immediate(),
    ).toThrow('roll back');
    expect((await services.devices.authenticate(device.id, token)).device.status).toBe('active');
  });
});
