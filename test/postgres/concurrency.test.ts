/**
 * Transactions of several connections (nodes, a node's jobs, an admin command) interleaved on
 * purpose: each test holds one side at a chosen point with a row or advisory lock, waits in
 * pg_stat_activity until the other side waits on it, then lets it go, so the interleaving is
 * the same on every run.
 */
import type { Pool, PoolClient } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountService } from '../../src/domain/accounts.js';
import { alertEvaluator } from '../../src/domain/alerts/evaluator.js';
import { DomainEvents } from '../../src/domain/events.js';
import { verifyPassword } from '../../src/domain/passwords.js';
import { sessionService } from '../../src/domain/sessions.js';
import { createNotifier } from '../../src/notify/index.js';
import { postgresRateCounts } from '../../src/storage/postgres/cluster.js';
import { connectPostgres, poolNode } from '../../src/storage/postgres/connect.js';
import { createPostgresRepositories, type PostgresRepositories } from '../../src/storage/postgres/index.js';
import { NODE_LOCK_CLASS } from '../../src/storage/postgres/leadership.js';
import { migratePostgres, readingPartitions } from '../../src/storage/postgres/migrations.js';
import { PostgresReadingWriter } from '../../src/storage/postgres/readingWriter.js';
import type { AlertOutcome, Awaitable, RecordedOutcome } from '../../src/storage/repositories.js';
import { systemClock } from '../../src/time.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';

