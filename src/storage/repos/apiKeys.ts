import type { ApiKey } from '../../domain/types.js';
import type { Db } from '../db.js';
import type { NewApiKey } from '../repositories.js';

interface KeyRow {
  seq: number;
  id: string;
  account_seq: number;
  name: string;
  key_prefix: string;
  key_hash: string;
  last_used_at: number | null;
  created_at: number;
  revoked_at: number | null;
}

const toKey = (r: KeyRow | undefined): ApiKey | null =>
  r
    ? {
        seq: r.seq,
        id: r.id,
        accountSeq: r.account_seq,
        name: r.name,
        keyPrefix: r.key_prefix,
        lastUsedAt: r.last_used_at,
        createdAt: r.created_at,
        revokedAt: r.revoked_at,
      }
    : null;

export function apiKeysRepo(db: Db) {
  const byHash = db.prepare<[string], KeyRow>('SELECT * FROM api_keys WHERE key_hash = ?');
  const byId = db.prepare<[string], KeyRow>('SELECT * FROM api_keys WHERE id = ?');
  // Newest first, revoked included (docs/api.md, "Pagination and page sizes").
  const byAccount = db.prepare<[number], KeyRow>('SELECT * FROM api_keys WHERE account_seq = ? ORDER BY created_at DESC, seq DESC');
  const insert = db.prepare('INSERT INTO api_keys (id, account_seq, name, key_prefix, key_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)');
  const revoke = db.prepare('UPDATE api_keys SET revoked_at = ? WHERE seq = ? AND revoked_at IS NULL');
  const touch = db.prepare('UPDATE api_keys SET last_used_at = ? WHERE seq = ?');

  return {
    findByHash: (hash: string) => toKey(byHash.get(hash)),
    findById: (id: string) => toKey(byId.get(id)),
    listByAccount: (accountSeq: number) => byAccount.all(accountSeq).map((r) => toKey(r)!),
    insert: (k: NewApiKey) => void insert.run(k.id, k.accountSeq, k.name, k.keyPrefix, k.keyHash, k.now),
    revoke: (seq: number, now: number) => void revoke.run(now, seq),
    touch: (seq: number, now: number) => void touch.run(now, seq),
  };
}

// The row and its mapping, shared with the PostgreSQL repository (postgres/repos/apiKeys.ts) so both backends
// hand the domain the same objects.
export { type KeyRow, toKey };
