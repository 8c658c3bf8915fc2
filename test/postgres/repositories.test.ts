import { rmSync } from 'node:fs';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PlanLimits } from '../../src/domain/plans.js';
import type { ActionDelivery, Alert, AlertEvent, AlertState } from '../../src/domain/types.js';
import { openDatabase } from '../../src/storage/db.js';
import { createRepositories } from '../../src/storage/index.js';
import { connectPostgres } from '../../src/storage/postgres/connect.js';
import { createPostgresRepositories, type PostgresRepositories } from '../../src/storage/postgres/index.js';
import { migratePostgres } from '../../src/storage/postgres/migrations.js';
import { PostgresReadingWriter } from '../../src/storage/postgres/readingWriter.js';
import { ReadingWriter } from '../../src/storage/readingWriter.js';
import {
  type AccountsRepository,
  type AlertChanges,
  type AlertsRepository,
  type ApiKeysRepository,
  type DevicesRepository,
  isPromise,
  type NewAlert,
  type NewAlertEvent,
  type NewDevice,
  type NewSnapshot,
  type ReadingsRepository,
  type RecordedOutcome,
  type Repositories,
  type RollupsRepository,
  type SessionsRepository,
  type SnapshotsRepository,
} from '../../src/storage/repositories.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../src/time.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { tempDir } from '../helpers/server.js';

/**
 * One contract for both storage backends (src/storage/repositories.ts): the same sequence of
 * operations runs against the SQLite repositories and the PostgreSQL ones, and every result
 * (rows, counts, refusals, order, pages, retention, cascades) must be the same. Each `it` is
 * one section: it runs on both backends, in order (a section builds on the state the earlier
 * ones left), and compares what each recorded. A few expectations on the SQLite results
 * besides keep the contract from passing when both backends are wrong alike.
 */

const NOW = Date.UTC(2026, 10, 23, 12, 0, 0);
const LEVELS = 3;

const limits = (deviceLimit: number, retentionDays: number): PlanLimits => ({
  ratePerMinute: 600,
  ratePerDay: 100_000,
  deviceLimit,
  retentionDays,
  snapshotsPerDay: 2,
  snapshotRetentionDays: 7,
  fieldLimit: 20,
});

/**
 * The SQLite repositories that predate the interface's named operations: statements, and a
 * transaction around them. Declared here, not imported, so this test compiles and runs
 * against SQLite repositories of either kind.
 */
interface StatementRepositories extends Pick<Repositories, 'accounts' | 'apiKeys' | 'sessions' | 'externalCommits'> {
  transaction<T>(fn: () => T): T;
  devices: {
    count(accountSeq: number): number;
    insert(d: NewDevice): unknown;
    remove(seq: number): unknown;
    archiveLastSeen(seq: number): unknown;
  };
  readings: { deleteOlderBatch(deviceSeq: number, before: number, batch: number): number };
  rollups: {
    deleteRange(deviceSeq: number, level: number, from: number, to: number): number;
    raw(deviceSeq: number, from: number, to: number): [number, string][];
    put(deviceSeq: number, level: number, bucket: number, stats: string): void;
    clearDirty(deviceSeq: number, hour: number): void;
    deleteDevice(deviceSeq: number): void;
    deleteBefore(deviceSeq: number, cutoff: number, levels: number): void;
  };
  alerts: {
    findBySeq(seq: number): Alert | null;
    openEvent(alertSeq: number): AlertEvent | null;
    resolveEvent(seq: number, at: number, deliveries: ActionDelivery[]): unknown;
    setState(seq: number, state: AlertState): unknown;
    setLastTriggered(seq: number, at: number): unknown;
    insertEvent(e: NewAlertEvent): number;
    update(seq: number, a: AlertChanges): unknown;
    setEnabled(seq: number, enabled: boolean, now: number): unknown;
  };
  snapshots: { countSince(deviceSeq: number, since: number): number; insert(s: NewSnapshot): unknown };
}

/**
 * The SQLite repositories as the interface has them. Where they implement the named
 * operations themselves, as they are; otherwise the named operations are the domain's
 * transactions over the statements, as the domain ran them before the interface. (Writes of
 * those repositories return better-sqlite3's RunResult where the interface has void: every
 * value the interface returns is the same, so they are cast.)
 */
function sqliteContract(repositories: object): Repositories {
  if ('insertWithinLimit' in (repositories as Repositories).devices) return repositories as Repositories;
  const r = repositories as unknown as StatementRepositories;
  const asInterface = <T>(repository: object): T => repository as T;
  const apply = (deviceSeq: number, writes: { level: number; deleteFrom: number; deleteTo: number; rows: [number, string][] }[]) => {
    for (const w of writes) {
      if (w.deleteTo > w.deleteFrom) r.rollups.deleteRange(deviceSeq, w.level, w.deleteFrom, w.deleteTo);
      for (const [bucket, stats] of w.rows) r.rollups.put(deviceSeq, w.level, bucket, stats);
    }
  };
  const endFiring = (seq: number, now: number) => {
    if (r.alerts.findBySeq(seq)?.state !== 'firing') return;
    const open = r.alerts.openEvent(seq);
    if (open) r.alerts.resolveEvent(open.seq, now, []);
    r.alerts.setState(seq, 'ok');
  };
  return {
    accounts: asInterface<AccountsRepository>(r.accounts),
    apiKeys: asInterface<ApiKeysRepository>(r.apiKeys),
    sessions: asInterface<SessionsRepository>(r.sessions),
    externalCommits: r.externalCommits,
    leadership: { soleWriter: true, follow: () => () => Promise.resolve() },
    devices: {
      ...asInterface<DevicesRepository>(r.devices),
      insertWithinLimit: (d, limit) =>
        r.transaction(() => {
          if (r.devices.count(d.accountSeq) >= limit) return false;
          r.devices.insert(d);
          return true;
        }),
      removeWithRollups: (seq) =>
        r.transaction(() => {
          r.rollups.deleteDevice(seq);
          r.devices.remove(seq);
        }),
    },
    readings: {
      ...asInterface<ReadingsRepository>(r.readings),
      expireBatch: (deviceSeq, cutoff, batch, levels) =>
        r.transaction(() => {
          r.devices.archiveLastSeen(deviceSeq);
          const n = r.readings.deleteOlderBatch(deviceSeq, cutoff, batch);
          if (n > 0) r.rollups.deleteBefore(deviceSeq, cutoff, levels);
          return n;
        }),
    },
    rollups: {
      ...asInterface<RollupsRepository>(r.rollups),
      writeSpan: (deviceSeq, writes) => r.transaction(() => apply(deviceSeq, writes)),
      settleHour: (deviceSeq, hour, writes, read) =>
        r.transaction(() => {
          if (read.to > hour && r.rollups.raw(deviceSeq, hour, read.to).length !== read.readings) return false;
          apply(deviceSeq, writes);
          r.rollups.clearDirty(deviceSeq, hour);
          return true;
        }),
    },
    alerts: {
      ...asInterface<AlertsRepository>(r.alerts),
      update: (seq, a, ending) =>
        r.transaction(() => {
          r.alerts.update(seq, a);
          if (ending) endFiring(seq, a.now);
        }),
      setEnabled: (seq, enabled, now) =>
        r.transaction(() => {
          r.alerts.setEnabled(seq, enabled, now);
          if (!enabled) endFiring(seq, now);
        }),
      recordOutcomes: (batch) =>
        r.transaction(() =>
          batch.map((o): RecordedOutcome => {
            try {
              // A nested transaction is a savepoint in better-sqlite3.
              return r.transaction(() => {
                if (o.type === 'triggered') {
                  const seq = r.alerts.insertEvent(o.event);
                  r.alerts.setLastTriggered(o.alertSeq, o.event.triggeredAt);
                  r.alerts.setState(o.alertSeq, 'firing');
                  const event: AlertEvent = {
                    seq,
                    ...o.event,
                    acknowledged: false,
                    acknowledgedAt: null,
                    resolvedAt: null,
                    resolutionDeliveries: [],
                  };
                  return { event };
                }
                r.alerts.setState(o.alertSeq, 'ok');
                const open = r.alerts.openEvent(o.alertSeq);
                if (!open) return { event: null };
                r.alerts.resolveEvent(open.seq, o.at, o.notices);
                return { event: { ...open, resolvedAt: o.at, resolutionDeliveries: o.notices } };
              });
            } catch (error) {
              return { event: null, error };
            }
          }),
        ),
    },
    snapshots: {
      ...asInterface<SnapshotsRepository>(r.snapshots),
      insertWithinQuota: (s, since, limit) =>
        r.transaction(() => {
          if (r.snapshots.countSince(s.deviceSeq, since) >= limit) return false;
          r.snapshots.insert(s);
          return true;
        }),
    },
  };
}

