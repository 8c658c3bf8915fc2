import type { Pool } from 'pg';
import type { PlanLimits } from '../../../domain/plans.js';
import type { Account } from '../../../domain/types.js';
import { type AccountRow, toAccount } from '../../repos/accounts.js';
import type { AccountsRepository, NewAccount } from '../../repositories.js';
import type { AuthCache } from '../authCache.js';
import { inTransaction, prepared, Rollback } from './sql.js';

const COLUMNS = `seq, id, email, name, password_hash, plan, status, rate_per_minute, rate_per_day, device_limit, retention_days,
  snapshots_per_day, snapshot_retention_days, field_limit, webhook_secret, created_at, updated_at`;

const byId = prepared<AccountRow>('account-by-id', `SELECT ${COLUMNS} FROM accounts WHERE id = $1`);
const bySeq = prepared<AccountRow>('account-by-seq', `SELECT ${COLUMNS} FROM accounts WHERE seq = $1`);
// Served by the unique index on lower(email): an address matches whatever its case, as
// COLLATE NOCASE does on SQLite.
const byEmail = prepared<AccountRow>('account-by-email', `SELECT ${COLUMNS} FROM accounts WHERE lower(email) = lower($1)`);
const all = prepared<AccountRow>('accounts-all', `SELECT ${COLUMNS} FROM accounts ORDER BY created_at, seq`);
const count = prepared<{ n: number }>('accounts-count', 'SELECT count(*) AS n FROM accounts');
const insert = prepared(
  'account-insert',
  `INSERT INTO accounts (id, email, name, password_hash, plan, status, rate_per_minute, rate_per_day, device_limit, retention_days,
     snapshots_per_day, snapshot_retention_days, field_limit, webhook_secret, created_at, updated_at)
   VALUES ($1, $2, $3, $4, $5, 'active', $6, $7, $8, $9, $10, $11, $12, $13, $14, $14)`,
);
/** Transaction-level advisory lock of a first account's insert (insertFirst): 'tlfa'. */
const FIRST_ACCOUNT_LOCK = 0x746c6661;
const anyAccount = prepared<{ any: boolean }>('accounts-any', 'SELECT EXISTS (SELECT 1 FROM accounts) AS any');
const updatePlan = prepared(
  'account-set-plan',
  `UPDATE accounts SET plan = $2, rate_per_minute = $3, rate_per_day = $4, device_limit = $5, retention_days = $6,
     snapshots_per_day = $7, snapshot_retention_days = $8, field_limit = $9, updated_at = $10 WHERE seq = $1`,
);
// A resumed account resumes its devices' silences: no_data alerts count from now, not from
// readings the suspension refused (devices.resumed_at, as a device's own resume sets it).
// Every part of the statement sees the status before it.
const updateStatus = prepared(
  'account-set-status',
  `WITH resumed AS (
     UPDATE devices SET resumed_at = $3
     WHERE account_seq = $1 AND $2 = 'active' AND (SELECT status FROM accounts WHERE seq = $1) = 'suspended'
   )
   UPDATE accounts SET status = $2, updated_at = $3 WHERE seq = $1`,
);
const updateSecret = prepared('account-set-secret', 'UPDATE accounts SET webhook_secret = $2, updated_at = $3 WHERE seq = $1');
// With $4, only over the hash $5: a row changed meanwhile is checked again on its new values
// once the change that held it commits.
const updatePassword = prepared(
  'account-set-password',
  'UPDATE accounts SET password_hash = $2, updated_at = $3 WHERE seq = $1 AND (NOT $4::boolean OR password_hash IS NOT DISTINCT FROM $5::text)',
);

const limitValues = (l: PlanLimits) => [
  l.ratePerMinute,
  l.ratePerDay,
  l.deviceLimit,
  l.retentionDays,
  l.snapshotsPerDay,
  l.snapshotRetentionDays,
  l.fieldLimit,
];

const insertValues = (a: NewAccount) => [a.id, a.email, a.name, a.passwordHash, a.plan, ...limitValues(a.limits), a.webhookSecret, a.now];

/** The unique index on lower(email) refused the row (an insert that committed since the address was checked). */
const isEmailTaken = (err: unknown) =>
  (err as { code?: unknown }).code === '23505' && (err as { constraint?: unknown }).constraint === 'accounts_email';

/** Accounts on PostgreSQL (AccountsRepository, src/storage/repositories.ts). */
export function postgresAccountsRepo(pool: Pool, cache: AuthCache): AccountsRepository {
  const findBySeq = async (seq: number): Promise<Account | null> => toAccount(await bySeq.first(pool, [seq]));
  return {
    findById: async (id: string): Promise<Account | null> => toAccount(await byId.first(pool, [id])),
    /** Cached until this process changes accounts or devices (authCache.ts): treat the result as read-only. */
    findBySeq: cache.cached(findBySeq),
    findByEmail: async (email: string): Promise<Account | null> => toAccount(await byEmail.first(pool, [email])),
    list: async (): Promise<Account[]> => (await all.rows(pool, [])).map((r) => toAccount(r)!),
    count: async (): Promise<number> => (await count.first(pool, []))!.n,
    insert: (a: NewAccount): Promise<boolean> =>
      cache.writing(
        insert.run(pool, insertValues(a)).then(
          () => true,
          (err: unknown) => {
            if (isEmailTaken(err)) return false;
            throw err;
          },
        ),
      ),
    /**
     * Only while there is no account: two setups at once take the lock one after the other,
     * and the second's check, a statement begun after the first committed, sees its account.
     * Another creation (an admin command) does not take the lock: one of the same address
     * that commits after the check makes the insert fail on the unique index, which is an
     * account existing too.
     */
    insertFirst: (a: NewAccount): Promise<boolean> =>
      cache.writing(
        inTransaction(pool, async (client) => {
          await client.query('SELECT pg_advisory_xact_lock($1)', [FIRST_ACCOUNT_LOCK]);
          if ((await anyAccount.first(client, []))!.any) return new Rollback(false);
          await insert.run(client, insertValues(a));
          return true;
        }).catch((err: unknown) => {
          if (isEmailTaken(err)) return false;
          throw err;
        }),
      ),
    async setPlan(seq: number, plan: string, limits: PlanLimits, now: number): Promise<void> {
      await cache.writing(updatePlan.run(pool, [seq, plan, ...limitValues(limits), now]));
    },
    async setStatus(seq: number, status: 'active' | 'suspended', now: number): Promise<void> {
      await cache.writing(updateStatus.run(pool, [seq, status, now]));
    },
    async setWebhookSecret(seq: number, secret: string, now: number): Promise<void> {
      await cache.writing(updateSecret.run(pool, [seq, secret, now]));
    },
    setPasswordHash: async (seq: number, hash: string, now: number, replacing?: string | null): Promise<boolean> =>
      (await cache.writing(updatePassword.run(pool, [seq, hash, now, replacing !== undefined, replacing ?? null]))) > 0,
  };
}
