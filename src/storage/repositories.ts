/**
 * The storage interface of the domain layer: what every backend (SQLite in ./repos, and
 * PostgreSQL) implements, and the only thing src/domain knows of storage.
 *
 * Every method that touches the database returns `Awaitable<T>`: the SQLite repositories
 * answer from synchronous prepared statements and return the value itself (no promise, no
 * event-loop turn), a PostgreSQL repository returns a promise. Callers `await` the result,
 * except on the ingest hot path (device authentication), which awaits only what is a
 * promise (`isPromise` below).
 *
 * There is no transaction over several calls: a transaction that spanned an `await` would
 * hold a PostgreSQL connection across unrelated work, and on SQLite (one connection) would
 * take in whatever else ran meanwhile. Work that must be atomic is one named operation here,
 * one transaction inside the repository (SQLite: `db.transaction(fn).immediate()`, which
 * takes the write lock up front; PostgreSQL: BEGIN … COMMIT on one pooled connection). Any
 * method not documented otherwise is one statement, atomic on its own.
 *
 * Row shapes and method names are those of the SQLite repositories; times are milliseconds
 * since the epoch, `seq` is a table's integer key, `id` its public prefixed id.
 */
import type { PlanLimits } from '../domain/plans.js';
import type {
  Account,
  ActionDelivery,
  Alert,
  AlertEvent,
  ApiKey,
  Device,
  FieldDefinition,
  SchemaMode,
  StoredReading,
} from '../domain/types.js';

/** A value, or the promise of one: what a synchronous and an asynchronous backend both return. */
export type Awaitable<T> = T | Promise<T>;

/**
 * Whether a repository's answer is still to come (an asynchronous backend), without a
 * microtask when it is not. Asynchronous implementations return native promises (async
 * functions do), which is what this checks for.
 */
export const isPromise = <T>(value: Awaitable<T>): value is Promise<T> => value instanceof Promise;

// ---------------------------------------------------------------------------------------
// Row shapes
// ---------------------------------------------------------------------------------------

export interface NewAccount {
  id: string;
  email: string;
  name: string;
  passwordHash: string | null;
  plan: string;
  limits: PlanLimits;
  webhookSecret: string;
  now: number;
}

export interface NewApiKey {
  id: string;
  accountSeq: number;
  name: string;
  keyPrefix: string;
  keyHash: string;
  now: number;
}

/** A device with the SHA-256 hash of its access token (never shown outside the domain). */
export interface DeviceWithToken extends Device {
  tokenHash: string;
}

export interface NewDevice {
  id: string;
  accountSeq: number;
  name: string;
  type: string;
  description: string;
  settings: Record<string, unknown>;
  schemaMode: SchemaMode;
  fields: FieldDefinition[];
  snapshotsEnabled: boolean;
  tokenHash: string;
  now: number;
}

/** What an update of a device changes. */
export type DeviceChanges = Omit<NewDevice, 'id' | 'accountSeq' | 'tokenHash'>;

/** A reading to insert (the writer's batch). */
export interface PendingReading {
  deviceSeq: number;
  /** The device's account, when the caller has it (the ingest pipeline); looked up otherwise. */
  accountSeq?: number;
  time: number;
  data: string;
  /** `data` parsed, when the caller has it (the ingest pipeline): spares observers a parse. */
  parsed?: Record<string, unknown>;
}

/** (bucket start, stats JSON) of one rollup row. */
export type RollupRow = [number, string];
/** (time, data) of one reading. */
export type RawRow = [number, string];
/** (time, seq, data) of one reading, in (time, seq) order. */
export type OrderedRawRow = [number, number, string];

/**
 * What a span of rollups writes at one level: the rows of [deleteFrom, deleteTo) go first
 * (none when deleteTo <= deleteFrom), then `rows` are stored (insert or replace by bucket).
 */
export interface RollupLevelWrite {
  level: number;
  deleteFrom: number;
  deleteTo: number;
  rows: RollupRow[];
}

