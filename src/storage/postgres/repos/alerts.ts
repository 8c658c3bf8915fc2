import type { Pool } from 'pg';
import type { ActionDelivery, Alert, AlertEvent, AlertState } from '../../../domain/types.js';
import { type AlertRow, type EventRow, toAlert, toEvent } from '../../repos/alerts.js';
import type { AlertChanges, AlertOutcome, AlertsRepository, NewAlert, NoDataWatch, RecordedOutcome } from '../../repositories.js';
import { NODE_LOCK_CLASS } from '../leadership.js';
import { inTransaction, prepared, type Queryable } from './sql.js';

// Booleans come out as 0/1, as SQLite stores them, so the SQLite repository's row mapping
// (toAlert, toEvent) is the one both backends use.
const ALERT = `a.seq, a.id, a.account_seq, a.device_seq, d.id AS device_id, a.name, a.kind, a.field, a.operator, a.value,
  a.clear_value, a.actions, a.webhook_url, a.slack_url, a.discord_url, a.ntfy_url, a.severity, a.enabled::int AS enabled,
  a.state, a.notify_resolved::int AS notify_resolved, a.cooldown, a.last_triggered, a.enabled_at, a.created_at, a.updated_at`;
const SELECT = `SELECT ${ALERT} FROM alerts a JOIN devices d ON d.seq = a.device_seq`;
const EVENT = `seq, id, alert_seq, device_id, condition_value, severity, acknowledged::int AS acknowledged, acknowledged_at,
  triggered_at, resolved_at, reading_seq, deliveries, resolution_deliveries`;

const byId = prepared<AlertRow>('alert-by-id', `${SELECT} WHERE a.id = $1`);
const bySeq = prepared<AlertRow>('alert-by-seq', `${SELECT} WHERE a.seq = $1`);
const page = prepared<AlertRow>('alerts-page', `${SELECT} WHERE a.account_seq = $1 ORDER BY a.created_at, a.seq LIMIT $2 OFFSET $3`);
const countAll = prepared<{ n: number }>('alerts-count', 'SELECT count(*) AS n FROM alerts WHERE account_seq = $1');
const countEnabled = prepared<{ n: number }>('alerts-count-enabled', 'SELECT count(*) AS n FROM alerts WHERE account_seq = $1 AND enabled');
// alerts_by_device: the evaluator's cache is filled from here, never by a scan. Ordered so
// both backends list them alike (SQLite's comes in index order, which is this one).
const enabledOfDevice = prepared<AlertRow>('alerts-enabled-of-device', `${SELECT} WHERE a.device_seq = $1 AND a.enabled ORDER BY a.seq`);
const ofDevice = prepared<AlertRow>('alerts-of-device', `${SELECT} WHERE a.device_seq = $1 ORDER BY a.created_at, a.seq`);
// The partial index alerts_no_data; paused devices and suspended accounts are left out.
const noDataWatches = prepared<AlertRow & { device_resumed_at: number | null }>(
  'alerts-no-data-watches',
  `SELECT ${ALERT}, d.resumed_at AS device_resumed_at FROM alerts a
     JOIN devices d ON d.seq = a.device_seq JOIN accounts ac ON ac.seq = a.account_seq
   WHERE a.kind = 'no_data' AND a.enabled AND d.status = 'active' AND ac.status = 'active' ORDER BY a.seq`,
);
const firingNoData = prepared<{ id: string }>(
  'alerts-firing-no-data',
  `SELECT DISTINCT d.id FROM alerts a JOIN devices d ON d.seq = a.device_seq
   WHERE a.account_seq = $1 AND a.kind = 'no_data' AND a.enabled AND a.state = 'firing' ORDER BY d.id`,
);
const insert = prepared(
  'alert-insert',
  `INSERT INTO alerts (id, account_seq, device_seq, name, kind, field, operator, value, clear_value, actions, webhook_url,
     slack_url, discord_url, ntfy_url, severity, enabled, notify_resolved, cooldown, enabled_at, created_at, updated_at)
   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $19, $19)`,
);
// Enabling a disabled alert moves enabled_at: a no_data silence counts from then at the earliest.
const update = prepared(
  'alert-update',
  `UPDATE alerts SET name = $2, kind = $3, field = $4, operator = $5, value = $6, clear_value = $7, actions = $8,
     webhook_url = $9, slack_url = $10, discord_url = $11, ntfy_url = $12, severity = $13, notify_resolved = $15,
     cooldown = $16, enabled_at = CASE WHEN $14 AND NOT enabled THEN $17 ELSE enabled_at END, enabled = $14, updated_at = $17
   WHERE seq = $1`,
);
const setEnabled = prepared(
  'alert-set-enabled',
  `UPDATE alerts SET enabled_at = CASE WHEN $2 AND NOT enabled THEN $3 ELSE enabled_at END, enabled = $2, updated_at = $3
   WHERE seq = $1`,
);
// A trigger claims the alert: several nodes evaluate readings of one device at once, and the
// row tells which of them fires. A threshold alert is claimed past its cooldown (with no
// cooldown, by every matching reading: each is evaluated once, by the node that stored it,
// and batches of one node may commit out of order), a no_data alert while it is `ok`; either
// only while enabled and with the condition it was evaluated against ($3, when given): the
// evaluator's cached alert may have been disabled or changed since, and such a trigger
// records nothing. The row lock taken here makes a concurrent claim (or a change of the
// alert) wait, and the condition is then checked again on its values.
const claimTrigger = prepared<{ seq: number }>(
  'alert-claim-trigger',
  `UPDATE alerts SET last_triggered = greatest(coalesce(last_triggered, $2), $2), state = 'firing'
   WHERE seq = $1 AND enabled
     AND ($3::text IS NULL OR (kind = $3 AND field = $4::text AND operator = $5::text AND value = $6::double precision))
     AND CASE WHEN kind = 'no_data' THEN state = 'ok'
     ELSE cooldown = 0 OR last_triggered IS NULL OR $2 >= last_triggered + cooldown * 1000 END
   RETURNING seq`,
);
// A resolution applies to a firing alert, from a reading not older than its trigger: one
// evaluated by another node at the same time as a newer trigger resolves nothing.
const claimResolution = prepared<{ seq: number }>(
  'alert-claim-resolution',
  `UPDATE alerts SET state = 'ok' WHERE seq = $1 AND state = 'firing' AND (last_triggered IS NULL OR last_triggered <= $2)
   RETURNING seq`,
);
const setState = prepared('alert-set-state', 'UPDATE alerts SET state = $2 WHERE seq = $1');
// The alerts of a batch of outcomes, locked in seq order before any is recorded: two nodes
// whose readings came in different orders record the same alerts in different orders, and
// claiming them one by one, each held one row and waited for the other's, until PostgreSQL
// ended one of the items as a deadlock (its trigger or resolution lost).
const lockAlerts = prepared('alerts-lock', 'SELECT 1 FROM alerts WHERE seq = ANY($1::bigint[]) ORDER BY seq FOR NO KEY UPDATE');
const stateForUpdate = prepared<{ state: AlertState }>('alert-state-for-update', 'SELECT state FROM alerts WHERE seq = $1 FOR UPDATE');
const remove = prepared('alert-remove', 'DELETE FROM alerts WHERE seq = $1');

