import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import type { Composition } from '../../src/composition.js';
import { openDataDirStorage } from '../helpers/backend.js';
import { tempDir } from '../helpers/server.js';

describe('two accounts created with one email at once', () => {
  const dir = tempDir();
  const opened: Composition[] = [];
  afterEach(async () => {
    for (const c of opened.splice(0)) await c.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('creates one and refuses the other as a conflict (two admin commands, each its own connection)', async () => {
    for (let i = 0; i < 2; i++) opened.push(await openDataDirStorage(dir));
    const [a, b] = opened as [Composition, Composition];
    // Begun together, without a password to hash: on SQLite both look the email up before
    // either inserts (every await between the look-up and the insert lets the other run),
    // as two `accounts create` processes can; on PostgreSQL either order may happen, and
    // test/postgres/concurrency.test.ts holds the first insert to force this one.
    const results = await Promise.allSettled([
      a.services.accounts.create({ email: 'same@example.com' }),
      b.services.accounts.create({ email: 'SAME@example.com' }),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
    expect(results[1]).toMatchObject({ reason: { status: 409, message: 'an account with email SAME@example.com exists' } });
    expect((await a.services.accounts.list()).map((x) => x.email)).toEqual(['same@example.com']);
  });
});