export type NewAlert = Pick<
  Alert,
  | 'id'
  | 'accountSeq'
  | 'deviceSeq'
  | 'name'
  | 'kind'
  | 'field'
  | 'operator'
  | 'value'
  | 'clearValue'
  | 'actions'
  | 'webhookUrl'
  | 'slackUrl'
  | 'discordUrl'
  | 'ntfyUrl'
  | 'severity'
  | 'enabled'
  | 'notifyResolved'
  | 'cooldown'
> & { now: number };

/** What an update of an alert changes. */
export type AlertChanges = Omit<NewAlert, 'id' | 'accountSeq' | 'deviceSeq'>;

/** An enabled no_data alert of an active device, with what bounds its silence. */
export interface NoDataWatch {
  alert: Alert;
  deviceResumedAt: number | null;
}

/** A trigger event as the evaluator builds it; the repository adds its seq. */
export type NewAlertEvent = Omit<AlertEvent, 'seq' | 'acknowledged' | 'acknowledgedAt' | 'resolvedAt' | 'resolutionDeliveries'>;

/** What a threshold or no_data alert checks: the columns a trigger was evaluated against. */
type AlertCondition = Pick<Alert, 'kind' | 'field' | 'operator' | 'value'>;

/** One change of an alert's state the evaluator observed, to be recorded (alerts.recordOutcomes). */
export type AlertOutcome =
  | {
      type: 'triggered';
      alertSeq: number;
      event: NewAlertEvent;
      /** The condition as the evaluator held it: recorded only while the alert still has it. */
      condition?: AlertCondition;
    }
  | {
      type: 'resolved';
      alertSeq: number;
      at: number;
      /** The resolution notices to send (resolution_deliveries), empty when none are wanted. */
      notices: ActionDelivery[];
    };

/**
 * What recording one outcome gave: the stored event (a trigger's new event, or a resolved
 * firing's event with resolved_at set), or null: a resolution found no open event (nothing
 * to notify), or the item failed (`error`, e.g. the alert was deleted meanwhile).
 */
export interface RecordedOutcome {
  event: AlertEvent | null;
  error?: unknown;
}

/** A dashboard session; `idHash` is the SHA-256 of the cookie value, never the value itself. */
export interface SessionRecord {
  idHash: string;
  accountSeq: number;
  csrfToken: string;
  createdAt: number;
  lastUsedAt: number;
  expiresAt: number;
}

/** One stored snapshot, with the owning device and account resolved (for read checks). */
export interface SnapshotRecord {
  seq: number;
  id: string;
  deviceSeq: number;
  deviceId: string;
  accountSeq: number;
  contentType: string;
  size: number;
  createdAt: number;
}

export interface NewSnapshot {
  id: string;
  deviceSeq: number;
  contentType: string;
  size: number;
  now: number;
}

// ---------------------------------------------------------------------------------------
// Repositories
// ---------------------------------------------------------------------------------------

export interface AccountsRepository {
  findById(id: string): Awaitable<Account | null>;
  /**
   * On the ingest hot path (the account behind an authenticated device): answered from the
   * in-memory cache (readCache.ts) and so synchronously on a hit, on every backend where it
   * can be. Cached until accounts or devices change: treat the result as read-only.
   */
  findBySeq(seq: number): Awaitable<Account | null>;
  findByEmail(email: string): Awaitable<Account | null>;
  /** Every account, by created_at then seq. */
  list(): Awaitable<Account[]>;
  count(): Awaitable<number>;
  /**
   * Status `active`. False, inserting nothing, when an account with the email exists: the
   * unique index decides as the row goes in, so of two creations of one address at once
   * (each checked the address was free) one gets false, not a constraint error. A duplicate
   * id fails (unique constraint).
   */
  insert(a: NewAccount): Awaitable<boolean>;
  /**
   * Inserts the account as insert does, only while there is no account at all (the first-run
   * setup); false, inserting nothing, when there is one. Atomic (SQLite: one statement;
   * PostgreSQL: under a transaction-level advisory lock, then a check), so two setups at once
   * cannot both create a first account.
   */
  insertFirst(a: NewAccount): Awaitable<boolean>;
  setPlan(seq: number, plan: string, limits: PlanLimits, now: number): Awaitable<void>;
  setStatus(seq: number, status: 'active' | 'suspended', now: number): Awaitable<void>;
  setWebhookSecret(seq: number, secret: string, now: number): Awaitable<void>;
  /**
   * Sets the password hash; with `replacing`, only while the stored hash is still that one
   * (the one a password change checked the current password against), in one statement, so
   * a change that raced a reset (on another node, or by the CLI) does not undo it. Returns
   * whether it was set.
   */
  setPasswordHash(seq: number, hash: string, now: number, replacing?: string | null): Awaitable<boolean>;
}