const eventById = prepared<EventRow>('event-by-id', `SELECT ${EVENT} FROM alert_events WHERE id = $1`);
// History newest first (docs/api.md, "Pagination and page sizes").
const history = prepared<EventRow>(
  'events-history',
  `SELECT ${EVENT} FROM alert_events WHERE alert_seq = $1 ORDER BY triggered_at DESC, seq DESC LIMIT $2`,
);
const insertEvent = prepared<{ seq: number }>(
  'event-insert',
  `INSERT INTO alert_events (id, alert_seq, device_id, condition_value, severity, triggered_at, reading_seq, deliveries)
   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq`,
);
const acknowledge = prepared(
  'event-acknowledge',
  'UPDATE alert_events SET acknowledged = true, acknowledged_at = $2 WHERE seq = $1 AND NOT acknowledged',
);
// An outcome written; with none pending any more, the notice's owner row goes in the same
// statement (nothing is left to adopt).
const setDeliveries = prepared(
  'event-set-deliveries',
  `WITH updated AS (UPDATE alert_events SET deliveries = $2 WHERE seq = $1)
   DELETE FROM delivery_owners WHERE event_seq = $1 AND notice = 'triggered' AND NOT $3`,
);
const setResolutionDeliveries = prepared(
  'event-set-resolution-deliveries',
  `WITH updated AS (UPDATE alert_events SET resolution_deliveries = $2 WHERE seq = $1)
   DELETE FROM delivery_owners WHERE event_seq = $1 AND notice = 'resolved' AND NOT $3`,
);
const ownDeliveries = prepared(
  'delivery-own',
  `INSERT INTO delivery_owners (event_seq, notice, node_key, since) VALUES ($1, $2, $3, $4)
   ON CONFLICT (event_seq, notice) DO UPDATE SET node_key = excluded.node_key, since = excluded.since`,
);
/** Whether the node named by o.node_key holds its lock (leadership.ts), NODE_LOCK_CLASS being parameter `lockClass`: it runs. */
const nodeRuns = (lockClass: string) => `EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
  AND l.classid = ${lockClass}::bigint::oid AND l.objid = o.node_key::bigint::oid AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`;