describe('PostgreSQL transactions that run at the same time', () => {
  let pg: PostgresServer;
  let url: string;
  let pool: Pool;
  let repos: PostgresRepositories;
  let accountNumber = 0;

  const newAccount = async (): Promise<number> => {
    accountNumber++;
    return (
      await pool.query(
        `INSERT INTO accounts (id, email, plan, rate_per_minute, rate_per_day, device_limit, retention_days, snapshots_per_day,
           snapshot_retention_days, field_limit, created_at, updated_at)
         VALUES ($1, $2, 'starter', 10, 1000, 10, 30, 10, 30, 10, 0, 0) RETURNING seq`,
        [`acc_${accountNumber}`, `a${accountNumber}@example.com`],
      )
    ).rows[0].seq;
  };

  const newDevice = async (account: number, id: string): Promise<number> =>
    (
      await pool.query(
        `INSERT INTO devices (id, account_seq, name, type, schema_mode, token_hash, created_at, updated_at)
         VALUES ($1, $2, 'd', 't', 'flexible', $1, 0, 0) RETURNING seq`,
        [id, account],
      )
    ).rows[0].seq;

  /** An enabled threshold alert, temperature > 30. */
  const newAlert = async (account: number, deviceSeq: number, id: string, cooldown: number): Promise<number> =>
    (
      await pool.query(
        `INSERT INTO alerts (id, account_seq, device_seq, name, field, operator, value, severity, cooldown, enabled_at, created_at, updated_at)
         VALUES ($1, $2, $3, 'hot', 'temperature', '>', 30, 'warning', $4, 0, 0, 0) RETURNING seq`,
        [id, account, deviceSeq, cooldown],
      )
    ).rows[0].seq;

  const waitingForLocks = async () =>
    (await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'")).rows[0]!.n;

  /** Waits until `n` statements of other connections wait for a lock (a row's, a transaction's, an advisory one). */
  const lockWaiters = async (n: number): Promise<void> => {
    for (let i = 0; i < 500 && (await waitingForLocks()) < n; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await waitingForLocks()).toBe(n);
  };

  /** Waits until `n` statements wait for a lock, or `work` has settled without waiting for one. */
  const lockWaitersOrDone = async (n: number, work: Promise<unknown>): Promise<void> => {
    let settled = false;
    work.then(
      () => (settled = true),
      () => (settled = true),
    );
    for (let i = 0; i < 500 && !settled && (await waitingForLocks()) < n; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    expect(settled || (await waitingForLocks()) === n).toBe(true);
  };

  /**
   * Makes every INSERT (or DELETE) on `table` wait, row by row, once the statement has read and
   * locked the row (`after`: once the row is written, in the table and its indexes), until
   * release() is called; returns release, which also drops the trigger (after the held
   * statements went on: dropping it waits for them).
   */
  const holdRows = async (
    op: 'INSERT' | 'DELETE',
    table: string,
    when: 'BEFORE' | 'AFTER' = 'BEFORE',
    db: Pool = pool,
  ): Promise<() => Promise<void>> => {
    const holder = await db.connect();
    await holder.query('SELECT pg_advisory_lock(4343)');
    await db.query(`
      CREATE FUNCTION hold_rows() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_advisory_xact_lock_shared(4343); RETURN ${op === 'INSERT' ? 'NEW' : 'OLD'}; END $$;
      CREATE TRIGGER hold_rows ${when} ${op} ON ${table} FOR EACH ROW EXECUTE FUNCTION hold_rows();`);
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      await holder.query('SELECT pg_advisory_unlock_all()');
      holder.release();
      await db.query(`DROP TRIGGER hold_rows ON ${table}; DROP FUNCTION hold_rows()`);
    };
  };

  /**
   * Holds the rows `hold` names (holdRows), runs `first` until it waits there, then `second`
   * until it waits too (or has ended), then lets both go on: how `first` and each of
   * `second`'s operations ended.
   */
  const crossed = async (
    hold: Parameters<typeof holdRows>,
    first: () => Awaitable<unknown>,
    second: () => Awaitable<unknown>[],
  ): Promise<PromiseSettledResult<unknown>[]> => {
    const release = await holdRows(...hold);
    try {
      const firstDone = Promise.allSettled([Promise.resolve().then(first)]);
      await lockWaiters(1);
      const secondDone = Promise.allSettled(second());
      await lockWaitersOrDone(2, secondDone);
      await release();
      return [...(await firstDone), ...(await secondDone)];
    } finally {
      await release();
    }
  };

  /** How many rollups, dirty marks, readings and device rows a device has left. */
  const leftOf = async (deviceSeq: number) =>
    (
      await pool.query(
        `SELECT (SELECT count(*)::int FROM rollups WHERE device_seq = $1) AS rollups, (SELECT count(*)::int FROM rollup_dirty WHERE device_seq = $1) AS marks,
           (SELECT count(*)::int FROM readings WHERE device_seq = $1) AS readings, (SELECT count(*)::int FROM devices WHERE seq = $1) AS devices`,
        [deviceSeq],
      )
    ).rows[0];

  /**
   * A device with two readings in `hour` (its second and third minutes), a minute rollup of
   * each and, with `hourRollup`, the hour's own; the hour marked dirty.
   */
  const deviceWithMarkedHour = async (idPrefix: string, hour: number, hourRollup: boolean): Promise<number> => {
    const account = await newAccount();
    const deviceSeq = await newDevice(account, `${idPrefix}_${account}`);
    await readingPartitions(pool, [hour]);
    await pool.query(
      `INSERT INTO readings (device_seq, time, seq, data) VALUES ($1, $2, $3, '{"t":1}'), ($1, $2 + 60000, $3 + 1, '{"t":2}')`,
      [deviceSeq, hour + 60_000, deviceSeq * 1_000],
    );
    await pool.query(
      `INSERT INTO rollups (device_seq, level, bucket, stats) VALUES ($1, 0, $2, '{"t":1}'), ($1, 0, $2 + 60000, '{"t":2}')`,
      [deviceSeq, hour + 60_000],
    );
    if (hourRollup)
      await pool.query(`INSERT INTO rollups (device_seq, level, bucket, stats) VALUES ($1, 2, $2, '{"t":[2,1,2,3]}')`, [deviceSeq, hour]);
    await pool.query('INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2)', [deviceSeq, hour]);
    return deviceSeq;
  };

  const begin = async (): Promise<PoolClient> => {
    const client = await pool.connect();
    await client.query('BEGIN');
    return client;
  };

  beforeAll(async () => {
    pg = await startPostgres();
    url = await createDatabase(pg);
    pool = await connectPostgres(url, { max: 8 });
    await migratePostgres(pool);
    repos = await createPostgresRepositories(pool);
  });
  afterAll(async () => {
    await pool?.end();
    await pg?.stop();
  });

  describe('shared rate limit counts', () => {
    const DAY = 20_000;
    const MINUTE = DAY * 1_440 + 600;

    it('counts a request of the ending minute and one of the next minute at once, neither failing', async () => {
      const account = await newAccount();
      const counts = postgresRateCounts(pool);
      expect((await counts.consume(account, MINUTE, DAY, 2, 100)).allowed).toBe(true);
      // A third request holds the day's row, as any request of the account does while it counts.
      const third = await begin();
      try {
        await third.query("SELECT 1 FROM rate_limit_counts WHERE account_seq = $1 AND window_kind = 'd' FOR UPDATE", [account]);
        // A request of the ending minute (sent just before it ended, on another node) waits for the day's row;
        const ending = counts.consume(account, MINUTE, DAY, 2, 100);
        await lockWaiters(1);
        // the first request of the next minute, which removes the ended minute's row, too.
        const next = counts.consume(account, MINUTE + 1, DAY, 2, 100);
        await lockWaiters(2);
        await third.query('COMMIT');
        const [a, b] = await Promise.allSettled([ending, next]);
        expect(a).toMatchObject({ status: 'fulfilled', value: { allowed: true, minuteCount: 2, dayCount: 2 } });
        expect(b).toMatchObject({ status: 'fulfilled', value: { allowed: true, minuteCount: 1, dayCount: 3 } });
      } finally {
        third.release();
      }
    });

    it('refuses a request of a full minute that reaches the database after the next minute began', async () => {
      const account = await newAccount();
      const counts = postgresRateCounts(pool);
      for (let i = 0; i < 2; i++) expect((await counts.consume(account, MINUTE, DAY, 2, 100)).allowed).toBe(true);
      // Node A's first request of the next minute commits first; node B's request, stamped in
      // the full minute a moment before, reaches the database after it.
      expect((await counts.consume(account, MINUTE + 1, DAY, 2, 100)).allowed).toBe(true);
      expect(await counts.consume(account, MINUTE, DAY, 2, 100)).toEqual({ allowed: false, minuteCount: 2, dayCount: 3 });
    });
  });

  describe('dashboard sessions', () => {
    it('signs out a sign-in with the old password that completes while the password is reset', async () => {
      const events = new DomainEvents();
      const accounts = accountService(repos, events, systemClock);
      const sessions = sessionService(repos, accounts, systemClock);
      const account = await accounts.create({ email: 'reset@example.com', password: 'old password' });
      const release = await holdRows('INSERT', 'sessions');
      let signIn: Promise<{ sessionId: string }>;
      let reset: Promise<unknown>;
      try {
        // The old password is checked, and the session is about to go in,
        signIn = sessions.signIn(account.email, 'old password', '192.0.2.1');
        await lockWaiters(1);
        // when an admin resets the password (accounts set-password), which signs out every session.
        reset = sessions.resetPassword(account.id, 'new password');
        await lockWaitersOrDone(2, reset);
      } finally {
        await release();
      }
      const [signedIn] = await Promise.allSettled([signIn, reset]);
      await reset;
      // Refused, or signed in and then signed out: no session of the old password outlives the reset.
      if (signedIn.status === 'fulfilled') expect(await sessions.resolve(signedIn.value.sessionId)).toBeNull();
      expect((await pool.query('SELECT count(*)::int AS n FROM sessions WHERE account_seq = $1', [account.seq])).rows[0].n).toBe(0);
    });
  });

  describe('the first-run setup', () => {
    it('creates one first account when the setup link is used twice at once', async () => {
      // A database of its own: the setup works only while there is no account.
      const setupPool = await connectPostgres(await createDatabase(pg), { max: 6 });
      await migratePostgres(setupPool);
      const setupRepos = await createPostgresRepositories(setupPool);
      const events = new DomainEvents();
      const sessions = sessionService(setupRepos, accountService(setupRepos, events, systemClock), systemClock);
      const holder = await setupPool.connect();
      await holder.query('SELECT pg_advisory_lock(4747)');
      await setupPool.query(`
        CREATE FUNCTION hold_account() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_advisory_xact_lock_shared(4747); RETURN NEW; END $$;
        CREATE TRIGGER hold_account BEFORE INSERT ON accounts FOR EACH ROW EXECUTE FUNCTION hold_account();`);
      const waiting = async () =>
        (await setupPool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'")).rows[0]!.n;
      let results: PromiseSettledResult<unknown>[];
      try {
        // The form sent twice (a double click, two tabs, through two nodes): the first
        // account is about to go in when the second request gets there.
        const first = sessions.completeSetup('setup-token', 'setup-token', 'first@example.com', 'password one');
        for (let i = 0; i < 500 && (await waiting()) < 1; i++) await new Promise((resolve) => setTimeout(resolve, 10));
        const second = sessions.completeSetup('setup-token', 'setup-token', 'second@example.com', 'password two');
        for (let i = 0; i < 500 && (await waiting()) < 2; i++) await new Promise((resolve) => setTimeout(resolve, 10));
        expect(await waiting()).toBe(2);
        await holder.query('SELECT pg_advisory_unlock(4747)');
        results = await Promise.allSettled([first, second]);
      } finally {
        await holder.query('SELECT pg_advisory_unlock_all()');
        holder.release();
        await setupPool.query('DROP TRIGGER hold_account ON accounts; DROP FUNCTION hold_account()');
      }
      try {
        expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
        expect(results[1]).toMatchObject({ reason: { status: 401 } });
        expect((await setupPool.query('SELECT email FROM accounts')).rows).toEqual([{ email: 'first@example.com' }]);
      } finally {
        await setupPool.end();
      }
    });
  });

  describe('accounts', () => {
    it('creates one account and refuses the other as a conflict when two creations of one email cross', async () => {
      const events = new DomainEvents();
      const accounts = accountService(repos, events, systemClock);
      // The first creation's row is in (its unique index too), not committed yet,
      const release = await holdRows('INSERT', 'accounts', 'AFTER');
      let results: PromiseSettledResult<unknown>[];
      try {
        const first = accounts.create({ email: 'twice@example.com', password: 'password one' });
        await lockWaiters(1);
        // when a second `accounts create` of the same address has checked that none exists and
        // inserts: it waits for the first to commit.
        const second = accounts.create({ email: 'Twice@example.com', password: 'password two' });
        // Settled from here: the second fails while release() waits for the trigger to go.
        const both = Promise.allSettled([first, second]);
        await lockWaiters(2);
        await release();
        results = await both;
      } finally {
        await release();
      }
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
      expect(results[1]).toMatchObject({ reason: { status: 409, message: 'an account with email Twice@example.com exists' } });
      expect((await pool.query("SELECT email FROM accounts WHERE lower(email) = 'twice@example.com'")).rows).toEqual([
        { email: 'twice@example.com' },
      ]);
    });
  });

  describe('the first-run setup beside an admin command', () => {
    it('refuses the setup link when `accounts create` of the same email commits while the setup inserts', async () => {
      // A database of its own: the setup works only while there is no account.
      const setupPool = await connectPostgres(await createDatabase(pg), { max: 6 });
      await migratePostgres(setupPool);
      const setupRepos = await createPostgresRepositories(setupPool);
      const events = new DomainEvents();
      const accounts = accountService(setupRepos, events, systemClock);
      const sessions = sessionService(setupRepos, accounts, systemClock);
      // The admin's account is in (its unique index too), not committed yet,
      const release = await holdRows('INSERT', 'accounts', 'AFTER', setupPool);
      let results: PromiseSettledResult<unknown>[];
      try {
        const created = accounts.create({ email: 'owner@example.com' });
        await lockWaiters(1);
        // when the setup form is sent with the same address: no account is visible to it yet.
        const setup = sessions.completeSetup('setup-token', 'setup-token', 'Owner@example.com', 'password one');
        const both = Promise.allSettled([created, setup]);
        await lockWaiters(2);
        await release();
        results = await both;
      } finally {
        await release();
      }
      try {
        expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
        expect(results[1]).toMatchObject({ reason: { status: 401, message: 'this setup link is no longer valid' } });
        expect((await setupPool.query('SELECT email FROM accounts')).rows).toEqual([{ email: 'owner@example.com' }]);
      } finally {
        await setupPool.end();
      }
    });
  });

  describe('passwords', () => {
    it('keeps an admin’s reset made while a change with the old password was on its way', async () => {
      const events = new DomainEvents();
      const accounts = accountService(repos, events, systemClock);
      const sessions = sessionService(repos, accounts, systemClock);
      const account = await accounts.create({ email: 'change@example.com', password: 'old password' });
      const { sessionId } = await sessions.signIn(account.email, 'old password', '192.0.2.1');
      const resolved = (await sessions.resolve(sessionId))!;
      // The admin command is another process: its own pool, its own node name.
      const adminPool = await connectPostgres(url, { max: 2 });
      const adminRepos = await createPostgresRepositories(adminPool);
      const adminSessions = sessionService(adminRepos, accountService(adminRepos, events, systemClock), systemClock);
      // The dashboard's change has checked the current password; its UPDATE waits before it
      // touches the row (a statement trigger, for this pool's connections only).
      const holder = await pool.connect();
      await holder.query('SELECT pg_advisory_lock(4646)');
      await pool.query(`
        CREATE FUNCTION hold_update() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF current_setting('telemetryd.node', true) = '${poolNode(pool)}' THEN PERFORM pg_advisory_xact_lock_shared(4646); END IF;
          RETURN NULL;
        END $$;
        CREATE TRIGGER hold_update BEFORE UPDATE ON accounts FOR EACH STATEMENT EXECUTE FUNCTION hold_update();`);
      let changed: PromiseSettledResult<void>;
      try {
        // Settled from the start: it fails as soon as it is let go, before this test awaits it.
        const change = Promise.allSettled([sessions.changePassword(resolved, 'old password', 'changed password')]);
        await lockWaiters(1);
        // The admin resets it meanwhile (accounts set-password), signing every session out.
        await adminSessions.resetPassword(account.id, 'admin password');
        await holder.query('SELECT pg_advisory_unlock(4646)');
        [changed] = await change;
      } finally {
        await holder.query('SELECT pg_advisory_unlock_all()');
        holder.release();
        await pool.query('DROP TRIGGER hold_update ON accounts; DROP FUNCTION hold_update()');
        await adminPool.end();
      }
      // The change checked a password that was no longer the account's: refused, the reset stands.
      expect(changed).toMatchObject({ status: 'rejected', reason: { status: 400 } });
      const stored = (await pool.query('SELECT password_hash FROM accounts WHERE seq = $1', [account.seq])).rows[0].password_hash;
      expect(await verifyPassword('admin password', stored)).toBe(true);
    });
  });

  describe('alert triggers', () => {
    /**
     * Another node records a trigger (conditionValue `value`, evaluated against `condition`
     * when given) of a new alert, temperature > 30, while a transaction that ran `change` on
     * the alert's row holds it; then the change commits. Returns what was recorded and the alert.
     */
    const triggerDuringChange = async (
      change: string,
      value: number,
      condition?: Extract<AlertOutcome, { type: 'triggered' }>['condition'],
    ) => {
      const account = await newAccount();
      const deviceSeq = await newDevice(account, `dev_trigger_${account}`);
      const alertSeq = await newAlert(account, deviceSeq, `alert_trigger_${account}`, 60);
      const changing = await begin();
      try {
        await changing.query(change, [alertSeq]);
        const recorded = repos.alerts.recordOutcomes([
          {
            type: 'triggered',
            alertSeq,
            ...(condition ? { condition } : {}),
            event: {
              id: `evt_trigger_${account}`,
              alertSeq,
              deviceId: `dev_trigger_${account}`,
              conditionValue: value,
              severity: 'warning',
              triggeredAt: 1_000,
              readingSeq: null,
              deliveries: [{ action: 'email', status: 'pending', at: 1_000 }],
            },
          },
        ]);
        await lockWaiters(1);
        await changing.query('COMMIT');
        return { recorded: await recorded, alertSeq };
      } finally {
        changing.release();
      }
    };
    const alertState = async (alertSeq: number) =>
      (
        await pool.query(
          'SELECT enabled, value, state, last_triggered, (SELECT count(*)::int FROM alert_events WHERE alert_seq = $1) AS events FROM alerts WHERE seq = $1',
          [alertSeq],
        )
      ).rows[0];

    it('records no trigger for an alert disabled while the trigger waited for its row', async () => {
      // The dashboard on one node disables the alert (repository setEnabled: the row first);
      // another node evaluated a matching reading with the alert still enabled in its cache.
      const { recorded, alertSeq } = await triggerDuringChange('UPDATE alerts SET enabled = false, updated_at = 1 WHERE seq = $1', 31);
      expect(recorded).toEqual([{ event: null }]);
      expect(await alertState(alertSeq)).toEqual({ enabled: false, value: 30, state: 'ok', last_triggered: null, events: 0 });
    });

    it('records no trigger evaluated against a condition changed while the trigger waited for its row', async () => {
      // The dashboard on one node raises the threshold from 30 to 50; another node found 35
      // over the old threshold, with the alert as its cache held it.
      const { recorded, alertSeq } = await triggerDuringChange('UPDATE alerts SET value = 50, updated_at = 1 WHERE seq = $1', 35, {
        kind: 'threshold',
        field: 'temperature',
        operator: '>',
        value: 30,
      });
      expect(recorded).toEqual([{ event: null }]);
      expect(await alertState(alertSeq)).toEqual({ enabled: true, value: 50, state: 'ok', last_triggered: null, events: 0 });
    });
  });

  describe('alert outcomes recorded by two nodes at once', () => {
    it('records the triggers of two alerts met in opposite orders on two nodes, none failing', async () => {
      const account = await newAccount();
      const alertSeqs: number[] = [];
      for (const name of ['a', 'b']) {
        const deviceSeq = await newDevice(account, `dev_order_${name}_${account}`);
        alertSeqs.push(await newAlert(account, deviceSeq, `alert_order_${name}_${account}`, 0));
      }
      const trigger = (alertSeq: number, id: string): AlertOutcome => ({
        type: 'triggered',
        alertSeq,
        event: {
          id,
          alertSeq,
          deviceId: 'dev',
          conditionValue: 31,
          severity: 'warning',
          triggeredAt: 1_000,
          readingSeq: null,
          deliveries: [],
        },
      });
      const [a, b] = alertSeqs as [number, number];
      // Each node stops after its first event went in, holding its first alert's row.
      const release = await holdRows('INSERT', 'alert_events');
      let results: PromiseSettledResult<RecordedOutcome[]>[];
      try {
        const nodeA = Promise.resolve(repos.alerts.recordOutcomes([trigger(a, `evt_a1_${account}`), trigger(b, `evt_b1_${account}`)]));
        const nodeB = Promise.resolve(repos.alerts.recordOutcomes([trigger(b, `evt_b2_${account}`), trigger(a, `evt_a2_${account}`)]));
        await lockWaiters(2);
        await release();
        results = await Promise.allSettled([nodeA, nodeB]);
      } finally {
        await release();
      }
      expect(
        results.map((r) => (r.status === 'fulfilled' ? r.value.map((o) => o.error === undefined && o.event !== null) : r.reason)),
      ).toEqual([
        [true, true],
        [true, true],
      ]);
      expect((await pool.query('SELECT count(*)::int AS n FROM alert_events WHERE alert_seq = ANY($1)', [alertSeqs])).rows).toEqual([
        { n: 4 },
      ]);
    });
  });

  describe('alert deliveries left pending', () => {
    it('are not adopted from a node whose connection dropped and came back, but are from one that is gone', async () => {
      const account = await newAccount();
      const deviceSeq = await newDevice(account, `dev_adopt_${account}`);
      const alertSeq = await newAlert(account, deviceSeq, `alert_adopt_${account}`, 0);
      // Node A runs, holding its node lock, and records a trigger whose webhook it is still
      // retrying, a minute after it began.
      const poolA = await connectPostgres(url, { max: 2 });
      const nodeA = await createPostgresRepositories(poolA);
      const stopFollowing = nodeA.leadership.follow(() => {});
      const nodeLockHeld = async () =>
        (
          await pool.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2",
            [NODE_LOCK_CLASS, nodeA.leadership.nodeKey],
          )
        ).rows[0]!.n === 1;
      const waitForNodeLock = async () => {
        for (let i = 0; i < 500 && !(await nodeLockHeld()); i++) await new Promise((resolve) => setTimeout(resolve, 10));
        expect(await nodeLockHeld()).toBe(true);
      };
      const now = Date.now();
      try {
        await waitForNodeLock();
        const [recorded] = await nodeA.alerts.recordOutcomes([
          {
            type: 'triggered',
            alertSeq,
            event: {
              id: `evt_adopt_${account}`,
              alertSeq,
              deviceId: `dev_adopt_${account}`,
              conditionValue: 31,
              severity: 'warning',
              triggeredAt: now - 60_000,
              readingSeq: null,
              deliveries: [{ action: 'webhook', status: 'pending', at: now - 60_000 }],
            },
          },
        ]);
        expect(recorded!.event).not.toBeNull();
        // Its connection holding the lock drops (a PostgreSQL restart, a network cut): the
        // leading node looks for abandoned deliveries before node A has connected again.
        await pool.query(
          "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid",
          [NODE_LOCK_CLASS, nodeA.leadership.nodeKey],
        );
        for (let i = 0; i < 500 && (await nodeLockHeld()); i++) await new Promise((resolve) => setTimeout(resolve, 10));
        expect(await repos.alerts.adoptAbandonedDeliveries(now, 5_000)).toEqual([]);
        // Node A connects again within its poll and takes its lock back: still its own.
        await waitForNodeLock();
        expect(await repos.alerts.adoptAbandonedDeliveries(now + 10_000, 5_000)).toEqual([]);
      } finally {
        await stopFollowing();
        await nodeA.leadership.close();
        await poolA.end();
      }
      // Node A is gone for good: its delivery is adopted once it has been seen gone for the grace.
      expect(await repos.alerts.adoptAbandonedDeliveries(now + 20_000, 5_000)).toEqual([]);
      expect(await repos.alerts.adoptAbandonedDeliveries(now + 25_000, 5_000)).toEqual([
        { eventId: `evt_adopt_${account}`, type: 'triggered' },
      ]);
      expect(await repos.alerts.adoptAbandonedDeliveries(now + 40_000, 5_000)).toEqual([]);
    });
  });

  describe('the alert evaluator of another node', () => {
    /**
     * Node B, with repositories over a pool of its own, listening for other nodes' changes,
     * and an alert evaluator; its reads of `alerts` go through a view that waits on an
     * advisory lock while the test holds it, after the statement's snapshot is taken (a
     * stable function without arguments, evaluated once, when the statement starts
     * executing): what it reads then is held as of before whatever node A commits meanwhile.
     */
    const startNodeB = async () => {
      await pool.query(`
        ALTER TABLE alerts RENAME TO alerts_stored;
        CREATE FUNCTION hold_read() RETURNS boolean LANGUAGE plpgsql STABLE AS $$
        BEGIN PERFORM pg_advisory_xact_lock_shared(4444); RETURN true; END $$;
        CREATE VIEW alerts AS SELECT * FROM alerts_stored WHERE hold_read();`);
      const holder = await pool.connect();
      const nodeB = await connectPostgres(url, { max: 4 });
      const events = new DomainEvents();
      const reposB = await createPostgresRepositories(nodeB);
      const stopWatching = reposB.externalCommits.watch(
        () => events.emit('external.change', {}),
        0,
        () => {},
      );
      const evaluator = alertEvaluator({
        repos: reposB,
        events,
        accounts: accountService(reposB, events, systemClock),
        notifier: createNotifier({ smtpUrl: null, smtpFrom: 'telemetryd@localhost' }),
      });
      for (let i = 0; i < 200 && !reposB.externalCommits.listening; i++) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(reposB.externalCommits.listening).toBe(true);
      return {
        repos: reposB,
        evaluator,
        hold: () => holder.query('SELECT pg_advisory_lock(4444)'),
        release: () => holder.query('SELECT pg_advisory_unlock(4444)'),
        /** Runs `change` on node A and waits until node B has heard of it. */
        async changeOnNodeA(change: () => Promise<unknown>): Promise<void> {
          const seenBefore = reposB.externalCommits.current();
          await change();
          for (let i = 0; i < 200 && reposB.externalCommits.current() === seenBefore; i++)
            await new Promise((resolve) => setTimeout(resolve, 10));
          expect(reposB.externalCommits.current()).not.toBe(seenBefore);
        },
        async stop(): Promise<void> {
          await holder.query('SELECT pg_advisory_unlock_all()');
          holder.release();
          await evaluator.close(0);
          stopWatching();
          await nodeB.end();
          await pool.query('DROP VIEW alerts; DROP FUNCTION hold_read(); ALTER TABLE alerts_stored RENAME TO alerts');
        },
      };
    };

    const eventsOfDevice = async (deviceSeq: number): Promise<number> =>
      (
        await pool.query(
          'SELECT count(*)::int AS n FROM alert_events e JOIN alerts_stored a ON a.seq = e.alert_seq WHERE a.device_seq = $1',
          [deviceSeq],
        )
      ).rows[0].n;

    it('does not keep a list of alerts read before an alert was created, once told of the creation', async () => {
      const account = await newAccount();
      const deviceSeq = await newDevice(account, `dev_eval_${account}`);
      const nodeB = await startNodeB();
      try {
        const device = (await nodeB.repos.devices.findBySeq(deviceSeq))!;
        const owner = (await nodeB.repos.accounts.findBySeq(account))!;
        const reading = (seq: number, temperature: number) => ({
          seq,
          deviceSeq,
          time: Date.now(),
          data: `{"temperature":${temperature}}`,
        });
        await nodeB.hold();
        // A reading on node B: its device's alerts are read (none yet), and held.
        const first = nodeB.evaluator.evaluate(device, owner, reading(1, 20), { temperature: 20 });
        await lockWaiters(1);
        // Node A creates an alert on the device; node B hears of it while its read is held.
        await nodeB.changeOnNodeA(() =>
          pool.query(
            `INSERT INTO alerts_stored (id, account_seq, device_seq, name, field, operator, value, severity, cooldown, enabled_at,
               created_at, updated_at)
             VALUES ($1, $2, $3, 'hot', 'temperature', '>', 30, 'warning', 0, 0, 0, 0)`,
            [`alert_eval_${account}`, account, deviceSeq],
          ),
        );
        // Another reading of the device, evaluated once node B knows of the change (its cache
        // dropped), while the first read is still held.
        const second = nodeB.evaluator.evaluate(device, owner, reading(2, 21), { temperature: 21 });
        await nodeB.release();
        await Promise.all([first, second]);
        // The next matching reading on node B triggers the new alert.
        await nodeB.evaluator.evaluate(device, owner, reading(3, 35), { temperature: 35 });
        expect(await eventsOfDevice(deviceSeq)).toBe(1);
      } finally {
        await nodeB.stop();
      }
    });

    it('does not keep the silence checks’ list read before a no_data alert was created, once told of the creation', async () => {
      const account = await newAccount();
      const silentSeq = await newDevice(account, `dev_silent_${account}`);
      const otherSeq = await newDevice(account, `dev_other_${account}`);
      const nodeB = await startNodeB();
      try {
        const other = (await nodeB.repos.devices.findBySeq(otherSeq))!;
        const owner = (await nodeB.repos.accounts.findBySeq(account))!;
        await nodeB.hold();
        // The leading node's silence check reads the no_data alerts (none yet), held.
        const check = nodeB.evaluator.checkSilences();
        await lockWaiters(1);
        // Node A creates a no_data alert of 10 s on a device silent since long before.
        await nodeB.changeOnNodeA(() =>
          pool.query(
            `INSERT INTO alerts_stored (id, account_seq, device_seq, name, kind, field, operator, value, severity, enabled_at,
               created_at, updated_at)
             VALUES ($1, $2, $3, 'silent', 'no_data', '*', 'no_data', 10, 'warning', 0, 0, 0)`,
            [`alert_silent_${account}`, account, silentSeq],
          ),
        );
        // A reading of another device evaluated on node B meanwhile (node B knows of the change).
        const evaluated = nodeB.evaluator.evaluate(other, owner, { seq: 1, deviceSeq: otherSeq, time: Date.now(), data: '{}' }, {});
        await nodeB.release();
        await Promise.all([check, evaluated]);
        // The next check fires the alert.
        await nodeB.evaluator.checkSilences();
        expect(await eventsOfDevice(silentSeq)).toBe(1);
      } finally {
        await nodeB.stop();
      }
    });
  });

  describe('a settle of a dirty hour beside the deletions of its rollups', () => {
    const HOUR = 3_600_000;
    const H = Date.UTC(2026, 10, 24, 10);

    /** A device with two readings in hour H, its minute and hour rollups of H, and H marked dirty. */
    const rolledDevice = () => deviceWithMarkedHour('dev_rolled', H, true);

    /** What settling H writes: its minutes and its hour, recomputed. */
    const settleWrites = [
      {
        level: 0,
        deleteFrom: H,
        deleteTo: H + HOUR,
        rows: [[H + 60_000, '{"t":1}'] as [number, string], [H + 120_000, '{"t":2}'] as [number, string]],
      },
      { level: 2, deleteFrom: H, deleteTo: H + HOUR, rows: [[H, '{"t":[2,1,2,3]}'] as [number, string]] },
    ];

    /**
     * Settles hour H of the device (its two readings) while `other` runs beside it: the settle
     * is held right after it took its mark, `other` runs until it waits too (or ends), then
     * both go on. What became of each.
     */
    const settleBeside = (deviceSeq: number, other: () => Awaitable<unknown>) =>
      // The settle stops right after it has taken its hour's mark (the row is locked by then).
      crossed(
        ['DELETE', 'rollup_dirty'],
        () => repos.rollups.settleHour(deviceSeq, H, settleWrites, { to: H + HOUR, readings: 2 }),
        () => [other()],
      );

    it('deletes a device whose dirty hour is being settled, neither failing', async () => {
      const deviceSeq = await rolledDevice();
      // The device is deleted meanwhile (its readings were deleted in batches before).
      expect(await settleBeside(deviceSeq, () => repos.devices.removeWithRollups(deviceSeq))).toEqual([
        { status: 'fulfilled', value: true },
        { status: 'fulfilled', value: undefined },
      ]);
      expect(await leftOf(deviceSeq)).toEqual({ rollups: 0, marks: 0, readings: 0, devices: 0 });
    });

    it('expires readings of an hour being settled, neither failing, and leaves the hour dirty', async () => {
      const deviceSeq = await rolledDevice();
      // Retention cuts into the hour meanwhile: the first reading goes, with its rollups.
      expect(await settleBeside(deviceSeq, () => repos.readings.expireBatch(deviceSeq, H + 90_000, 1_000, 3))).toEqual([
        { status: 'fulfilled', value: true },
        { status: 'fulfilled', value: 1 },
      ]);
      // The hour is dirty again, to be recomputed from the reading left; nothing before the cutoff is kept.
      expect((await pool.query('SELECT hour FROM rollup_dirty WHERE device_seq = $1', [deviceSeq])).rows).toEqual([{ hour: H }]);
      expect((await pool.query('SELECT level, bucket FROM rollups WHERE device_seq = $1 ORDER BY 1, 2', [deviceSeq])).rows).toEqual([
        { level: 0, bucket: H + 120_000 },
      ]);
    });

    it('clears every rollup (a rebuild) while an hour is being settled, neither failing', async () => {
      const deviceSeq = await rolledDevice();
      expect(await settleBeside(deviceSeq, () => repos.rollups.clear())).toEqual([
        { status: 'fulfilled', value: true },
        { status: 'fulfilled', value: undefined },
      ]);
      expect((await pool.query('SELECT count(*)::int AS n FROM rollups')).rows).toEqual([{ n: 0 }]);
    });
  });

  describe('deletions of readings and rollups beside each other', () => {
    const HOUR = 3_600_000;
    const H = Date.UTC(2026, 10, 23, 10);

    /** A device with two readings in hour H, a minute rollup of each, and H marked dirty. */
    const deviceWithReadings = () => deviceWithMarkedHour('dev_deleted', H, false);

    it('expires readings of a device being deleted, neither failing', async () => {
      const deviceSeq = await deviceWithReadings();
      // The deletion (its readings left behind by the batches) stops once it holds its first
      // reading; retention's step for the device runs meanwhile (past every reading of it).
      const results = await crossed(
        ['DELETE', 'readings'],
        () => repos.devices.removeWithRollups(deviceSeq),
        () => [repos.readings.expireBatch(deviceSeq, H + HOUR, 1_000, 3)],
      );
      expect(results).toEqual([
        { status: 'fulfilled', value: undefined },
        { status: 'fulfilled', value: 0 },
      ]);
      expect(await leftOf(deviceSeq)).toEqual({ rollups: 0, marks: 0, readings: 0, devices: 0 });
    });

    it('clears every rollup (a rebuild) while a batch with a late reading marks its hour, neither failing', async () => {
      const deviceSeq = await deviceWithReadings();
      // Readings before H + 2 hours are late: they mark their hour.
      const writer = new PostgresReadingWriter(pool, url, 5_000, () => H + 2 * HOUR);
      let results: PromiseSettledResult<unknown>[];
      try {
        // The rebuild has deleted every dirty mark (each row locked), and stops there; a batch
        // with a late reading of hour H, whose mark the rebuild holds, comes meanwhile.
        results = await crossed(
          ['DELETE', 'rollup_dirty', 'AFTER'],
          () => repos.rollups.clear(),
          () => [writer.append({ deviceSeq, time: H + 30 * 60_000, data: '{"t":3}' })],
        );
      } finally {
        await writer.close();
      }
      expect(results).toEqual([
        { status: 'fulfilled', value: undefined },
        { status: 'fulfilled', value: expect.any(Number) },
      ]);
      // The late reading's hour is marked, after the rebuild: it is rolled up again.
      expect((await pool.query('SELECT hour FROM rollup_dirty WHERE device_seq = $1', [deviceSeq])).rows).toEqual([{ hour: H }]);
    });
  });

  describe('a batch of late readings beside deletions of dirty marks', () => {
    const HOUR = 3_600_000;
    const H = Date.UTC(2026, 10, 16, 10);

    /**
     * A device whose hours H and H + 1 are marked dirty, H + 1's mark stored first: a scan of
     * the table (what a small table gets, and a bitmap scan of a large one) meets it before H's,
     * where a batch marks H first.
     */
    const deviceWithTwoMarks = async (): Promise<number> => {
      const account = await newAccount();
      const deviceSeq = await newDevice(account, `dev_marks_${account}`);
      // The week after too, which the writer makes sure of: its creation would wait for the deletion.
      await readingPartitions(pool, [H, H + 7 * 24 * HOUR]);
      await pool.query('INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2)', [deviceSeq, H + HOUR]);
      await pool.query('INSERT INTO rollup_dirty (device_seq, hour) VALUES ($1, $2)', [deviceSeq, H]);
      await pool.query('ANALYZE rollup_dirty');
      return deviceSeq;
    };

    /**
     * Runs `deletion` until it has locked the first mark it deletes and holds it there, then
     * sends a batch with a late reading in each of hours H and H + 1 of the device, lets the
     * deletion go once the batch waits too (or has ended), and returns what became of each.
     */
    const batchBeside = async (deviceSeq: number, deletion: () => Awaitable<unknown>) => {
      // Readings before H + 3 hours are late: they mark their hour.
      const writer = new PostgresReadingWriter(pool, url, 5_000, () => H + 3 * HOUR);
      try {
        return await crossed(['DELETE', 'rollup_dirty'], deletion, () => [
          writer.append({ deviceSeq, time: H + 30 * 60_000, data: '{"t":1}' }),
          writer.append({ deviceSeq, time: H + HOUR + 30 * 60_000, data: '{"t":2}' }),
        ]);
      } finally {
        await writer.close();
      }
    };

    it('deletes a device while a batch marks two late hours of it, neither failing', async () => {
      const deviceSeq = await deviceWithTwoMarks();
      // The batch was on its way when the device's deletion began (its readings already deleted in batches).
      expect(await batchBeside(deviceSeq, () => repos.devices.removeWithRollups(deviceSeq))).toEqual([
        { status: 'fulfilled', value: undefined },
        { status: 'fulfilled', value: expect.any(Number) },
        { status: 'fulfilled', value: expect.any(Number) },
      ]);
    });

    it('expires readings of two marked hours while a batch marks both hours, neither failing', async () => {
      const deviceSeq = await deviceWithTwoMarks();
      await pool.query(`INSERT INTO readings (device_seq, time, seq, data) VALUES ($1, $2, $3, '{"t":0}')`, [
        deviceSeq,
        H,
        deviceSeq * 1_000,
      ]);
      // Retention's step for the device, its cutoff past both hours.
      expect(await batchBeside(deviceSeq, () => repos.readings.expireBatch(deviceSeq, H + 2 * HOUR, 1_000, 3))).toEqual([
        { status: 'fulfilled', value: 1 },
        { status: 'fulfilled', value: expect.any(Number) },
        { status: 'fulfilled', value: expect.any(Number) },
      ]);
    });

    it('sweeps a removed device while a batch marks two late hours of it, neither failing', async () => {
      const deviceSeq = await deviceWithTwoMarks();
      // The device's deletion as the sweep sees it (its tombstone); the batch's node has not heard of it.
      await pool.query('INSERT INTO removed_devices (device_seq, account_seq) SELECT seq, account_seq FROM devices WHERE seq = $1', [
        deviceSeq,
      ]);
      try {
        expect(await batchBeside(deviceSeq, () => repos.readings.sweepRemovedDevices())).toEqual([
          { status: 'fulfilled', value: expect.any(Number) },
          { status: 'fulfilled', value: expect.any(Number) },
          { status: 'fulfilled', value: expect.any(Number) },
        ]);
      } finally {
        await pool.query('DELETE FROM removed_devices WHERE device_seq = $1', [deviceSeq]);
      }
    });

    it('drops an expired week while a batch with a late reading of that week marks its hour, the batch not failing', async () => {
      // A week older than any other partition of these tests, dropped at the first moment it may be.
      const week = Date.UTC(2025, 0, 6);
      const hour = week + 10 * HOUR;
      const account = await newAccount();
      const days = (await pool.query<{ days: number }>('SELECT max(retention_days) AS days FROM accounts')).rows[0]!.days;
      const now = week + 7 * 24 * HOUR + days * 24 * HOUR;
      const deviceSeq = await newDevice(account, `dev_week_${account}`);
      const writer = new PostgresReadingWriter(pool, url, 5_000, () => now);
      let results: PromiseSettledResult<unknown>[];
      try {
        // A first late reading of the week: the writer knows the week's partition, and the hour is marked.
        await writer.append({ deviceSeq, time: hour + 60_000, data: '{"t":1}' });
        // The drop has deleted the week's marks (each row locked), and stops there; another
        // late reading of the hour comes meanwhile.
        results = await crossed(
          ['DELETE', 'rollup_dirty', 'AFTER'],
          () => repos.readings.dropExpiredPartitions(now, 3),
          () => [writer.append({ deviceSeq, time: hour + 120_000, data: '{"t":2}' })],
        );
      } finally {
        await writer.close();
      }
      expect(results).toEqual([
        { status: 'fulfilled', value: ['readings_20250106'] },
        { status: 'fulfilled', value: expect.any(Number) },
      ]);
      // The reading that came after the drop is in the week made again, its hour marked, for the next pass to drop.
      expect((await pool.query('SELECT data FROM readings_20250106')).rows).toEqual([{ data: '{"t":2}' }]);
      expect((await pool.query('SELECT hour FROM rollup_dirty WHERE device_seq = $1', [deviceSeq])).rows).toEqual([{ hour }]);
    });
  });
});
