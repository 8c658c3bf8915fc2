import type { Db } from '../db.js';
import type { SessionRecord } from '../repositories.js';

interface SessionRow {
  id_hash: string;
  account_seq: number;
  csrf_token: string;
  created_at: number;
  last_used_at: number;
  expires_at: number;
}

const toSession = (r: SessionRow | undefined): SessionRecord | null =>
  r
    ? {
        idHash: r.id_hash,
        accountSeq: r.account_seq,
        csrfToken: r.csrf_token,
        createdAt: r.created_at,
        lastUsedAt: r.last_used_at,
        expiresAt: r.expires_at,
      }
    : null;

export function sessionsRepo(db: Db) {
  const byHash = db.prepare<[string], SessionRow>('SELECT * FROM sessions WHERE id_hash = ?');
  // Only while the account's password is the one the sign-in checked (repositories.ts): one
  // statement, so a password change by another connection comes wholly before or after it.
  const insert = db.prepare(
    `INSERT INTO sessions (id_hash, account_seq, csrf_token, created_at, last_used_at, expires_at)
     SELECT ?, seq, ?, ?, ?, ? FROM accounts WHERE seq = ? AND password_hash IS ?`,
  );
  const touch = db.prepare('UPDATE sessions SET last_used_at = ?, expires_at = ? WHERE id_hash = ?');
  const remove = db.prepare('DELETE FROM sessions WHERE id_hash = ?');
  const removeOthers = db.prepare('DELETE FROM sessions WHERE account_seq = ? AND id_hash IS NOT ?');
  const removeExpired = db.prepare('DELETE FROM sessions WHERE expires_at <= ?');

  return {
    findByHash: (idHash: string) => toSession(byHash.get(idHash)),
    insert: (s: SessionRecord, passwordHash: string | null) =>
      insert.run(s.idHash, s.csrfToken, s.createdAt, s.lastUsedAt, s.expiresAt, s.accountSeq, passwordHash).changes > 0,
    touch: (idHash: string, now: number, expiresAt: number) => void touch.run(now, expiresAt, idHash),
    remove: (idHash: string) => void remove.run(idHash),
    removeOthers: (accountSeq: number, keepIdHash: string | null) => removeOthers.run(accountSeq, keepIdHash).changes,
    removeExpired: (now: number) => removeExpired.run(now).changes,
  };
}

// The row and its mapping, shared with the PostgreSQL repository (postgres/repos/sessions.ts) so both backends
// hand the domain the same objects.
export { type SessionRow, toSession };