export interface ApiKeysRepository {
  findByHash(hash: string): Awaitable<ApiKey | null>;
  findById(id: string): Awaitable<ApiKey | null>;
  /** Newest first (created_at, then seq, descending), revoked keys included. */
  listByAccount(accountSeq: number): Awaitable<ApiKey[]>;
  insert(k: NewApiKey): Awaitable<void>;
  /** Sets revoked_at unless already revoked (the first revocation's time stays). */
  revoke(seq: number, now: number): Awaitable<void>;
  touch(seq: number, now: number): Awaitable<void>;
}

export interface DevicesRepository {
  /** With last_seen resolved: the newest reading's time, or the archived value once retention removed them all. */
  findById(id: string): Awaitable<DeviceWithToken | null>;
  findBySeq(seq: number): Awaitable<DeviceWithToken | null>;
  /**
   * The device row for authentication (ingest, snapshot upload, MQTT CONNECT), without
   * last_seen resolved (it holds only the archived value). Cached until devices or accounts
   * change, by anyone (readCache.ts): a hit is answered synchronously, so the hot path costs
   * no promise; a miss may be a promise on an asynchronous backend. Misses are not cached.
   * Treat the result as read-only.
   */
  findForAuth(id: string): Awaitable<DeviceWithToken | null>;
  /** A page in created_at then seq order (stable under offset paging), of one status if given. */
  listByAccount(accountSeq: number, opts: { limit: number; offset: number; status?: string }): Awaitable<DeviceWithToken[]>;
  count(accountSeq: number, status?: string): Awaitable<number>;
  /**
   * Inserts the device unless its account already has `limit` devices; one transaction
   * (count and insert; PostgreSQL locks the account row first), so concurrent creations
   * cannot both take the last place. Returns false, inserting nothing, when the limit is reached.
   */
  insertWithinLimit(d: NewDevice, limit: number): Awaitable<boolean>;
  update(seq: number, d: DeviceChanges): Awaitable<void>;
  /** Pausing keeps resumed_at; resuming a paused device sets resumed_at = now (no_data alerts count silence from it). */
  setStatus(seq: number, status: 'active' | 'paused', now: number): Awaitable<void>;
  setTokenHash(seq: number, hash: string, now: number): Awaitable<void>;
  recordRejection(seq: number, reason: string, now: number): Awaitable<void>;
  /**
   * The last step of a device's deletion, after its readings went (readings.deleteBatchOfDevice):
   * its rollups, its dirty rollup hours and the device row (alerts, events and snapshot rows
   * by cascade), one transaction.
   */
  removeWithRollups(seq: number): Awaitable<void>;
  /** Every device as (seq, account seq), by seq: the retention and rollup jobs walk them. */
  allSeqs(): Awaitable<{ seq: number; accountSeq: number }[]>;
}

