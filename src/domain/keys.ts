import { badRequest, forbidden, notFound, unauthorized } from '../errors.js';
import { API_KEY_PREFIX, hashSecret, newApiKey, newId } from '../ids.js';
import type { Repositories } from '../storage/repositories.js';
import { type Clock, MINUTE_MS } from '../time.js';
import type { Account, ApiKey } from './types.js';

/** last_used_at is written at most this often per key, so reads do not each cost a write. */
const TOUCH_INTERVAL_MS = MINUTE_MS;

export function keyService(repos: Repositories, clock: Clock) {
  return {
    /** Creates a key; the full key is returned once and only its hash is stored. */
    async create(account: Account, name: string): Promise<{ key: string; record: ApiKey }> {
      const label = name.trim();
      if (!label) throw badRequest('a key needs a name');
      if (label.length > 100) throw badRequest('key name is longer than 100 characters');
      const { key, keyPrefix } = newApiKey();
      const id = newId('key');
      await repos.apiKeys.insert({ id, accountSeq: account.seq, name: label, keyPrefix, keyHash: hashSecret(key), now: clock.now() });
      return { key, record: (await repos.apiKeys.findById(id))! };
    },

    list: async (account: Account) => await repos.apiKeys.listByAccount(account.seq),

    async revoke(keyId: string, account?: Account): Promise<ApiKey> {
      const key = await repos.apiKeys.findById(keyId);
      if (!key || (account && key.accountSeq !== account.seq)) throw notFound(`no API key ${keyId}`);
      await repos.apiKeys.revoke(key.seq, clock.now());
      return (await repos.apiKeys.findById(keyId))!;
    },

    /**
     * Resolves a presented key to its active account: 401 for a missing, unknown or revoked
     * key, 403 when its account is suspended. Looked up by hash on every request, so a key
     * revoked from the CLI is refused on its very next use (docs/api.md, "Authentication").
     */
    async authenticate(presented: string | undefined): Promise<{ account: Account; key: ApiKey }> {
      if (!presented) throw unauthorized('missing API key (send Authorization: Bearer <key>)');
      if (!presented.startsWith(API_KEY_PREFIX)) throw unauthorized('invalid API key');
      const key = await repos.apiKeys.findByHash(hashSecret(presented));
      if (!key || key.revokedAt !== null) throw unauthorized('invalid API key');
      const account = await repos.accounts.findBySeq(key.accountSeq);
      if (!account) throw unauthorized('invalid API key');
      if (account.status === 'suspended') throw forbidden('account is suspended');
      const now = clock.now();
      if (key.lastUsedAt === null || now - key.lastUsedAt >= TOUCH_INTERVAL_MS) {
        await repos.apiKeys.touch(key.seq, now);
        key.lastUsedAt = now;
      }
      return { account, key };
    },
  };
}
