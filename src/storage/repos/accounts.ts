import type { PlanLimits } from '../../domain/plans.js';
import type { Account } from '../../domain/types.js';
import type { Db } from '../db.js';
import type { TableChanges } from '../readCache.js';
import type { NewAccount } from '../repositories.js';

interface AccountRow {
  seq: number;
  id: string;
  email: string;
  name: string;
  password_hash: string | null;
  plan: string;
  status: 'active' | 'suspended';
  rate_per_minute: number;
  rate_per_day: number;
  device_limit: number;
  retention_days: number;
  snapshots_per_day: number;
  snapshot_retention_days: number;
  field_limit: number;
  webhook_secret: string | null;
  created_at: number;
  updated_at: number;
}

function toAccount(r: AccountRow | undefined): Account | null {
  if (!r) return null;
  return {
    seq: r.seq,
    id: r.id,
    email: r.email,
    name: r.name,
    plan: r.plan,
    status: r.status,
    limits: {
      ratePerMinute: r.rate_per_minute,
      ratePerDay: r.rate_per_day,
      deviceLimit: r.device_limit,
      retentionDays: r.retention_days,
      snapshotsPerDay: r.snapshots_per_day,
      snapshotRetentionDays: r.snapshot_retention_days,
      fieldLimit: r.field_limit,
    },
    webhookSecret: r.webhook_secret,
    passwordHash: r.password_hash,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

const limitParams = (l: PlanLimits) => ({
  rate_per_minute: l.ratePerMinute,
  rate_per_day: l.ratePerDay,
  device_limit: l.deviceLimit,
  retention_days: l.retentionDays,
  snapshots_per_day: l.snapshotsPerDay,
  snapshot_retention_days: l.snapshotRetentionDays,
  field_limit: l.fieldLimit,
});

const accountParams = (a: NewAccount) => ({
  id: a.id,
  email: a.email,
  name: a.name,
  password_hash: a.passwordHash,
  plan: a.plan,
  webhook_secret: a.webhookSecret,
  now: a.now,
  ...limitParams(a.limits),
});

/** The unique index on email refused the row (another process inserted the address since it was checked). */
const isEmailTaken = (err: unknown) =>
  (err as { code?: unknown }).code === 'SQLITE_CONSTRAINT_UNIQUE' && (err as Error).message.endsWith('accounts.email');

export function accountsRepo(db: Db, changes?: TableChanges) {
  const byId = db.prepare<[string], AccountRow>('SELECT * FROM accounts WHERE id = ?');
  const bySeq = db.prepare<[number], AccountRow>('SELECT * FROM accounts WHERE seq = ?');
  const byEmail = db.prepare<[string], AccountRow>('SELECT * FROM accounts WHERE email = ?');
  const all = db.prepare<[], AccountRow>('SELECT * FROM accounts ORDER BY created_at, seq');
  const count = db.prepare<[], { n: number }>('SELECT count(*) AS n FROM accounts');
  const insert = db.prepare(`
    INSERT INTO accounts (id, email, name, password_hash, plan, status, rate_per_minute, rate_per_day,
      device_limit, retention_days, snapshots_per_day, snapshot_retention_days, field_limit,
      webhook_secret, created_at, updated_at)
    VALUES (@id, @email, @name, @password_hash, @plan, 'active', @rate_per_minute, @rate_per_day,
      @device_limit, @retention_days, @snapshots_per_day, @snapshot_retention_days, @field_limit,
      @webhook_secret, @now, @now)`);
  // The same row, only while there is none (the first-run setup): one statement under the write lock.
  const insertFirst = db.prepare(`
    INSERT INTO accounts (id, email, name, password_hash, plan, status, rate_per_minute, rate_per_day,
      device_limit, retention_days, snapshots_per_day, snapshot_retention_days, field_limit,
      webhook_secret, created_at, updated_at)
    SELECT @id, @email, @name, @password_hash, @plan, 'active', @rate_per_minute, @rate_per_day,
      @device_limit, @retention_days, @snapshots_per_day, @snapshot_retention_days, @field_limit,
      @webhook_secret, @now, @now
    WHERE NOT EXISTS (SELECT 1 FROM accounts)`);
  const updatePlan = db.prepare(`
    UPDATE accounts SET plan = @plan, rate_per_minute = @rate_per_minute, rate_per_day = @rate_per_day,
      device_limit = @device_limit, retention_days = @retention_days, snapshots_per_day = @snapshots_per_day,
      snapshot_retention_days = @snapshot_retention_days, field_limit = @field_limit, updated_at = @now
    WHERE seq = @seq`);
  const updateStatus = db.prepare('UPDATE accounts SET status = ?, updated_at = ? WHERE seq = ?');
  // A resumed account resumes its devices' silences: no_data alerts count from now, not from
  // readings the suspension refused (devices.resumed_at, as a device's own resume sets it).
  const resumeDevicesOf = db.prepare(
    "UPDATE devices SET resumed_at = ? WHERE account_seq = ? AND (SELECT status FROM accounts WHERE seq = ?) = 'suspended'",
  );
  const setStatus = db.transaction((seq: number, status: 'active' | 'suspended', now: number) => {
    if (status === 'active') resumeDevicesOf.run(now, seq, seq);
    updateStatus.run(status, now, seq);
  });
  const updateSecret = db.prepare('UPDATE accounts SET webhook_secret = ?, updated_at = ? WHERE seq = ?');
  // With a hash to replace, only over that one (repositories.ts): one statement.
  const updatePassword = db.prepare(
    'UPDATE accounts SET password_hash = ?, updated_at = ? WHERE seq = ? AND (? = 0 OR password_hash IS ?)',
  );

  return {
    findById: (id: string) => toAccount(byId.get(id)),
    /** Cached until accounts or devices change (readCache.ts): treat the result as read-only. */
    findBySeq: changes ? changes.cached((seq: number) => toAccount(bySeq.get(seq))) : (seq: number) => toAccount(bySeq.get(seq)),
    findByEmail: (email: string) => toAccount(byEmail.get(email)),
    list: () => all.all().map((r) => toAccount(r)!),
    count: () => count.get()!.n,
    insert(a: NewAccount): boolean {
      try {
        insert.run(accountParams(a));
        return true;
      } catch (err) {
        if (isEmailTaken(err)) return false;
        throw err;
      }
    },
    insertFirst: (a: NewAccount): boolean => insertFirst.run(accountParams(a)).changes > 0,
    setPlan: (seq: number, plan: string, limits: PlanLimits, now: number) =>
      void updatePlan.run({ seq, plan, now, ...limitParams(limits) }),
    setStatus: (seq: number, status: 'active' | 'suspended', now: number) => setStatus(seq, status, now),
    setWebhookSecret: (seq: number, secret: string, now: number) => void updateSecret.run(secret, now, seq),
    setPasswordHash: (seq: number, hash: string, now: number, replacing?: string | null) =>
      updatePassword.run(hash, now, seq, replacing !== undefined ? 1 : 0, replacing ?? null).changes > 0,
  };
}

// The row and its mapping, shared with the PostgreSQL repository (postgres/repos/accounts.ts) so both backends
// hand the domain the same objects.
export { type AccountRow, toAccount };
