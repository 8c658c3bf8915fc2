import type { Pool } from 'pg';
import type { ApiKey } from '../../../domain/types.js';
import { type KeyRow, toKey } from '../../repos/apiKeys.js';
import type { ApiKeysRepository, NewApiKey } from '../../repositories.js';
import type { AuthCache } from '../authCache.js';
import { prepared } from './sql.js';

const COLUMNS = 'seq, id, account_seq, name, key_prefix, key_hash, last_used_at, created_at, revoked_at';

const byHash = prepared<KeyRow>('key-by-hash', `SELECT ${COLUMNS} FROM api_keys WHERE key_hash = $1`);
const byId = prepared<KeyRow>('key-by-id', `SELECT ${COLUMNS} FROM api_keys WHERE id = $1`);
// Newest first, revoked included (docs/api.md, "Pagination and page sizes").
const byAccount = prepared<KeyRow>(
  'keys-of-account',
  `SELECT ${COLUMNS} FROM api_keys WHERE account_seq = $1 ORDER BY created_at DESC, seq DESC`,
);
const insert = prepared(
  'key-insert',
  'INSERT INTO api_keys (id, account_seq, name, key_prefix, key_hash, created_at) VALUES ($1, $2, $3, $4, $5, $6)',
);
const revoke = prepared('key-revoke', 'UPDATE api_keys SET revoked_at = $2 WHERE seq = $1 AND revoked_at IS NULL');
const touch = prepared('key-touch', 'UPDATE api_keys SET last_used_at = $2 WHERE seq = $1');

/** API keys on PostgreSQL (ApiKeysRepository, src/storage/repositories.ts). */
export function postgresApiKeysRepo(pool: Pool, cache: AuthCache): ApiKeysRepository {
  return {
    /**
     * Every Public API request authenticates: cached until a key, device or account changes
     * here or in another process (authCache.ts; other processes' key changes are heard through
     * migration 13's notices), so a hit costs no round trip. The cached key is shared: its
     * lastUsedAt, set by the caller after a touch, is what keeps touches to one a minute.
     */
    findByHash: cache.cached(async (hash: string): Promise<ApiKey | null> => toKey(await byHash.first(pool, [hash]))),
    findById: async (id: string): Promise<ApiKey | null> => toKey(await byId.first(pool, [id])),
    listByAccount: async (accountSeq: number): Promise<ApiKey[]> => (await byAccount.rows(pool, [accountSeq])).map((r) => toKey(r)!),
    async insert(k: NewApiKey): Promise<void> {
      await cache.writing(insert.run(pool, [k.id, k.accountSeq, k.name, k.keyPrefix, k.keyHash, k.now]));
    },
    async revoke(seq: number, now: number): Promise<void> {
      await cache.writing(revoke.run(pool, [seq, now]));
    },
    async touch(seq: number, now: number): Promise<void> {
      await touch.run(pool, [seq, now]);
    },
  };
}