export interface ReadingsRepository {
  /**
   * Hands every batch of readings this process commits to `observer`, synchronously right
   * after its commit, whichever writer committed it (the rollups' minute figures held in
   * memory). One observer; a later call replaces it.
   */
  observeCommits(observer: (batch: readonly PendingReading[]) => void): void;
  /** The newest reading (by time, then seq), or null. */
  latest(deviceSeq: number): Awaitable<StoredReading | null>;
  /** Up to `limit` readings with time >= since, newest first (time, then seq, descending). */
  history(deviceSeq: number, since: number, limit: number): Awaitable<StoredReading[]>;
  /**
   * Readings of [since, until), oldest first (time, then seq): exports stream it, in chunks,
   * leaving the loop after each (which must release the cursor); iterate with `for await`.
   */
  iterateRange(deviceSeq: number, since: number, until: number): Iterable<StoredReading> | AsyncIterable<StoredReading>;
  /**
   * The newest reading in [since, before) whose JSON text `matches`, looking at about
   * `maxRows` rows at most (newest first; the rows of the last millisecond looked at are
   * all seen, so a search always moves on). `time` is that reading's time; null with
   * `before` null: no reading matches; null with a `before`: the budget ran out, and
   * [since, before) is what is left to search.
   */
  newestMatchingTime(
    deviceSeq: number,
    since: number,
    before: number,
    matches: (data: string) => boolean,
    maxRows: number,
  ): Awaitable<{ time: number | null; before: number | null; scanned: number }>;
  /** Readings of an account's devices with time >= since (usage's data_points_24h), from the per-minute counts. */
  countSinceForAccount(accountSeq: number, since: number): Awaitable<number>;
  /**
   * Deletes up to `batch` of a device's readings, oldest first, in one statement (its own
   * transaction, short: ingest is not held up); returns how many went, 0 when none are left.
   * Device deletion repeats it, then calls devices.removeWithRollups.
   */
  deleteBatchOfDevice(deviceSeq: number, batch: number): Awaitable<number>;
  /**
   * One batch of retention, one transaction: archives the device's newest reading time in
   * devices.last_seen (so last_seen survives the deletion of every reading), deletes up to
   * `batchSize` of its readings with time < cutoff, oldest first, and if any went, deletes
   * its rollups of the `levels` levels before `cutoff`, its dirty marks before the cutoff's
   * hour and marks that hour dirty when the cutoff cuts into it (recomputed from the
   * readings left). Returns the readings deleted; the caller repeats until 0.
   */
  expireBatch(deviceSeq: number, cutoff: number, batchSize: number, levels: number): Awaitable<number>;
  /**
   * Where readings are stored in partitions by time (PostgreSQL: weeks), retention drops
   * whole partitions past every account's retention at `now` before the per-device
   * expireBatch steps, with what they cover in the rollups (`levels` levels) and usage
   * counts; returns the partitions dropped. Absent where there are none (SQLite).
   */
  dropExpiredPartitions?(now: number, levels: number): Awaitable<string[]>;
  /**
   * Where a reading can still be committed after its device's deletion (PostgreSQL: a batch
   * already on its way, or another process's that had not heard of the deletion), deletes
   * the readings, rollups and usage counts of the devices deleted lately; returns the
   * readings deleted. Absent where the deletion and the batches exclude each other (SQLite).
   */
  sweepRemovedDevices?(): Awaitable<number>;
}

/**
 * Per-device rollups of numeric paths: rows per (device, level, bucket), the rolled_until
 * mark, and the hours to recompute (rollup_dirty). What goes in the stats JSON, and what
 * each level's buckets are, is the domain's (src/domain/rollups.ts).
 *
 * The rollup writes are computed by the domain from reads made before the operation that
 * stores them (rows, raw, rawFirst, rawAfter): no transaction spans the computation.
 */