// A node without its lock may have stopped or been killed, or only lost the connection that
// holds it (a PostgreSQL restart, a network cut) and be still sending, connecting again
// within its poll (leadership.ts). So the first look notes when a delivery's node was found
// without its lock (unowned_since), and forgets it when the node has its lock again.
const noteUnowned = prepared(
  'delivery-note-unowned',
  `UPDATE delivery_owners o SET unowned_since = CASE WHEN ${nodeRuns('$3')} THEN NULL ELSE $2::bigint END
   WHERE o.node_key <> $1 AND (o.unowned_since IS NULL) = NOT ${nodeRuns('$3')}`,
);
// Pending deliveries whose node has been without its lock for the grace, and last claimed at
// least the grace ago, claimed for this node in one statement: two adopters cannot both get one.
const adoptDeliveries = prepared<{ id: string; notice: 'triggered' | 'resolved' }>(
  'delivery-adopt',
  `UPDATE delivery_owners o SET node_key = $1, since = $2, unowned_since = NULL
   FROM alert_events e
   WHERE e.seq = o.event_seq AND o.node_key <> $1 AND o.since <= $2::bigint - $3::bigint
     AND o.unowned_since <= $2::bigint - $3::bigint AND NOT ${nodeRuns('$4')}
   RETURNING e.id, o.notice`,
);
const hasPending = (deliveries: ActionDelivery[]) => deliveries.some((d) => d.status === 'pending');
// The latest event of the alert is the one of the current firing (alert_events_by_alert).
const openEvent = prepared<EventRow>(
  'event-open',
  `SELECT ${EVENT} FROM alert_events WHERE alert_seq = $1 AND resolved_at IS NULL ORDER BY triggered_at DESC, seq DESC LIMIT 1`,
);
const resolveEvent = prepared('event-resolve', 'UPDATE alert_events SET resolved_at = $2, resolution_deliveries = $3 WHERE seq = $1');

/** The alert's columns from name to cooldown, in the order of both statements. */
const alertValues = (a: AlertChanges) => [
  a.name,
  a.kind,
  a.field,
  a.operator,
  a.value,
  a.clearValue,
  JSON.stringify(a.actions),
  a.webhookUrl,
  a.slackUrl,
  a.discordUrl,
  a.ntfyUrl,
  a.severity,
  a.enabled,
  a.notifyResolved,
  a.cooldown,
];

/**
 * A firing alert whose condition changed or that is disabled goes back to 'ok', and its open
 * event gets resolved_at without resolution deliveries (nothing was seen to recover). The
 * alert row is locked first, so the evaluator of another process cannot record a change of
 * the same alert in between.
 */
async function endFiring(db: Queryable, seq: number, now: number): Promise<void> {
  const current = await stateForUpdate.first(db, [seq]);
  if (current?.state !== 'firing') return;
  const open = await openEvent.first(db, [seq]);
  if (open) await resolveEvent.run(db, [open.seq, now, '[]']);
  await setState.run(db, [seq, 'ok']);
}

