import type { Pool } from 'pg';
import { type SessionRow, toSession } from '../../repos/sessions.js';
import type { SessionRecord, SessionsRepository } from '../../repositories.js';
import { prepared } from './sql.js';

const byHash = prepared<SessionRow>(
  'session-by-hash',
  'SELECT id_hash, account_seq, csrf_token, created_at, last_used_at, expires_at FROM sessions WHERE id_hash = $1',
);
// Only while the account's password is the one the sign-in checked: FOR SHARE holds the
// account row until commit, so a password change waits for this insert and its removeOthers
// then sees the session, or it came first and the check, made again on the changed row,
// inserts nothing.
const insert = prepared(
  'session-insert',
  `INSERT INTO sessions (id_hash, account_seq, csrf_token, created_at, last_used_at, expires_at)
   SELECT $1, seq, $3, $4, $5, $6 FROM accounts WHERE seq = $2 AND password_hash IS NOT DISTINCT FROM $7::text FOR SHARE`,
);
const touch = prepared('session-touch', 'UPDATE sessions SET last_used_at = $2, expires_at = $3 WHERE id_hash = $1');
const remove = prepared('session-remove', 'DELETE FROM sessions WHERE id_hash = $1');
const removeOthers = prepared('sessions-remove-others', 'DELETE FROM sessions WHERE account_seq = $1 AND id_hash IS DISTINCT FROM $2');
const removeExpired = prepared('sessions-remove-expired', 'DELETE FROM sessions WHERE expires_at <= $1');

/** Dashboard sessions on PostgreSQL (SessionsRepository, src/storage/repositories.ts). */
export function postgresSessionsRepo(pool: Pool): SessionsRepository {
  return {
    findByHash: async (idHash: string): Promise<SessionRecord | null> => toSession(await byHash.first(pool, [idHash])),
    insert: async (s: SessionRecord, passwordHash: string | null): Promise<boolean> =>
      (await insert.run(pool, [s.idHash, s.accountSeq, s.csrfToken, s.createdAt, s.lastUsedAt, s.expiresAt, passwordHash])) > 0,
    async touch(idHash: string, now: number, expiresAt: number): Promise<void> {
      await touch.run(pool, [idHash, now, expiresAt]);
    },
    async remove(idHash: string): Promise<void> {
      await remove.run(pool, [idHash]);
    },
    removeOthers: (accountSeq: number, keepIdHash: string | null): Promise<number> => removeOthers.run(pool, [accountSeq, keepIdHash]),
    removeExpired: (now: number): Promise<number> => removeExpired.run(pool, [now]),
  };
}