export interface RollupsRepository {
  /** Every reading before this time is in the rollups (dirty hours aside). Held in memory: synchronous. */
  rolledUntil(): number;
  setRolledUntil(time: number): Awaitable<void>;
  /**
   * The time before which a newly committed reading is late (its minute may already be
   * rolled up): the writer marks its hour dirty in the batch's own transaction. Held in
   * memory, synchronous; never below rolledUntil.
   */
  lateBefore(): number;
  /**
   * Moves lateBefore forward before a pass reads the readings up to `time`. On PostgreSQL the
   * mark is also stored, so that the writers of every node mark late readings alike.
   */
  setLateBefore(time: number): Awaitable<void>;
  /**
   * Reads rolledUntil and lateBefore again from the database, where another process (the
   * node that runs the rollup pass) may have moved them; nothing to do on SQLite.
   */
  refresh(): Awaitable<void>;
  /** Dirty hours (start times) of one device, oldest first. */
  dirtyHours(deviceSeq: number): Awaitable<number[]>;
  /** Every dirty hour, by device then hour. */
  allDirty(): Awaitable<{ deviceSeq: number; hour: number }[]>;
  /** Rows of one level with buckets in [from, to), oldest first. */
  rows(deviceSeq: number, level: number, from: number, to: number): Awaitable<RollupRow[]>;
  /** Deletes the rows of one level with buckets in [from, to) (pruning); returns how many went. */
  deleteRange(deviceSeq: number, level: number, from: number, to: number): Awaitable<number>;
  /** Readings of [from, to) of one device, unordered. */
  raw(deviceSeq: number, from: number, to: number): Awaitable<RawRow[]>;
  /** The first `limit` readings of [from, to) of one device, in (time, seq) order. */
  rawFirst(deviceSeq: number, from: number, to: number, limit: number): Awaitable<OrderedRawRow[]>;
  /** The first `limit` readings after (time, seq) and before `to`, in (time, seq) order. */
  rawAfter(deviceSeq: number, time: number, seq: number, to: number, limit: number): Awaitable<OrderedRawRow[]>;
  /** Stores the rollups of one span of a device, level by level in the order given: one transaction. */
  writeSpan(deviceSeq: number, writes: RollupLevelWrite[]): Awaitable<void>;
  /**
   * Stores the recomputed rollups of one dirty hour (as writeSpan) and clears its dirty
   * mark: one transaction, and only if the device still has exactly `read.readings`
   * readings in [hour, read.to), the ones the caller computed them from. Otherwise (a late
   * reading committed, or retention deleted some, between the caller's read and this
   * transaction) nothing is written and the mark stays, for the next settle. Returns
   * whether the hour was settled.
   */
  settleHour(deviceSeq: number, hour: number, writes: RollupLevelWrite[], read: { to: number; readings: number }): Awaitable<boolean>;
  /** Drops every rollup, dirty mark and the rolled_until mark (to 0), one transaction: a rebuild from the readings follows. */
  clear(): Awaitable<void>;
}

export interface AlertsRepository {
  findById(id: string): Awaitable<Alert | null>;
  findBySeq(seq: number): Awaitable<Alert | null>;
  /** A page of an account's alerts, by created_at then seq. */
  listByAccount(accountSeq: number, limit: number, offset: number): Awaitable<Alert[]>;
  count(accountSeq: number): Awaitable<number>;
  countEnabled(accountSeq: number): Awaitable<number>;
  /** A device's enabled alerts (the evaluator caches them per device). */
  enabledOfDevice(deviceSeq: number): Awaitable<Alert[]>;
  /** A device's alerts, by created_at then seq. */
  listByDevice(deviceSeq: number): Awaitable<Alert[]>;
  /** State `ok`; enabled_at = created_at = now. */
  insert(a: NewAlert): Awaitable<void>;
  /**
   * Updates the definition (enabling a disabled alert moves enabled_at to now) and, with
   * `endFiring`, ends a firing in the same transaction: a firing alert goes back to `ok`
   * and its open event gets resolved_at = now, with no resolution notices (nothing was
   * observed to recover). The domain asks for it when the condition changed or the alert
   * is disabled.
   */
  update(seq: number, a: AlertChanges, endFiring: boolean): Awaitable<void>;
  /**
   * Enables (enabled_at = now if it was disabled) or disables; disabling also ends a firing
   * as update's `endFiring` does, in the same transaction.
   */
  setEnabled(seq: number, enabled: boolean, now: number): Awaitable<void>;
  /** Enabled no_data alerts of active devices of active accounts. */
  noDataWatches(): Awaitable<NoDataWatch[]>;
  /** Ids of an account's devices with an enabled, firing no_data alert. */
  firingNoDataDeviceIds(accountSeq: number): Awaitable<string[]>;
  /** Deletes the alert; its events go by cascade. */
  remove(seq: number): Awaitable<void>;
  /**
   * Records what the evaluator observed, one transaction for the whole batch, in order. Each
   * item is isolated (a savepoint each): one that fails (its alert was deleted after the
   * reading was evaluated: the foreign key refuses the event) is rolled back alone, reported
   * in its result's `error`, and the others are recorded. A trigger inserts its event, sets
   * last_triggered to the event's time and state `firing`; a resolution sets state `ok` and,
   * when the alert has an open event, sets its resolved_at and resolution_deliveries.
   * Returns one result per item, in the batch's order. Rejects (nothing recorded) only when
   * the transaction as a whole fails.
   *
   * A trigger of an alert disabled since it was evaluated, or whose condition is no longer the
   * one given (the evaluator's list is cached; another process may have changed it), records
   * nothing and has no event (and no error).
   * Where several processes evaluate readings (PostgreSQL), a trigger first claims the alert
   * on its row: enabled, past its cooldown (a no_data alert: while `ok`). A resolution applies
   * only to a firing alert not triggered after it. An item whose claim fails records nothing
   * and has no event (and no error): another process recorded that change.
   */
  recordOutcomes(batch: AlertOutcome[]): Awaitable<RecordedOutcome[]>;