interface Backend {
  name: 'sqlite' | 'postgres';
  repos: Repositories;
  append(deviceSeq: number, accountSeq: number | undefined, time: number, data: string): Promise<number>;
  close(): Promise<void>;
}

/** What a refused statement was, in words both backends share. */
function refusal(err: unknown): string {
  const code = String((err as { code?: string }).code);
  if (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === '23505') return 'unique';
  if (code === 'SQLITE_CONSTRAINT_FOREIGNKEY' || code === '23503') return 'foreign key';
  if (code === 'SQLITE_CONSTRAINT_CHECK' || code === '23514') return 'check';
  return `other: ${code} ${(err as Error).message}`;
}
const refused = async (work: () => unknown): Promise<string> => {
  try {
    await work();
    return 'accepted';
  } catch (err) {
    return refusal(err);
  }
};

const collect = async <T>(it: Iterable<T> | AsyncIterable<T>): Promise<T[]> => {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
};

const device = (id: string, accountSeq: number, now: number, extra: Partial<NewDevice> = {}): NewDevice => ({
  id,
  accountSeq,
  name: `Device ${id}`,
  type: 'sensor',
  description: '',
  settings: { data_interval_seconds: 30, nested: { a: [1, 2] } },
  schemaMode: 'flexible',
  fields: [{ name: 'temperature', type: 'number' } as never],
  snapshotsEnabled: true,
  tokenHash: `hash-${id}`,
  now,
  ...extra,
});

const alertValues = (now: number, extra: Partial<NewAlert> = {}): AlertChanges => ({
  name: 'Too hot',
  kind: 'threshold',
  field: 'temperature',
  operator: '>',
  value: 30.5,
  clearValue: 28.25,
  actions: ['email', 'webhook'],
  webhookUrl: 'https://hooks.example.com/x',
  slackUrl: null,
  discordUrl: null,
  ntfyUrl: null,
  severity: 'warning',
  enabled: true,
  notifyResolved: true,
  cooldown: 300,
  now,
  ...extra,
});

const delivery = (action: ActionDelivery['action'], at: number, status: ActionDelivery['status'] = 'pending'): ActionDelivery => ({
  action,
  status,
  at,
});

/** What recordOutcomes gave, comparable across backends (each has its own error objects). */
const outcomes = (results: RecordedOutcome[]) => results.map((r) => ({ event: r.event, failed: r.error !== undefined }));

type Section = (b: Backend, out: Record<string, unknown>) => Promise<void>;