/** Alerts and their events on PostgreSQL (AlertsRepository, src/storage/repositories.ts). */
export function postgresAlertsRepo(pool: Pool, nodeKey: number): AlertsRepository {
  return {
    findById: async (id: string): Promise<Alert | null> => toAlert(await byId.first(pool, [id])),
    findBySeq: async (seq: number): Promise<Alert | null> => toAlert(await bySeq.first(pool, [seq])),
    listByAccount: async (accountSeq: number, limit: number, offset: number): Promise<Alert[]> =>
      (await page.rows(pool, [accountSeq, limit, offset])).map((r) => toAlert(r)!),
    count: async (accountSeq: number): Promise<number> => (await countAll.first(pool, [accountSeq]))!.n,
    countEnabled: async (accountSeq: number): Promise<number> => (await countEnabled.first(pool, [accountSeq]))!.n,
    enabledOfDevice: async (deviceSeq: number): Promise<Alert[]> => (await enabledOfDevice.rows(pool, [deviceSeq])).map((r) => toAlert(r)!),
    listByDevice: async (deviceSeq: number): Promise<Alert[]> => (await ofDevice.rows(pool, [deviceSeq])).map((r) => toAlert(r)!),
    async insert(a: NewAlert): Promise<void> {
      await insert.run(pool, [a.id, a.accountSeq, a.deviceSeq, ...alertValues(a), a.now]);
    },
    /** The definition, and with `ending`, a firing ended (endFiring above): one transaction. */
    update: (seq: number, a: AlertChanges, ending: boolean): Promise<void> =>
      inTransaction(pool, async (client) => {
        await update.run(client, [seq, ...alertValues(a), a.now]);
        if (ending) await endFiring(client, seq, a.now);
      }),
    /** Enables or disables; disabling ends a firing (endFiring above): one transaction. */
    setEnabled: (seq: number, enabled: boolean, now: number): Promise<void> =>
      inTransaction(pool, async (client) => {
        await setEnabled.run(client, [seq, enabled, now]);
        if (!enabled) await endFiring(client, seq, now);
      }),
    noDataWatches: async (): Promise<NoDataWatch[]> =>
      (await noDataWatches.rows(pool, [])).map((r) => ({ alert: toAlert(r)!, deviceResumedAt: r.device_resumed_at })),
    firingNoDataDeviceIds: async (accountSeq: number): Promise<string[]> => (await firingNoData.rows(pool, [accountSeq])).map((r) => r.id),
    async remove(seq: number): Promise<void> {
      await remove.run(pool, [seq]);
    },
    /**
     * The evaluator's outcomes in one transaction, each under a savepoint of its own: one
     * that fails (its alert was deleted after the reading was evaluated: the foreign key
     * refuses the event) is rolled back alone and reported in its result's `error`.
     */
    recordOutcomes: (batch: AlertOutcome[]): Promise<RecordedOutcome[]> =>
      inTransaction(pool, async (client) => {
        if (batch.length > 1) await lockAlerts.run(client, [[...new Set(batch.map((o) => o.alertSeq))]]);
        const results: RecordedOutcome[] = [];
        for (const o of batch) {
          await client.query('SAVEPOINT outcome');
          try {
            results.push({ event: await recordOutcome(client, o, nodeKey) });
            await client.query('RELEASE SAVEPOINT outcome');
          } catch (error) {
            await client.query('ROLLBACK TO SAVEPOINT outcome');
            results.push({ event: null, error });
          }
        }
        return results;
      }),

    findEventById: async (id: string): Promise<AlertEvent | null> => toEvent(await eventById.first(pool, [id])),
    history: async (alertSeq: number, limit: number): Promise<AlertEvent[]> =>
      (await history.rows(pool, [alertSeq, limit])).map((r) => toEvent(r)!),
    async acknowledgeEvent(seq: number, now: number): Promise<void> {
      await acknowledge.run(pool, [seq, now]);
    },
    async setDeliveries(seq: number, deliveries: ActionDelivery[]): Promise<void> {
      await setDeliveries.run(pool, [seq, JSON.stringify(deliveries), hasPending(deliveries)]);
    },
    async setResolutionDeliveries(seq: number, deliveries: ActionDelivery[]): Promise<void> {
      await setResolutionDeliveries.run(pool, [seq, JSON.stringify(deliveries), hasPending(deliveries)]);
    },
    adoptAbandonedDeliveries: async (now: number, graceMs: number) => {
      await noteUnowned.run(pool, [nodeKey, now, NODE_LOCK_CLASS]);
      return (await adoptDeliveries.rows(pool, [nodeKey, now, graceMs, NODE_LOCK_CLASS])).map((r) => ({ eventId: r.id, type: r.notice }));
    },
  };
}
/**
 * One outcome; null when it records nothing: a trigger whose claim failed (another node
 * triggered the alert within its cooldown, or fired the no_data alert already), a resolution
 * of an alert no longer firing. Neither has an event, so neither is announced nor delivered.
 */
async function recordOutcome(db: Queryable, o: AlertOutcome, nodeKey: number): Promise<AlertEvent | null> {
  if (o.type === 'triggered') {
    const e = o.event;
    const c = o.condition;
    if (
      !(await claimTrigger.first(db, [o.alertSeq, e.triggeredAt, c?.kind ?? null, c?.field ?? null, c?.operator ?? null, c?.value ?? null]))
    ) {
      // An alert deleted meanwhile is a failed item, as its event's foreign key makes it on SQLite.
      if (!(await bySeq.first(db, [o.alertSeq]))) throw new Error(`alert ${o.alertSeq} no longer exists`);
      return null;
    }
    const { seq } = (await insertEvent.first(db, [
      e.id,
      e.alertSeq,
      e.deviceId,
      e.conditionValue,
      e.severity,
      e.triggeredAt,
      e.readingSeq,
      JSON.stringify(e.deliveries),
    ]))!;
    if (hasPending(e.deliveries)) await ownDeliveries.run(db, [seq, 'triggered', nodeKey, e.triggeredAt]);
    return { seq, ...e, acknowledged: false, acknowledgedAt: null, resolvedAt: null, resolutionDeliveries: [] };
  }
  if (!(await claimResolution.first(db, [o.alertSeq, o.at]))) return null;
  const open = toEvent(await openEvent.first(db, [o.alertSeq]));
  if (!open) return null;
  await resolveEvent.run(db, [open.seq, o.at, JSON.stringify(o.notices)]);
  if (hasPending(o.notices)) await ownDeliveries.run(db, [open.seq, 'resolved', nodeKey, o.at]);
  return { ...open, resolvedAt: o.at, resolutionDeliveries: o.notices };
}