  findEventById(id: string): Awaitable<AlertEvent | null>;
  /** Up to `limit` events of an alert, newest first (triggered_at, then seq, descending). */
  history(alertSeq: number, limit: number): Awaitable<AlertEvent[]>;
  /** Sets acknowledged and acknowledged_at unless already acknowledged (idempotent). */
  acknowledgeEvent(seq: number, now: number): Awaitable<void>;
  setDeliveries(seq: number, deliveries: ActionDelivery[]): Awaitable<void>;
  setResolutionDeliveries(seq: number, deliveries: ActionDelivery[]): Awaitable<void>;
  /**
   * Events whose deliveries (`triggered`) or resolution notices (`resolved`) another process
   * left pending when it ended, claimed for this one: each is returned to one caller only, at
   * least `graceMs` after it was last claimed, and once its process has been seen gone for
   * `graceMs` (a process whose connection dropped and came back meanwhile still sends them).
   * Never any on SQLite, where one server sends everything and a shutdown records what it
   * abandons as failed.
   */
  adoptAbandonedDeliveries(now: number, graceMs: number): Awaitable<{ eventId: string; type: 'triggered' | 'resolved' }[]>;
}

export interface SessionsRepository {
  findByHash(idHash: string): Awaitable<SessionRecord | null>;
  /**
   * Inserts the session only while its account's password hash is still `passwordHash`, the
   * one the sign-in checked; false, inserting nothing, once it changed. One statement that
   * reads the hash as it is when the row goes in (PostgreSQL: holding the account row until
   * commit), so a password changed or reset meanwhile, whose removeOthers then finds no such
   * session, refuses it instead of leaving a session of the old password signed in.
   */
  insert(s: SessionRecord, passwordHash: string | null): Awaitable<boolean>;
  touch(idHash: string, now: number, expiresAt: number): Awaitable<void>;
  remove(idHash: string): Awaitable<void>;
  /**
   * Signs out every session of the account but `keepIdHash` (after a password change), or
   * every one when it is null (an admin's reset); returns how many went.
   */
  removeOthers(accountSeq: number, keepIdHash: string | null): Awaitable<number>;
  /** Deletes sessions with expires_at <= now; returns how many went. */
  removeExpired(now: number): Awaitable<number>;
}

export interface SnapshotsRepository {
  findById(id: string): Awaitable<SnapshotRecord | null>;
  /**
   * Inserts the snapshot row unless its device already has `limit` snapshots created at or
   * after `since`; one transaction (count and insert; PostgreSQL locks the device row
   * first), so concurrent uploads cannot both take the last place. Returns false, inserting
   * nothing, when the quota is used up.
   */
  insertWithinQuota(s: NewSnapshot, since: number, limit: number): Awaitable<boolean>;
  /** Snapshots of a device created at or after `since`. */
  countSince(deviceSeq: number, since: number): Awaitable<number>;
  /** Up to `limit` snapshots past their account's snapshot retention at `now`, oldest first. */
  expiredBatch(now: number, limit: number): Awaitable<SnapshotRecord[]>;
  /** Deletes the given rows, atomically (one statement, or one transaction); returns how many went. */
  removeMany(seqs: number[]): Awaitable<number>;
}