describe('storage repositories: SQLite and PostgreSQL keep one contract', () => {
  let pg: PostgresServer;
  let pool: Pool;
  let pgRepos: PostgresRepositories;
  let sqliteDir: string;
  const backends: Backend[] = [];

  beforeAll(async () => {
    sqliteDir = tempDir();
    const db = openDatabase(sqliteDir);
    const sqliteRepos = createRepositories(db);
    const sqliteWriter = new ReadingWriter(sqliteRepos.readings);
    backends.push({
      name: 'sqlite',
      repos: sqliteContract(sqliteRepos),
      append: (deviceSeq, accountSeq, time, data) => sqliteWriter.append({ deviceSeq, accountSeq, time, data }),
      close: async () => {
        sqliteWriter.close();
        db.close();
      },
    });

    pg = await startPostgres();
    const url = await createDatabase(pg);
    pool = await connectPostgres(url);
    await migratePostgres(pool);
    pgRepos = await createPostgresRepositories(pool);
    const pgWriter = new PostgresReadingWriter(pool, url, 5_000, pgRepos.rollups.lateBefore);
    backends.push({
      name: 'postgres',
      repos: pgRepos,
      append: (deviceSeq, accountSeq, time, data) => pgWriter.append({ deviceSeq, accountSeq, time, data }),
      close: () => pgWriter.close(),
    });
  }, 60_000);

  afterAll(async () => {
    for (const b of backends) await b.close();
    await pool?.end();
    await pg?.stop();
    if (sqliteDir) rmSync(sqliteDir, { recursive: true, force: true });
  });

  /**
   * A record with each stored reading's id replaced by its rank among the record's reading
   * ids. Both backends issue ids in append order, but PostgreSQL numbers a batch from a
   * block of ids (migration 6) where SQLite counts one by one: the order is the contract,
   * not the numbers.
   */
  function readingIdsByOrder(record: Record<string, unknown>): Record<string, unknown> {
    const isReading = (v: unknown): v is { seq: number } =>
      typeof v === 'object' && v !== null && 'seq' in v && 'deviceSeq' in v && 'time' in v && 'data' in v;
    const ids = new Set<number>();
    const collect = (v: unknown): void => {
      if (Array.isArray(v)) v.forEach(collect);
      else if (typeof v === 'object' && v !== null) {
        if (isReading(v)) ids.add(v.seq);
        Object.values(v).forEach(collect);
      }
    };
    collect(record);
    const rank = new Map([...ids].sort((a, b) => a - b).map((id, i) => [id, i + 1]));
    const replace = (v: unknown): unknown => {
      if (Array.isArray(v)) return v.map(replace);
      if (typeof v !== 'object' || v === null) return v;
      const out = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, replace(x)]));
      if (isReading(v)) out.seq = rank.get(v.seq);
      return out;
    };
    return replace(record) as Record<string, unknown>;
  }

  /** Runs a section on both backends, compares what they recorded, and returns SQLite's record. */
  async function both(section: Section): Promise<Record<string, unknown>> {
    const records: Record<string, unknown>[] = [];
    for (const b of backends) {
      const out: Record<string, unknown> = {};
      await section(b, out);
      records.push(out);
    }
    const [sqlite, postgres] = records.map(readingIdsByOrder) as [Record<string, unknown>, Record<string, unknown>];
    expect(Object.keys(postgres)).toEqual(Object.keys(sqlite));
    for (const key of Object.keys(sqlite)) expect(postgres[key], key).toEqual(sqlite[key]);
    return sqlite;
  }

  const partitionCount = async () =>
    Number((await pool.query("SELECT count(*) AS n FROM pg_inherits WHERE inhparent = 'readings'::regclass")).rows[0].n);

  // Seqs both backends give the rows below: identities and rowids both start at 1.
  const ACC_A = 1;
  const ACC_B = 2;
  const DEV_1 = 1;
  const DEV_2 = 2;
  const DEV_3 = 3;
  const DEV_OLD = 4;

  it('accounts: insert, look-ups (e-mail in any case), list, count, plan, status, secret, password', async () => {
    const rec = await both(async ({ repos: r }, out) => {
      // The first account, as the first-run setup makes it: only while there is none.
      out.insertedFirst = await r.accounts.insertFirst({
        id: 'acc_a',
        email: 'Alice@Example.com',
        name: 'Alice',
        passwordHash: 'pw-a',
        plan: 'starter',
        limits: limits(2, 30),
        webhookSecret: 'whsec_a',
        now: NOW - 10 * DAY_MS,
      });
      await r.accounts.insert({
        id: 'acc_b',
        email: 'bob@example.com',
        name: 'Bob',
        passwordHash: null,
        plan: 'pro',
        limits: limits(10, 90),
        webhookSecret: 'whsec_b',
        now: NOW - 10 * DAY_MS,
      });
      out.notFirst = await r.accounts.insertFirst({
        id: 'acc_second',
        email: 'second@example.com',
        name: 'Second',
        passwordHash: null,
        plan: 'pro',
        limits: limits(10, 90),
        webhookSecret: 'whsec_s',
        now: NOW,
      });
      // Last insert of the table in this test: PostgreSQL's identity uses a number even for a refused row.
      // The same address in other letters: refused as taken, not as a constraint error.
      out.duplicateEmail = (await r.accounts.insert({
        id: 'acc_c',
        email: 'BOB@example.COM',
        name: 'Bob again',
        passwordHash: null,
        plan: 'pro',
        limits: limits(10, 90),
        webhookSecret: 'whsec_c',
        now: NOW,
      }))
        ? 'inserted'
        : 'email taken';
      out.byId = await r.accounts.findById('acc_a');
      out.byEmail = await r.accounts.findByEmail('ALICE@example.com');
      out.bySeq = await r.accounts.findBySeq(ACC_B);
      out.missing = [await r.accounts.findById('acc_x'), await r.accounts.findBySeq(99), await r.accounts.findByEmail('x@example.com')];
      out.list = await r.accounts.list();
      out.count = await r.accounts.count();
      await r.accounts.setPlan(ACC_B, 'business', limits(3, 90), NOW - 9 * DAY_MS);
      await r.accounts.setStatus(ACC_B, 'suspended', NOW - 9 * DAY_MS);
      await r.accounts.setStatus(ACC_B, 'active', NOW - 9 * DAY_MS + 1);
      await r.accounts.setWebhookSecret(ACC_A, 'whsec_a2', NOW - 9 * DAY_MS);
      out.passwordSet = [
        await r.accounts.setPasswordHash(ACC_B, 'pw-b', NOW - 9 * DAY_MS + 2),
        // Over a hash that is no longer the account's: nothing changes.
        await r.accounts.setPasswordHash(ACC_B, 'pw-x', NOW - 9 * DAY_MS + 3, 'pw-old'),
        await r.accounts.setPasswordHash(ACC_B, 'pw-x', NOW - 9 * DAY_MS + 3, null),
        await r.accounts.setPasswordHash(ACC_A, 'pw-a', NOW - 9 * DAY_MS + 3, 'pw-a'),
      ];
      out.changed = [await r.accounts.findBySeq(ACC_A), await r.accounts.findBySeq(ACC_B)];
    });
    expect([rec.insertedFirst, rec.notFirst]).toEqual([true, false]);
    expect(rec.duplicateEmail).toBe('email taken');
    expect(rec.count).toBe(2);
    expect((rec.byEmail as { id: string }).id).toBe('acc_a');
    expect(rec.passwordSet).toEqual([true, false, false, true]);
    expect(rec.changed).toMatchObject([{ webhookSecret: 'whsec_a2' }, { plan: 'business', status: 'active', passwordHash: 'pw-b' }]);
  });

  it('devices: creation within the plan limit, look-ups, pages, counts, changes, rejections', async () => {
    const rec = await both(async ({ repos: r }, out) => {
      out.created = [
        await r.devices.insertWithinLimit(device('dev_1', ACC_A, NOW - 9 * DAY_MS), 2),
        await r.devices.insertWithinLimit(device('dev_2', ACC_A, NOW - 9 * DAY_MS, { snapshotsEnabled: false }), 2),
        await r.devices.insertWithinLimit(device('dev_over', ACC_A, NOW - 9 * DAY_MS), 2),
        await r.devices.insertWithinLimit(device('dev_3', ACC_B, NOW - 8 * DAY_MS, { schemaMode: 'strict' }), 3),
        await r.devices.insertWithinLimit(device('dev_old', ACC_B, NOW - 8 * DAY_MS), 3),
      ];
      out.duplicateToken = await refused(() =>
        r.devices.insertWithinLimit(device('dev_dup', ACC_B, NOW, { tokenHash: 'hash-dev_1' }), 100),
      );
      out.unknownAccount = await refused(() => r.devices.insertWithinLimit(device('dev_orphan', 99, NOW), 100));
      out.byId = await r.devices.findById('dev_1');
      out.bySeq = await r.devices.findBySeq(DEV_2);
      out.forAuth = await r.devices.findForAuth('dev_3');
      out.missing = [await r.devices.findById('dev_over'), await r.devices.findBySeq(99), await r.devices.findForAuth('dev_x')];
      // An id with a NUL (a request path or body can hold one) finds nothing, on PostgreSQL too.
      out.nul = [
        await r.devices.findById('dev_1\u0000'),
        await r.devices.findForAuth('dev_3\u0000'),
        await r.accounts.findByEmail('a\u0000@example.com'),
        await r.apiKeys.findById('key_\u0000'),
        await r.snapshots.findById('snp_\u0000'),
      ];
      await r.devices.setStatus(DEV_2, 'paused', NOW - 7 * DAY_MS);
      out.pages = [
        await r.devices.listByAccount(ACC_A, { limit: 1, offset: 0 }),
        await r.devices.listByAccount(ACC_A, { limit: 1, offset: 1 }),
        await r.devices.listByAccount(ACC_A, { limit: 10, offset: 2 }),
        await r.devices.listByAccount(ACC_A, { limit: 10, offset: 0, status: 'paused' }),
        await r.devices.listByAccount(ACC_B, { limit: 10, offset: 0, status: 'active' }),
      ];
      out.counts = [
        await r.devices.count(ACC_A),
        await r.devices.count(ACC_A, 'paused'),
        await r.devices.count(ACC_A, 'active'),
        await r.devices.count(ACC_B),
      ];
      out.allSeqs = await r.devices.allSeqs();
      await r.devices.setStatus(DEV_2, 'active', NOW - 6 * DAY_MS);
      await r.devices.update(DEV_3, {
        name: 'Renamed',
        type: 'camera',
        description: 'roof',
        settings: { data_interval_seconds: 120 },
        schemaMode: 'flexible',
        fields: [],
        snapshotsEnabled: false,
        now: NOW - 6 * DAY_MS,
      });
      await r.devices.setTokenHash(DEV_OLD, 'hash-old-2', NOW - 6 * DAY_MS);
      await r.devices.recordRejection(DEV_1, 'field "x" is not declared', NOW - 6 * DAY_MS);
      await r.devices.recordRejection(DEV_1, 'body is not JSON', NOW - 6 * DAY_MS + 1);
      out.changed = [
        await r.devices.findBySeq(DEV_1),
        await r.devices.findBySeq(DEV_2),
        await r.devices.findBySeq(DEV_3),
        await r.devices.findById('dev_old'),
      ];
    });
    expect(rec.created).toEqual([true, true, false, true, true]);
    expect(rec.duplicateToken).toBe('unique');
    expect(rec.unknownAccount).toBe('foreign key');
    expect(rec.nul).toEqual([null, null, null, null, null]);
    expect(rec.counts).toEqual([2, 1, 1, 2]);
    expect(rec.changed).toMatchObject([
      { rejectedCount: 2, lastRejectionReason: 'body is not JSON' },
      { status: 'active', resumedAt: NOW - 6 * DAY_MS },
      { name: 'Renamed', snapshotsEnabled: false, settings: { data_interval_seconds: 120 } },
      { tokenHash: 'hash-old-2' },
    ]);
  });

  it('PostgreSQL: authentication look-ups are answered from memory, and this process’s writes invalidate them', async () => {
    const r = pgRepos;
    const first = await r.devices.findForAuth('dev_1');
    // A hit is synchronous: no promise, no round trip.
    const hit = r.devices.findForAuth('dev_1');
    expect(isPromise(hit)).toBe(false);
    expect(hit).toBe(first);
    const account = await r.accounts.findBySeq(ACC_A);
    expect(r.accounts.findBySeq(ACC_A)).toBe(account);
    // A miss is not cached.
    expect(await r.devices.findForAuth('dev_nope')).toBeNull();
    expect(r.devices.findForAuth('dev_nope')).toBeInstanceOf(Promise);
    // Own writes to devices or accounts drop both caches.
    await r.devices.setTokenHash(DEV_1, 'hash-rotated', NOW - 5 * DAY_MS);
    const afterRotation = r.devices.findForAuth('dev_1');
    expect(afterRotation).toBeInstanceOf(Promise);
    expect((await afterRotation)!.tokenHash).toBe('hash-rotated');
    expect(r.accounts.findBySeq(ACC_A)).toBeInstanceOf(Promise);
    await r.accounts.findBySeq(ACC_A);
    await r.accounts.setStatus(ACC_A, 'active', NOW - 5 * DAY_MS);
    expect(r.devices.findForAuth('dev_1')).toBeInstanceOf(Promise);
    expect(r.accounts.findBySeq(ACC_A)).toBeInstanceOf(Promise);
    // A look-up in flight when the cache is invalidated is not remembered.
    await r.devices.findForAuth('dev_1');
    r.invalidateAuthCache();
    const inFlight = r.devices.findForAuth('dev_1');
    r.invalidateAuthCache();
    expect((await inFlight)!.tokenHash).toBe('hash-rotated');
    expect(r.devices.findForAuth('dev_1')).toBeInstanceOf(Promise);
    await r.devices.setTokenHash(DEV_1, 'hash-dev_1', NOW - 5 * DAY_MS);
    expect((await r.devices.findForAuth('dev_1'))!.tokenHash).toBe('hash-dev_1');
    // The same writes on SQLite, so both stores hold the same rows again.
    const s = backends[0]!.repos;
    await s.devices.setTokenHash(DEV_1, 'hash-dev_1', NOW - 5 * DAY_MS);
    await s.accounts.setStatus(ACC_A, 'active', NOW - 5 * DAY_MS);
  });

  it('API keys and sessions', async () => {
    const rec = await both(async ({ repos: r }, out) => {
      await r.apiKeys.insert({ id: 'key_1', accountSeq: ACC_A, name: 'ci', keyPrefix: 'tk_1', keyHash: 'kh1', now: NOW - DAY_MS });
      await r.apiKeys.insert({ id: 'key_2', accountSeq: ACC_A, name: 'grafana', keyPrefix: 'tk_2', keyHash: 'kh2', now: NOW - DAY_MS });
      await r.apiKeys.insert({ id: 'key_3', accountSeq: ACC_A, name: 'old', keyPrefix: 'tk_3', keyHash: 'kh3', now: NOW - 2 * DAY_MS });
      out.duplicateHash = await refused(() =>
        r.apiKeys.insert({ id: 'key_4', accountSeq: ACC_B, name: 'x', keyPrefix: 'tk_4', keyHash: 'kh1', now: NOW }),
      );
      await r.apiKeys.revoke(2, NOW - 100);
      await r.apiKeys.revoke(2, NOW); // already revoked: stays at its first time
      await r.apiKeys.touch(1, NOW - 50);
      out.byHash = await r.apiKeys.findByHash('kh2');
      out.byId = await r.apiKeys.findById('key_1');
      out.missing = [await r.apiKeys.findByHash('nope'), await r.apiKeys.findById('key_x')];
      out.list = await r.apiKeys.listByAccount(ACC_A);
      out.none = await r.apiKeys.listByAccount(ACC_B);

      const session = (idHash: string, accountSeq: number, expiresAt: number) => ({
        idHash,
        accountSeq,
        csrfToken: `csrf-${idHash}`,
        createdAt: NOW - HOUR_MS,
        lastUsedAt: NOW - HOUR_MS,
        expiresAt,
      });
      out.inserted = [
        await r.sessions.insert(session('s1', ACC_A, NOW + DAY_MS), 'pw-a'),
        await r.sessions.insert(session('s2', ACC_A, NOW + DAY_MS), 'pw-a'),
        await r.sessions.insert(session('s3', ACC_A, NOW - 1), 'pw-a'),
        await r.sessions.insert(session('s4', ACC_B, NOW + DAY_MS), 'pw-b'),
        await r.sessions.insert(session('s5', ACC_B, NOW), 'pw-b'),
        // Checked against a password changed since: nothing goes in.
        await r.sessions.insert(session('s6', ACC_B, NOW + DAY_MS), null),
        await r.sessions.insert(session('s7', ACC_A, NOW + DAY_MS), 'pw-old'),
      ];
      out.staleSessions = [await r.sessions.findByHash('s6'), await r.sessions.findByHash('s7')];
      out.duplicateSession = await refused(() => r.sessions.insert(session('s1', ACC_B, NOW), 'pw-b'));
      await r.sessions.touch('s1', NOW, NOW + 2 * DAY_MS);
      out.session = await r.sessions.findByHash('s1');
      out.removedOthers = await r.sessions.removeOthers(ACC_A, 's1');
      out.removedExpired = await r.sessions.removeExpired(NOW);
      await r.sessions.remove('s4');
      out.sessionsLeft = [
        await r.sessions.findByHash('s1'),
        await r.sessions.findByHash('s2'),
        await r.sessions.findByHash('s4'),
        await r.sessions.findByHash('s5'),
      ];
    });
    expect(rec.duplicateHash).toBe('unique');
    expect(rec.inserted).toEqual([true, true, true, true, true, false, false]);
    expect(rec.staleSessions).toEqual([null, null]);
    expect(rec.duplicateSession).toBe('unique');
    expect((rec.list as { id: string }[]).map((k) => k.id)).toEqual(['key_2', 'key_1', 'key_3']);
    expect(rec.byHash).toMatchObject({ revokedAt: NOW - 100 });
    expect([rec.removedOthers, rec.removedExpired]).toEqual([2, 1]);
    expect((rec.sessionsLeft as unknown[]).map((x) => x !== null)).toEqual([true, false, false, false]);
  });

  it('readings: written through each backend’s writer; latest, history pages, ranges, counts, usage, last_seen', async () => {
    const rec = await both(async (b, out) => {
      const r = b.repos;
      const appends: Promise<number>[] = [];
      // dev_1: one reading a minute for three hours back from NOW, and two at the very same time.
      for (let i = 180; i >= 1; i--) appends.push(b.append(DEV_1, ACC_A, NOW - i * MINUTE_MS, `{"temperature":${20 + (i % 15)},"i":${i}}`));
      appends.push(b.append(DEV_1, undefined, NOW, '{"temperature": 31.5, "note":"same ms, first"}'));
      appends.push(b.append(DEV_1, ACC_A, NOW, '{"temperature":32,"note":"same ms, second"}'));
      // dev_2: 2,500 readings a second apart (several pages of a keyed walk).
      for (let i = 0; i < 2_500; i++) appends.push(b.append(DEV_2, ACC_A, NOW - DAY_MS + i * 1_000, `{"n":${i}}`));
      // A month and more back: several weekly partitions, and weeks past every retention.
      for (const days of [100, 95, 40, 35, 31, 29, 2]) {
        appends.push(b.append(DEV_1, ACC_A, NOW - days * DAY_MS, `{"temperature":10,"days":${days}}`));
        appends.push(b.append(DEV_3, ACC_B, NOW - days * DAY_MS + 1, `{"level":${days}}`));
      }
      appends.push(b.append(DEV_OLD, ACC_B, NOW - 100 * DAY_MS, '{"only":"old"}'));
      appends.push(b.append(DEV_OLD, ACC_B, NOW - 99 * DAY_MS, '{"only":"old, later"}'));
      out.seqs = await Promise.all(appends);

      out.latest = [await r.readings.latest(DEV_1), await r.readings.latest(DEV_2), await r.readings.latest(99)];
      out.history = [
        await r.readings.history(DEV_1, 0, 5),
        await r.readings.history(DEV_1, NOW - 3 * MINUTE_MS, 100),
        await r.readings.history(DEV_2, NOW - DAY_MS + 2_000 * 1_000, 1_000),
        await r.readings.history(DEV_3, 0, 100),
        await r.readings.history(DEV_1, NOW + 1, 10),
      ];
      out.range = [
        await collect(r.readings.iterateRange(DEV_2, 0, NOW)),
        await collect(r.readings.iterateRange(DEV_1, NOW - 40 * DAY_MS, NOW - 30 * DAY_MS)),
        await collect(r.readings.iterateRange(DEV_1, NOW, NOW + 1)),
        await collect(r.readings.iterateRange(DEV_3, NOW, NOW + DAY_MS)),
      ];
      // A start inside a minute: its partial first minute is counted from the readings.
      out.usage = [
        await r.readings.countSinceForAccount(ACC_A, NOW - DAY_MS),
        await r.readings.countSinceForAccount(ACC_A, NOW - 90 * MINUTE_MS + 30_000),
        await r.readings.countSinceForAccount(ACC_B, 0),
      ];
      if (b.name === 'postgres') {
        // The same counts once the batches' appended counts are folded into one row per
        // account and minute.
        expect(await pgRepos.readings.foldUsageCounts()).toBeGreaterThan(0);
        expect(await pgRepos.readings.foldUsageCounts()).toBe(0);
        const counted = await pool.query('SELECT account_seq, minute, n FROM reading_counts ORDER BY 1, 2');
        const stored = await pool.query(
          'SELECT d.account_seq, r.time / 60000 AS minute, count(*)::bigint AS n FROM readings r JOIN devices d ON d.seq = r.device_seq GROUP BY 1, 2 ORDER BY 1, 2',
        );
        expect(counted.rows.length).toBeGreaterThan(200);
        expect(counted.rows).toEqual(stored.rows);
        expect([
          await r.readings.countSinceForAccount(ACC_A, NOW - DAY_MS),
          await r.readings.countSinceForAccount(ACC_A, NOW - 90 * MINUTE_MS + 30_000),
          await r.readings.countSinceForAccount(ACC_B, 0),
        ]).toEqual(out.usage);
      }
      // last_seen: the newest reading's time, on every read of a device but authentication's.
      out.lastSeen = [
        (await r.devices.findById('dev_1'))!.lastSeen,
        (await r.devices.findBySeq(DEV_2))!.lastSeen,
        (await r.devices.listByAccount(ACC_B, { limit: 5, offset: 0 })).map((d) => d.lastSeen),
        (await r.devices.findForAuth('dev_3'))!.lastSeen,
      ];
    });
    expect(new Set(rec.seqs as number[]).size).toBe(2_500 + 182 + 14 + 2);
    expect(rec.latest).toMatchObject([
      { time: NOW, data: '{"temperature":32,"note":"same ms, second"}' },
      { time: NOW - DAY_MS + 2_499_000 },
      null,
    ]);
    expect((rec.range as unknown[][])[0]).toHaveLength(2_500);
    expect(rec.usage).toEqual([2_500 + 182, 91, 9]);
    expect(rec.lastSeen).toEqual([NOW, NOW - DAY_MS + 2_499_000, [NOW - 2 * DAY_MS + 1, NOW - 99 * DAY_MS], null]);
  });

  it('readings: the newest matching reading within a budget of rows, then what is left', async () => {
    const rec = await both(async ({ repos: r }, out) => {
      const hot = (data: string) => (JSON.parse(data) as { temperature?: number }).temperature! >= 34;
      const never = () => false;
      out.found = await r.readings.newestMatchingTime(DEV_1, 0, NOW + 1, hot, 5_000);
      const budget = await r.readings.newestMatchingTime(DEV_2, 0, NOW + 1, never, 1_200);
      out.budget = budget;
      out.rest = await r.readings.newestMatchingTime(DEV_2, 0, budget.before!, never, 1_200);
      out.none = await r.readings.newestMatchingTime(DEV_3, 0, NOW, never, 100);
      out.empty = await r.readings.newestMatchingTime(DEV_3, NOW, NOW + 1, never, 100);
      // The budget ends inside a millisecond of two readings: both are looked at.
      out.sameMs = await r.readings.newestMatchingTime(DEV_1, NOW - MINUTE_MS, NOW + 1, never, 1);
    });
    expect(rec.found).toEqual({ time: NOW - 14 * MINUTE_MS, before: null, scanned: 16 });
    expect(rec.budget).toEqual({ time: null, before: NOW - DAY_MS + 1_300_000, scanned: 1_200 });
    expect(rec.rest).toEqual({ time: null, before: NOW - DAY_MS + 100_000, scanned: 1_200 });
    expect(rec.sameMs).toEqual({ time: null, before: NOW, scanned: 2 });
  });

  it('rollups: marks, dirty hours from late readings through the writer, spans, settling, raw reads, a retention cut', async () => {
    const rec = await both(async (b, out) => {
      const r = b.repos;
      out.initial = [r.rollups.rolledUntil(), r.rollups.lateBefore()];
      await r.rollups.setRolledUntil(NOW - HOUR_MS);
      r.rollups.setLateBefore(NOW - 2 * HOUR_MS); // never before rolledUntil
      out.marks = [r.rollups.rolledUntil(), r.rollups.lateBefore()];
      if (b.name === 'postgres') {
        // The mark is stored: repositories created later (a restart) start from it.
        const reopened = await createPostgresRepositories(pool);
        expect([reopened.rollups.rolledUntil(), reopened.rollups.lateBefore()]).toEqual([NOW - HOUR_MS, NOW - HOUR_MS]);
      }
      // A reading older than lateBefore marks its hour dirty in the batch that stores it.
      await Promise.all([
        b.append(DEV_2, ACC_A, NOW - 3 * HOUR_MS + 123, '{"n":-1}'),
        b.append(DEV_2, ACC_A, NOW + 5, '{"n":-2}'),
        b.append(DEV_1, ACC_A, NOW - 5 * HOUR_MS + 59_000, '{"temperature":21,"late":true}'),
        b.append(DEV_1, ACC_A, NOW - 5 * HOUR_MS + 60_000, '{"temperature":22,"late":true}'),
        b.append(DEV_3, ACC_B, NOW - 35 * DAY_MS + 5, '{"level":-35,"late":true}'),
      ]);
      out.dirty = [await r.rollups.dirtyHours(DEV_1), await r.rollups.dirtyHours(DEV_2), await r.rollups.allDirty()];

      await r.rollups.writeSpan(DEV_1, [{ level: 0, deleteFrom: 0, deleteTo: 0, rows: [[NOW - 2 * HOUR_MS, '{"t":[1,2,3]}']] }]);
      await r.rollups.writeSpan(DEV_1, [
        {
          level: 0,
          deleteFrom: NOW - 3 * HOUR_MS,
          deleteTo: NOW - 2 * HOUR_MS,
          rows: [
            [NOW - 3 * HOUR_MS, '{"t":[0]}'],
            [NOW - 3 * HOUR_MS + MINUTE_MS, '{"t":[1]}'],
            [NOW - 2 * HOUR_MS, '{"t":[4,5,6]}'], // replaces
          ],
        },
        { level: 1, deleteFrom: 0, deleteTo: 0, rows: [[NOW - 3 * HOUR_MS, '{"t":[0,1]}']] },
        { level: 2, deleteFrom: 0, deleteTo: 0, rows: [[NOW - 3 * HOUR_MS, '{"t":[0,1,9]}']] },
      ]);
      await r.rollups.writeSpan(DEV_1, [
        { level: 0, deleteFrom: NOW - 3 * HOUR_MS + 1, deleteTo: NOW - 3 * HOUR_MS + 2 * MINUTE_MS, rows: [] },
      ]);
      out.rows = [
        await r.rollups.rows(DEV_1, 0, 0, NOW),
        await r.rollups.rows(DEV_1, 1, 0, NOW),
        await r.rollups.rows(DEV_1, 2, NOW - 3 * HOUR_MS + 1, NOW),
      ];
      // Settled only while the hour still holds the readings its rollups were computed from.
      const settled = [{ level: 2, deleteFrom: 0, deleteTo: 0, rows: [[NOW - 5 * HOUR_MS, '{"t":[5]}']] as [number, string][] }];
      out.settledStale = await r.rollups.settleHour(DEV_1, NOW - 5 * HOUR_MS, settled, { to: NOW - 4 * HOUR_MS, readings: 1 });
      out.notSettled = [await r.rollups.dirtyHours(DEV_1), await r.rollups.rows(DEV_1, 2, 0, NOW + DAY_MS)];
      out.settledHours = [
        await r.rollups.settleHour(DEV_1, NOW - 5 * HOUR_MS, settled, { to: NOW - 4 * HOUR_MS, readings: 2 }),
        await r.rollups.settleHour(DEV_2, NOW - 3 * HOUR_MS, [], { to: NOW - 2 * HOUR_MS, readings: 1 }),
      ];
      out.settled = [await r.rollups.allDirty(), await r.rollups.rows(DEV_1, 2, 0, NOW + DAY_MS)];
      out.deletedRange = [
        await r.rollups.deleteRange(DEV_1, 0, NOW - 3 * HOUR_MS, NOW - 3 * HOUR_MS + MINUTE_MS),
        await r.rollups.deleteRange(DEV_1, 0, NOW - 3 * HOUR_MS, NOW - 3 * HOUR_MS + MINUTE_MS),
        // What pruning asks of the level kept for ever (keptFrom: -Infinity): nothing.
        await r.rollups.deleteRange(DEV_1, 2, 0, Number.NEGATIVE_INFINITY),
      ];

      const byTime = (a: [number, string], c: [number, string]) => a[0] - c[0] || a[1].localeCompare(c[1]);
      out.raw = [(await r.rollups.raw(DEV_1, NOW - 10 * MINUTE_MS, NOW + 1)).sort(byTime), await r.rollups.raw(DEV_2, NOW + 6, NOW + 7)];
      out.rawFirst = [
        await r.rollups.rawFirst(DEV_1, NOW - 3 * MINUTE_MS, NOW + 1, 3),
        await r.rollups.rawFirst(DEV_2, 0, NOW + DAY_MS, 2),
      ];
      const firstOfNow = (await r.rollups.rawFirst(DEV_1, NOW, NOW + 1, 1))[0]!;
      out.rawAfter = [
        await r.rollups.rawAfter(DEV_1, firstOfNow[0], firstOfNow[1], NOW + 1, 10),
        await r.rollups.rawAfter(DEV_2, NOW - DAY_MS, 0, NOW - DAY_MS + 5_000, 3),
        await r.rollups.rawAfter(DEV_2, NOW - DAY_MS + 1_000, 0, NOW - DAY_MS + 1_000, 3),
      ];
      // A retention step with a cutoff inside an hour: the readings and rollups before it
      // go, the cut hour is dirty, last_seen is archived.
      await r.rollups.writeSpan(DEV_3, [
        {
          level: 2,
          deleteFrom: 0,
          deleteTo: 0,
          rows: [
            [NOW - 50 * DAY_MS, '{"x":1}'],
            [NOW - 20 * DAY_MS, '{"x":2}'],
          ],
        },
      ]);
      const cutoff = NOW - 45 * DAY_MS + 17 * MINUTE_MS;
      out.expired = [
        await r.readings.expireBatch(DEV_3, cutoff, 1, LEVELS),
        await r.readings.expireBatch(DEV_3, cutoff, 1, LEVELS),
        await r.readings.expireBatch(DEV_3, cutoff, 1, LEVELS),
      ];
      out.afterCut = [await r.rollups.rows(DEV_3, 2, 0, NOW), await r.rollups.dirtyHours(DEV_3), await r.readings.history(DEV_3, 0, 100)];
    });
    expect(rec.marks).toEqual([NOW - HOUR_MS, NOW - HOUR_MS]);
    expect(rec.dirty).toEqual([
      [NOW - 5 * HOUR_MS],
      [NOW - 3 * HOUR_MS],
      [
        { deviceSeq: DEV_1, hour: NOW - 5 * HOUR_MS },
        { deviceSeq: DEV_2, hour: NOW - 3 * HOUR_MS },
        { deviceSeq: DEV_3, hour: NOW - 35 * DAY_MS },
      ],
    ]);
    expect(rec.deletedRange).toEqual([1, 0, 0]);
    expect([rec.settledStale, rec.settledHours]).toEqual([false, [true, true]]);
    expect((rec.notSettled as unknown[])[0]).toEqual([NOW - 5 * HOUR_MS]);
    expect((rec.settled as unknown[])[0]).toEqual([{ deviceSeq: DEV_3, hour: NOW - 35 * DAY_MS }]);
    expect(rec.expired).toEqual([1, 1, 0]);
    expect((rec.afterCut as unknown[]).slice(0, 2)).toEqual([[[NOW - 20 * DAY_MS, '{"x":2}']], [NOW - 45 * DAY_MS, NOW - 35 * DAY_MS]]);
  });

  it('alerts: insert, look-ups, pages, recorded outcomes (one failing alone), ending a firing, events', async () => {
    const rec = await both(async ({ repos: r }, out) => {
      const t = NOW - HOUR_MS;
      // A cooldown of 5 s: the second trigger below (9 s later) is past it, as PostgreSQL's claim requires.
      await r.alerts.insert({ id: 'alert_1', accountSeq: ACC_A, deviceSeq: DEV_1, ...alertValues(t, { cooldown: 5 }) });
      await r.alerts.insert({
        id: 'alert_2',
        accountSeq: ACC_A,
        deviceSeq: DEV_1,
        ...alertValues(t, {
          name: 'Silent',
          kind: 'no_data',
          field: '',
          value: 600,
          clearValue: null,
          actions: ['slack'],
          slackUrl: 'https://hooks.slack.com/x',
          notifyResolved: false,
        }),
      });
      await r.alerts.insert({ id: 'alert_3', accountSeq: ACC_A, deviceSeq: DEV_2, ...alertValues(t, { enabled: false }) });
      await r.alerts.insert({ id: 'alert_4', accountSeq: ACC_B, deviceSeq: DEV_3, ...alertValues(t + 1, { kind: 'no_data', value: 60 }) });
      await r.alerts.insert({ id: 'alert_5', accountSeq: ACC_A, deviceSeq: DEV_2, ...alertValues(t + 2) });
      out.byId = await r.alerts.findById('alert_2');
      out.bySeq = await r.alerts.findBySeq(3);
      out.missing = [await r.alerts.findById('alert_x'), await r.alerts.findBySeq(99)];
      out.pages = [await r.alerts.listByAccount(ACC_A, 2, 0), await r.alerts.listByAccount(ACC_A, 2, 2)];
      out.counts = [await r.alerts.count(ACC_A), await r.alerts.countEnabled(ACC_A), await r.alerts.count(ACC_B)];
      out.enabledOfDevice = [await r.alerts.enabledOfDevice(DEV_1), await r.alerts.enabledOfDevice(DEV_2)];
      out.listByDevice = await r.alerts.listByDevice(DEV_1);
      out.watches = (await r.alerts.noDataWatches()).sort((a, c) => a.alert.seq - c.alert.seq);
      await r.alerts.remove(5);
      out.removed = [await r.alerts.findById('alert_5'), await r.alerts.count(ACC_A)];

      const event = (id: string, alertSeq: number, at: number, readingSeq: number | null, deviceId = 'dev_1'): NewAlertEvent => ({
        id,
        alertSeq,
        deviceId,
        conditionValue: 33.5,
        severity: 'warning',
        triggeredAt: at,
        readingSeq,
        deliveries: [delivery('email', at), delivery('webhook', at)],
      });
      out.triggered = outcomes(
        await r.alerts.recordOutcomes([
          { type: 'triggered', alertSeq: 1, event: event('evt_1', 1, t + 1_000, 7) },
          { type: 'triggered', alertSeq: 2, event: event('evt_2', 2, t + 2_000, null) },
          // Nothing open to resolve.
          { type: 'resolved', alertSeq: 3, at: t + 4_000, notices: [] },
        ]),
      );
      out.afterTrigger = [await r.alerts.findBySeq(1), await r.alerts.findBySeq(2), await r.alerts.findBySeq(3)];
      out.firingNoData = (await r.alerts.firingNoDataDeviceIds(ACC_A)).sort();
      await r.alerts.acknowledgeEvent(1, t + 5_000);
      await r.alerts.acknowledgeEvent(1, t + 6_000); // already acknowledged: stays
      await r.alerts.setDeliveries(1, [
        delivery('email', t + 5_000, 'sent'),
        { ...delivery('webhook', t + 5_000, 'failed'), detail: 'HTTP 500', attempts: 3 },
      ]);
      out.acknowledged = await r.alerts.findEventById('evt_1');
      out.resolved = outcomes(
        await r.alerts.recordOutcomes([{ type: 'resolved', alertSeq: 1, at: t + 7_000, notices: [delivery('email', t + 7_000)] }]),
      );
      await r.alerts.setResolutionDeliveries(1, [delivery('email', t + 8_000, 'sent')]);
      out.afterResolve = [await r.alerts.findEventById('evt_1'), await r.alerts.findBySeq(1)];

      // A firing no_data alert whose condition changes goes back to ok, its event resolved without notices.
      await r.alerts.update(
        2,
        alertValues(t + 9_000, {
          name: 'Silent',
          kind: 'no_data',
          field: '',
          value: 900,
          clearValue: null,
          actions: ['slack'],
          slackUrl: 'https://hooks.slack.com/y',
        }),
        true,
      );
      out.changedCondition = [await r.alerts.findBySeq(2), await r.alerts.findEventById('evt_2')];
      // Fires again, then is disabled: the firing ends; enabling it later moves enabled_at.
      await r.alerts.recordOutcomes([{ type: 'triggered', alertSeq: 1, event: event('evt_3', 1, t + 10_000, 9) }]);
      await r.alerts.setEnabled(1, false, t + 11_000);
      out.disabled = [await r.alerts.findBySeq(1), await r.alerts.findEventById('evt_3')];
      // A trigger evaluated while the alert was still enabled (another node's cached list, a
      // reading evaluated just before the CLI's commit) and recorded after it was disabled
      // records nothing: the alert stays disabled and ok.
      out.triggeredWhileDisabled = outcomes(
        await r.alerts.recordOutcomes([{ type: 'triggered', alertSeq: 1, event: event('evt_off', 1, t + 30_000, 10) }]),
      );
      out.afterDisabledTrigger = [await r.alerts.findBySeq(1), await r.alerts.findEventById('evt_off')];
      await r.alerts.setEnabled(1, true, t + 12_000);
      await r.alerts.update(3, alertValues(t + 13_000, { enabled: true, severity: 'critical' }), false);
      out.enabled = [await r.alerts.findBySeq(1), await r.alerts.findBySeq(3), await r.alerts.countEnabled(ACC_A)];
      // A trigger evaluated against a condition changed since (alert 3 is `> 30.5` now) records nothing either.
      out.triggeredOnOldCondition = outcomes(
        await r.alerts.recordOutcomes([
          {
            type: 'triggered',
            alertSeq: 3,
            condition: { kind: 'threshold', field: 'temperature', operator: '>', value: 25 },
            event: event('evt_old', 3, t + 30_000, 11, 'dev_2'),
          },
        ]),
      );
      out.afterOldConditionTrigger = [await r.alerts.findBySeq(3), await r.alerts.findEventById('evt_old')];
      // A firing alert updated without ending its firing stays firing.
      await r.alerts.recordOutcomes([{ type: 'triggered', alertSeq: 4, event: event('evt_4', 4, t + 14_000, null, 'dev_3') }]);
      await r.alerts.update(4, alertValues(t + 15_000, { kind: 'no_data', value: 60, name: 'renamed' }), false);
      out.stillFiring = [await r.alerts.findBySeq(4), await r.alerts.findEventById('evt_4'), await r.alerts.firingNoDataDeviceIds(ACC_B)];
      out.history = [await r.alerts.history(1, 10), await r.alerts.history(1, 1), await r.alerts.history(4, 10)];
      // A suspended account's and a paused device's no_data alerts are not watched.
      await r.accounts.setStatus(ACC_B, 'suspended', t + 18_000);
      await r.devices.setStatus(DEV_1, 'paused', t + 18_000);
      out.watchesNone = await r.alerts.noDataWatches();
      await r.accounts.setStatus(ACC_B, 'active', t + 19_000);
      await r.devices.setStatus(DEV_1, 'active', t + 19_000);
      // An outcome whose alert is gone is refused by the foreign key and rolled back alone.
      // Last event of the test: PostgreSQL's identity has used a number for the refused row.
      out.oneFails = outcomes(
        await r.alerts.recordOutcomes([
          // A firing no_data alert fires again only once resolved (PostgreSQL's claim).
          { type: 'resolved', alertSeq: 4, at: t + 20_000, notices: [] },
          { type: 'triggered', alertSeq: 4, event: event('evt_5', 4, t + 21_000, null, 'dev_3') },
          { type: 'triggered', alertSeq: 99, event: event('evt_x', 99, t + 21_000, null) },
          { type: 'resolved', alertSeq: 4, at: t + 22_000, notices: [] },
        ]),
      );
      out.afterOneFails = [await r.alerts.findBySeq(4), await r.alerts.history(4, 10), await r.alerts.findEventById('evt_x')];
    });
    expect(rec.removed).toEqual([null, 3]);
    expect(rec.triggered).toMatchObject([
      { event: { id: 'evt_1', seq: 1 } },
      { event: { id: 'evt_2', seq: 2 } },
      { event: null, failed: false },
    ]);
    expect(rec.oneFails).toMatchObject([
      { event: { id: 'evt_4', resolvedAt: NOW - HOUR_MS + 20_000 }, failed: false },
      { event: { id: 'evt_5' }, failed: false },
      { event: null, failed: true },
      { event: { id: 'evt_5', resolvedAt: NOW - HOUR_MS + 22_000 }, failed: false },
    ]);
    expect(rec.changedCondition).toMatchObject([
      { state: 'ok', value: 900 },
      { resolvedAt: NOW - HOUR_MS + 9_000, resolutionDeliveries: [] },
    ]);
    expect(rec.disabled).toMatchObject([{ state: 'ok', enabled: false }, { resolvedAt: NOW - HOUR_MS + 11_000 }]);
    expect(rec.triggeredWhileDisabled).toEqual([{ event: null, failed: false }]);
    expect(rec.triggeredOnOldCondition).toEqual([{ event: null, failed: false }]);
    expect(rec.afterOldConditionTrigger).toMatchObject([{ state: 'ok', lastTriggered: null }, null]);
    expect(rec.afterDisabledTrigger).toMatchObject([{ state: 'ok', enabled: false, lastTriggered: NOW - HOUR_MS + 10_000 }, null]);
    expect(rec.enabled).toMatchObject([{ enabled: true, enabledAt: NOW - HOUR_MS + 12_000 }, { enabledAt: NOW - HOUR_MS + 13_000 }, 3]);
    expect(rec.stillFiring).toMatchObject([{ state: 'firing', name: 'renamed' }, { resolvedAt: null }, ['dev_3']]);
    expect(rec.watchesNone).toEqual([]);
  });

  it('snapshots: the daily quota, look-ups, expiry by each account’s retention, removal', async () => {
    const rec = await both(async ({ repos: r }, out) => {
      const day = NOW - (NOW % DAY_MS);
      const snap = (id: string, deviceSeq: number, now: number): NewSnapshot => ({
        id,
        deviceSeq,
        contentType: 'image/jpeg',
        size: 1_234,
        now,
      });
      const any = Number.MAX_SAFE_INTEGER;
      await r.snapshots.insertWithinQuota(snap('snap_old', DEV_1, NOW - 8 * DAY_MS), 0, any);
      await r.snapshots.insertWithinQuota(snap('snap_b_old', DEV_3, NOW - 8 * DAY_MS + 1), 0, any);
      await r.snapshots.insertWithinQuota(snap('snap_y', DEV_1, day - 1), 0, any);
      out.quota = [
        await r.snapshots.insertWithinQuota(snap('snap_1', DEV_1, NOW), day, 2),
        await r.snapshots.insertWithinQuota(snap('snap_2', DEV_1, NOW + 1), day, 2),
        await r.snapshots.insertWithinQuota(snap('snap_3', DEV_1, NOW + 2), day, 2),
        await r.snapshots.insertWithinQuota(snap('snap_4', DEV_2, NOW + 3), day, 2),
      ];
      // Last inserts of the table in this test: PostgreSQL's identity uses a number even for a refused row.
      out.badType = await refused(() =>
        r.snapshots.insertWithinQuota({ ...snap('snap_gif', DEV_1, NOW), contentType: 'image/gif' }, 0, any),
      );
      out.unknownDevice = await refused(() => r.snapshots.insertWithinQuota(snap('snap_x', 99, NOW), 0, any));
      out.countSince = [
        await r.snapshots.countSince(DEV_1, day),
        await r.snapshots.countSince(DEV_1, 0),
        await r.snapshots.countSince(DEV_2, day),
      ];
      out.byId = [await r.snapshots.findById('snap_1'), await r.snapshots.findById('snap_3')];
      out.expired = [await r.snapshots.expiredBatch(NOW, 10), await r.snapshots.expiredBatch(NOW + 30 * DAY_MS, 3)];
      out.removed = await r.snapshots.removeMany([1, 2, 999]);
      out.removedNone = await r.snapshots.removeMany([]);
      out.left = await r.snapshots.expiredBatch(NOW + 30 * DAY_MS, 10);
      out.all = [await r.snapshots.countSince(DEV_1, 0), await r.snapshots.countSince(DEV_2, 0), await r.snapshots.countSince(DEV_3, 0)];
    });
    expect(rec.quota).toEqual([true, true, false, true]);
    expect(rec.countSince).toEqual([2, 4, 1]);
    expect(rec.badType).toBe('check');
    expect(rec.unknownDevice).toBe('foreign key');
    expect((rec.expired as { id: string }[][])[0]!.map((s) => s.id)).toEqual(['snap_old', 'snap_b_old']);
    expect(rec.removed).toBe(2);
  });

  it('retention: whole weeks dropped on PostgreSQL, the rest by statement; counts, last_seen and rollups follow', async () => {
    const rec = await both(async (b, out) => {
      const r = b.repos;
      if (b.name === 'postgres') {
        // While a query holds the readings table, a drop gives up after its lock timeout
        // (ingest queued behind it would stall) and changes nothing: the next pass drops.
        const reader = await pool.connect();
        await reader.query('BEGIN');
        await reader.query('SELECT count(*) FROM readings');
        const started = performance.now();
        const held = pgRepos.readings.dropExpiredPartitions(NOW, LEVELS);
        // Ingest meanwhile waits at most that long.
        const appended = await b.append(DEV_2, ACC_A, NOW + 10, '{"n":-3}').then(() => performance.now() - started);
        expect(await held).toEqual([]);
        expect(performance.now() - started).toBeLessThan(5_000);
        expect(appended).toBeLessThan(5_000);
        await reader.query('ROLLBACK');
        reader.release();
        const before = await partitionCount();
        const dropped = await pgRepos.readings.dropExpiredPartitions(NOW, LEVELS);
        // Only weeks that end before the longest retention (90 days): those 95 and more days back.
        expect(dropped.length).toBeGreaterThanOrEqual(2);
        for (const name of dropped)
          expect(Date.parse(`${name.slice(9, 13)}-${name.slice(13, 15)}-${name.slice(15)}T00:00Z`)).toBeLessThanOrEqual(NOW - 97 * DAY_MS);
        expect(await partitionCount()).toBe(before - dropped.length);
        expect(await collect(r.readings.iterateRange(DEV_OLD, 0, NOW))).toEqual([]);
        expect(await collect(r.readings.iterateRange(DEV_1, 0, NOW - 90 * DAY_MS))).toEqual([]);
        // Nothing left to drop.
        expect(await pgRepos.readings.dropExpiredPartitions(NOW, LEVELS)).toEqual([]);
      } else {
        await b.append(DEV_2, ACC_A, NOW + 10, '{"n":-3}');
      }
      // The domain's pass: every device, in batches, up to its account's retention.
      const retention = new Map((await r.accounts.list()).map((a) => [a.seq, a.limits.retentionDays]));
      for (const { seq, accountSeq } of await r.devices.allSeqs()) {
        const cutoff = NOW - retention.get(accountSeq)! * DAY_MS;
        while ((await r.readings.expireBatch(seq, cutoff, 2, LEVELS)) > 0);
      }
      out.left = [
        await collect(r.readings.iterateRange(DEV_1, 0, NOW - HOUR_MS * 6)),
        await collect(r.readings.iterateRange(DEV_3, 0, NOW + DAY_MS)),
        await collect(r.readings.iterateRange(DEV_OLD, 0, NOW + DAY_MS)),
      ];
      out.usage = [await r.readings.countSinceForAccount(ACC_A, 0), await r.readings.countSinceForAccount(ACC_B, 0)];
      out.lastSeen = [(await r.devices.findById('dev_old'))!.lastSeen, (await r.devices.findById('dev_3'))!.lastSeen];
      out.rollups = [await r.rollups.rows(DEV_3, 2, 0, NOW + DAY_MS), await r.rollups.allDirty()];
    });
    // dev_1 (30 days) keeps 29 and 2 days back; dev_3 (90 days) keeps 40 days back and newer.
    expect((rec.left as { time: number }[][]).map((l) => l.map((x) => Math.round((NOW - x.time) / DAY_MS)))).toEqual([
      [29, 2],
      [40, 35, 35, 31, 29, 2],
      [],
    ]);
    expect(rec.usage).toEqual([2_500 + 3 + 182 + 2 + 2, 6]);
    expect(rec.lastSeen).toEqual([NOW - 99 * DAY_MS, NOW - 2 * DAY_MS + 1]);
  });

  it('device deletion: readings in batches, then the row with its rollups; alerts, events and snapshots cascade', async () => {
    const rec = await both(async (b, out) => {
      const r = b.repos;
      out.before = [
        await r.readings.countSinceForAccount(ACC_A, 0),
        (await r.alerts.listByDevice(DEV_1)).length,
        await r.snapshots.countSince(DEV_1, 0),
        (await r.rollups.rows(DEV_1, 0, 0, NOW + DAY_MS)).length,
        (await r.rollups.rows(DEV_1, 2, 0, NOW + DAY_MS)).length,
      ];
      const batches: number[] = [];
      for (;;) {
        const n = await r.readings.deleteBatchOfDevice(DEV_1, 50);
        batches.push(n);
        if (n === 0) break;
      }
      out.batches = batches;
      await r.devices.removeWithRollups(DEV_1);
      out.after = [
        await r.devices.findById('dev_1'),
        await r.devices.findForAuth('dev_1'),
        await r.alerts.findById('alert_1'),
        await r.alerts.findEventById('evt_1'),
        await r.alerts.listByDevice(DEV_1),
        await r.snapshots.findById('snap_1'),
        await r.rollups.rows(DEV_1, 0, 0, NOW + DAY_MS),
        await r.rollups.rows(DEV_1, 2, 0, NOW + DAY_MS),
        await r.rollups.dirtyHours(DEV_1),
        await r.readings.latest(DEV_1),
        await r.readings.countSinceForAccount(ACC_A, 0),
        await r.devices.count(ACC_A),
        await r.alerts.count(ACC_A),
        await r.devices.allSeqs(),
      ];
      if (b.name === 'postgres') {
        // Folding the deletions' negative counts leaves no row for a minute without readings.
        await pgRepos.readings.foldUsageCounts();
        expect((await pool.query('SELECT count(*)::int AS n FROM reading_counts WHERE n <= 0')).rows[0].n).toBe(0);
        expect(await r.readings.countSinceForAccount(ACC_A, 0)).toBe(2_503);
      }
      // The place is free again.
      out.recreated = await r.devices.insertWithinLimit(device('dev_new', ACC_A, NOW), 2);
      out.limitAgain = await r.devices.insertWithinLimit(device('dev_more', ACC_A, NOW), 2);
    });
    expect(rec.before).toEqual([2_500 + 3 + 182 + 2 + 2, 2, 3, 1, 2]);
    expect(rec.batches).toEqual([50, 50, 50, 36, 0]);
    expect((rec.after as unknown[]).slice(0, 13)).toEqual([null, null, null, null, [], null, [], [], [], null, 2_503, 1, 1]);
    expect([rec.recreated, rec.limitAgain]).toEqual([true, false]);
  });

  it('rollups: clearing everything', async () => {
    await both(async ({ repos: r }, out) => {
      await r.rollups.clear();
      out.after = [
        r.rollups.rolledUntil(),
        r.rollups.lateBefore(),
        await r.rollups.allDirty(),
        await r.rollups.rows(DEV_3, 2, 0, NOW + DAY_MS),
      ];
    });
  });
  // Last: it leaves rows, and identity numbers used, that SQLite does not have.
  it('PostgreSQL: concurrent creations and uploads cannot pass the device limit or the snapshot quota', async () => {
    const r = pgRepos;
    await r.accounts.insert({
      id: 'acc_race',
      email: 'race@example.com',
      name: 'Race',
      passwordHash: null,
      plan: 'starter',
      limits: limits(3, 30),
      webhookSecret: 'whsec_r',
      now: NOW,
    });
    const account = (await r.accounts.findById('acc_race'))!;
    const created = await Promise.all(
      Array.from({ length: 8 }, (_, i) => r.devices.insertWithinLimit(device(`dev_race_${i}`, account.seq, NOW), 3)),
    );
    expect(created.filter(Boolean)).toHaveLength(3);
    expect(await r.devices.count(account.seq)).toBe(3);
    const racer = (await r.devices.listByAccount(account.seq, { limit: 1, offset: 0 }))[0]!;
    const uploaded = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        r.snapshots.insertWithinQuota({ id: `snap_race_${i}`, deviceSeq: racer.seq, contentType: 'image/png', size: 1, now: NOW }, 0, 2),
      ),
    );
    expect(uploaded.filter(Boolean)).toHaveLength(2);
    expect(await r.snapshots.countSince(racer.seq, 0)).toBe(2);
  });

  it('PostgreSQL: a late reading committed while its hour is being settled marks the hour again', async () => {
    // What rollups.settleHour relies on: it deletes the hour's mark first, and the writer's
    // insert of the same mark waits for that transaction, then inserts it anew.
    pgRepos.rollups.setLateBefore(NOW);
    const hour = NOW - 7 * HOUR_MS;
    await pool.query('INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2)', [DEV_2, hour]);
    const settling = await pool.connect();
    try {
      await settling.query('BEGIN');
      await settling.query('DELETE FROM rollup_dirty WHERE device_seq = $1 AND hour = $2', [DEV_2, hour]);
      let committed = false;
      const appended = backends[1]!.append(DEV_2, ACC_A, hour + 5, '{"n":"late"}').then(() => {
        committed = true;
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(committed).toBe(false);
      await settling.query('COMMIT');
      await appended;
    } finally {
      settling.release();
    }
    expect(await pgRepos.rollups.dirtyHours(DEV_2)).toEqual([hour]);
  });
});