/**
 * Commits by other processes sharing the database (the admin CLI; on PostgreSQL, other
 * nodes), so caches and the alert evaluator see their changes. In memory: synchronous.
 */
export interface ExternalChanges {
  /** A number that differs from any earlier one once another process may have committed. */
  current(): number;
  /**
   * Calls `onChange` (from an unref'd timer, every `intervalMs`) once another process has
   * committed since the last call. A failure to check is reported to `onError` once per
   * failing spell, never thrown. Returns the function that stops watching.
   */
  watch(onChange: () => void, intervalMs: number, onError?: (err: unknown) => void): () => void;
}

/**
 * Which process runs the background jobs that must run once per database (retention, the
 * rollup pass, the silence checks, adopting deliveries abandoned by a process that stopped).
 * On SQLite one process serves the database: it always leads. On PostgreSQL the nodes of a
 * cluster compete for one lock, and whoever holds it leads until its connection ends.
 */
export interface Leadership {
  /**
   * False when other processes may commit readings to the same database at the same time
   * (PostgreSQL): what one process saw ingest is then not all there is.
   */
  readonly soleWriter: boolean;
  /**
   * Calls `onChange(true)` once this process leads and `onChange(false)` when it no longer
   * does (its connection was lost); failures to reach the database go to `onError`, once per
   * failing spell. Returns the function that stops following and gives the lead up.
   */
  follow(onChange: (leading: boolean) => void, onError?: (err: unknown) => void): () => Promise<void>;
}

/** Every repository over one database: what the domain layer is given. */
export interface Repositories {
  accounts: AccountsRepository;
  apiKeys: ApiKeysRepository;
  devices: DevicesRepository;
  readings: ReadingsRepository;
  rollups: RollupsRepository;
  alerts: AlertsRepository;
  sessions: SessionsRepository;
  snapshots: SnapshotsRepository;
  externalCommits: ExternalChanges;
  leadership: Leadership;
}

/** A batch of readings another node committed, as its notification describes it (readingWriter.ts). */
export interface PeerReadingsNotice {
  minTime: number;
  maxTime: number;
  minSeq: number;
  maxSeq: number;
  /** The devices with readings in the batch; null when there were too many to list. */
  deviceSeqs: number[] | null;
}

/** A reading another node committed, with its device's public id and account. */
export interface PeerReading {
  deviceId: string;
  accountSeq: number;
  reading: StoredReading;
}

/**
 * What the nodes of a cluster tell each other (PostgreSQL only: LISTEN/NOTIFY on the listening
 * connection of ExternalChanges). Readings handlers hear other nodes only, never this process.
 */
export interface PeerChannel {
  /**
   * Tells every node (this one too) that this one accepted an MQTT client id; `session`
   * tells this node's announcements apart. Nodes hear them in commit order: an older session
   * is closed by a newer one's announcement.
   */
  announceMqttClient(session: number, clientId: string): Promise<void>;
  /** Each announcement, in commit order; `own` when this process sent it. */
  onMqttClientAnnounced(handler: (announcement: { session: number; clientId: string; own: boolean }) => void): () => void;
  onReadingsElsewhere(handler: (notice: PeerReadingsNotice) => void): () => void;
  /** The readings of notified batches that belong to these accounts, oldest first, in one query. */
  readingsElsewhere(notices: PeerReadingsNotice[], accountSeqs: number[]): Promise<PeerReading[]>;
}

/** Values generated once per cluster and shared by every node (PostgreSQL only). */
export interface ClusterSettings {
  /** The value of `name`; when there is none, `create`'s, stored under a cluster-wide lock so every node gets the same. */
  getOrCreate(name: string, create: () => Promise<string>): Promise<string>;
  remove(name: string): Promise<void>;
}

/** Public API requests counted in the database, so every node counts against the same windows (PostgreSQL only). */
export interface SharedRateCounts {
  /**
   * Counts one request of the account in its minute and day windows, unless either is full
   * (then in neither); returns the counts after it.
   */
  consume(
    accountSeq: number,
    minute: number,
    day: number,
    perMinute: number,
    perDay: number,
  ): Promise<{ minuteCount: number; dayCount: number; allowed: boolean }>;
}
