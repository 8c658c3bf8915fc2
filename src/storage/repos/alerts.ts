import type { ActionDelivery, Alert, AlertAction, AlertEvent, AlertKind, AlertState } from '../../domain/types.js';
import type { Db } from '../db.js';
import type { AlertChanges, AlertOutcome, NewAlert, NewAlertEvent, NoDataWatch, RecordedOutcome } from '../repositories.js';

interface AlertRow {
  seq: number;
  id: string;
  account_seq: number;
  device_seq: number;
  device_id: string;
  name: string;
  kind: AlertKind;
  field: string;
  operator: Alert['operator'];
  value: number;
  clear_value: number | null;
  actions: string;
  webhook_url: string | null;
  slack_url: string | null;
  discord_url: string | null;
  ntfy_url: string | null;
  severity: string;
  enabled: number;
  state: AlertState;
  notify_resolved: number;
  cooldown: number;
  last_triggered: number | null;
  enabled_at: number;
  created_at: number;
  updated_at: number;
}

interface EventRow {
  seq: number;
  id: string;
  alert_seq: number;
  device_id: string;
  condition_value: number;
  severity: string;
  acknowledged: number;
  acknowledged_at: number | null;
  triggered_at: number;
  resolved_at: number | null;
  reading_seq: number | null;
  deliveries: string;
  resolution_deliveries: string;
}

const toAlert = (r: AlertRow | undefined): Alert | null =>
  r
    ? {
        seq: r.seq,
        id: r.id,
        accountSeq: r.account_seq,
        deviceSeq: r.device_seq,
        deviceId: r.device_id,
        name: r.name,
        kind: r.kind,
        field: r.field,
        operator: r.operator,
        value: r.value,
        clearValue: r.clear_value,
        actions: JSON.parse(r.actions) as AlertAction[],
        webhookUrl: r.webhook_url,
        slackUrl: r.slack_url,
        discordUrl: r.discord_url,
        ntfyUrl: r.ntfy_url,
        severity: r.severity,
        enabled: r.enabled === 1,
        state: r.state,
        notifyResolved: r.notify_resolved === 1,
        cooldown: r.cooldown,
        lastTriggered: r.last_triggered,
        enabledAt: r.enabled_at,
        createdAt: r.created_at,
        updatedAt: r.updated_at,
      }
    : null;

const toEvent = (r: EventRow | undefined): AlertEvent | null =>
  r
    ? {
        seq: r.seq,
        id: r.id,
        alertSeq: r.alert_seq,
        deviceId: r.device_id,
        conditionValue: r.condition_value,
        severity: r.severity,
        acknowledged: r.acknowledged === 1,
        acknowledgedAt: r.acknowledged_at,
        triggeredAt: r.triggered_at,
        resolvedAt: r.resolved_at,
        readingSeq: r.reading_seq,
        deliveries: JSON.parse(r.deliveries) as ActionDelivery[],
        resolutionDeliveries: JSON.parse(r.resolution_deliveries) as ActionDelivery[],
      }
    : null;

const SELECT = 'SELECT a.*, d.id AS device_id FROM alerts a JOIN devices d ON d.seq = a.device_seq';

export function alertsRepo(db: Db) {
  let abandonedAdopted = false;
  // A scan of the events, once per server start (adoptAbandonedDeliveries).
  const leftPending = db.prepare<[], { id: string; triggered: number; resolved: number }>(
    `SELECT id, deliveries LIKE '%"status":"pending"%' AS triggered, resolution_deliveries LIKE '%"status":"pending"%' AS resolved
     FROM alert_events WHERE deliveries LIKE '%"status":"pending"%' OR resolution_deliveries LIKE '%"status":"pending"%' ORDER BY seq`,
  );
  const byId = db.prepare<[string], AlertRow>(`${SELECT} WHERE a.id = ?`);
  const bySeq = db.prepare<[number], AlertRow>(`${SELECT} WHERE a.seq = ?`);
  const page = db.prepare<[number, number, number], AlertRow>(
    `${SELECT} WHERE a.account_seq = ? ORDER BY a.created_at, a.seq LIMIT ? OFFSET ?`,
  );
  const countAll = db.prepare<[number], { n: number }>('SELECT count(*) AS n FROM alerts WHERE account_seq = ?');
  const countEnabled = db.prepare<[number], { n: number }>('SELECT count(*) AS n FROM alerts WHERE account_seq = ? AND enabled = 1');
  // Uses alerts_by_device: the evaluator's cache is filled from here, never by a scan.
  const enabledOfDevice = db.prepare<[number], AlertRow>(`${SELECT} WHERE a.device_seq = ? AND a.enabled = 1`);
  const ofDevice = db.prepare<[number], AlertRow>(`${SELECT} WHERE a.device_seq = ? ORDER BY a.created_at, a.seq`);
  // Uses the partial index alerts_no_data; paused devices and suspended accounts are left out.
  const noDataWatches = db.prepare<[], AlertRow & { device_resumed_at: number | null }>(
    `SELECT a.*, d.id AS device_id, d.resumed_at AS device_resumed_at FROM alerts a
       JOIN devices d ON d.seq = a.device_seq JOIN accounts ac ON ac.seq = a.account_seq
     WHERE a.kind = 'no_data' AND a.enabled = 1 AND d.status = 'active' AND ac.status = 'active'`,
  );
  const firingNoData = db
    .prepare<[number], string>(
      `SELECT DISTINCT d.id FROM alerts a JOIN devices d ON d.seq = a.device_seq
       WHERE a.account_seq = ? AND a.kind = 'no_data' AND a.enabled = 1 AND a.state = 'firing'`,
    )
    .pluck();
  const insert = db.prepare(`INSERT INTO alerts (id, account_seq, device_seq, name, kind, field, operator, value, clear_value, actions,
      webhook_url, slack_url, discord_url, ntfy_url, severity, enabled, notify_resolved, cooldown, enabled_at, created_at, updated_at)
    VALUES (@id, @accountSeq, @deviceSeq, @name, @kind, @field, @operator, @value, @clearValue, @actions, @webhookUrl, @slackUrl,
      @discordUrl, @ntfyUrl, @severity, @enabled, @notifyResolved, @cooldown, @now, @now, @now)`);
  // Enabling a disabled alert moves enabled_at: a no_data silence counts from then at the earliest.
  const update = db.prepare(`UPDATE alerts SET name = @name, kind = @kind, field = @field, operator = @operator, value = @value,
      clear_value = @clearValue, actions = @actions, webhook_url = @webhookUrl, slack_url = @slackUrl, discord_url = @discordUrl,
      ntfy_url = @ntfyUrl, severity = @severity, notify_resolved = @notifyResolved, cooldown = @cooldown,
      enabled_at = CASE WHEN @enabled = 1 AND enabled = 0 THEN @now ELSE enabled_at END, enabled = @enabled, updated_at = @now
    WHERE seq = @seq`);
  const setEnabled = db.prepare(
    'UPDATE alerts SET enabled_at = CASE WHEN @enabled = 1 AND enabled = 0 THEN @now ELSE enabled_at END, enabled = @enabled, updated_at = @now WHERE seq = @seq',
  );
  const setLastTriggered = db.prepare<{ at: number; seq: number }>(
    'UPDATE alerts SET last_triggered = max(coalesce(last_triggered, @at), @at) WHERE seq = @seq',
  );
  const setState = db.prepare<[AlertState, number]>('UPDATE alerts SET state = ? WHERE seq = ?');
  const changedSince = db.prepare<
    { seq: number; kind: string | null; field: string | null; operator: string | null; value: number | null },
    { seq: number }
  >(
    `SELECT seq FROM alerts WHERE seq = @seq
       AND (enabled = 0 OR (@kind IS NOT NULL AND (kind IS NOT @kind OR field IS NOT @field OR operator IS NOT @operator OR value IS NOT @value)))`,
  );
  const remove = db.prepare('DELETE FROM alerts WHERE seq = ?');

  const eventById = db.prepare<[string], EventRow>('SELECT * FROM alert_events WHERE id = ?');
  // History newest first (docs/api.md, "Pagination and page sizes").
  const history = db.prepare<[number, number], EventRow>(
    'SELECT * FROM alert_events WHERE alert_seq = ? ORDER BY triggered_at DESC, seq DESC LIMIT ?',
  );
  const insertEvent =
    db.prepare(`INSERT INTO alert_events (id, alert_seq, device_id, condition_value, severity, triggered_at, reading_seq, deliveries)
    VALUES (@id, @alertSeq, @deviceId, @conditionValue, @severity, @triggeredAt, @readingSeq, @deliveries)`);
  const acknowledge = db.prepare('UPDATE alert_events SET acknowledged = 1, acknowledged_at = ? WHERE seq = ? AND acknowledged = 0');
  const setDeliveries = db.prepare('UPDATE alert_events SET deliveries = ? WHERE seq = ?');
  const setResolutionDeliveries = db.prepare('UPDATE alert_events SET resolution_deliveries = ? WHERE seq = ?');
  // The latest event of the alert is the one of the current firing (alert_events_by_alert).
  const openEvent = db.prepare<[number], EventRow>(
    'SELECT * FROM alert_events WHERE alert_seq = ? AND resolved_at IS NULL ORDER BY triggered_at DESC, seq DESC LIMIT 1',
  );
  const resolveEvent = db.prepare<[number, string, number]>(
    'UPDATE alert_events SET resolved_at = ?, resolution_deliveries = ? WHERE seq = ?',
  );

  const alertParams = (a: AlertChanges) => ({
    name: a.name,
    kind: a.kind,
    field: a.field,
    operator: a.operator,
    value: a.value,
    clearValue: a.clearValue,
    actions: JSON.stringify(a.actions),
    webhookUrl: a.webhookUrl,
    slackUrl: a.slackUrl,
    discordUrl: a.discordUrl,
    ntfyUrl: a.ntfyUrl,
    severity: a.severity,
    enabled: a.enabled ? 1 : 0,
    notifyResolved: a.notifyResolved ? 1 : 0,
    cooldown: a.cooldown,
    now: a.now,
  });

  const insertEventRow = (e: NewAlertEvent): number =>
    Number(
      insertEvent.run({
        id: e.id,
        alertSeq: e.alertSeq,
        deviceId: e.deviceId,
        conditionValue: e.conditionValue,
        severity: e.severity,
        triggeredAt: e.triggeredAt,
        readingSeq: e.readingSeq,
        deliveries: JSON.stringify(e.deliveries),
      }).lastInsertRowid,
    );

  /** A firing alert goes back to `ok`; its open event is resolved at `now` without notices. */
  const endFiring = (seq: number, now: number) => {
    if (bySeq.get(seq)?.state !== 'firing') return;
    const open = openEvent.get(seq);
    if (open) resolveEvent.run(now, '[]', open.seq);
    setState.run('ok', seq);
  };
  const updateTx = db.transaction((seq: number, a: AlertChanges, endsFiring: boolean) => {
    update.run({ seq, ...alertParams(a) });
    if (endsFiring) endFiring(seq, a.now);
  });
  const setEnabledTx = db.transaction((seq: number, enabled: boolean, now: number) => {
    setEnabled.run({ enabled: enabled ? 1 : 0, now, seq });
    if (!enabled) endFiring(seq, now);
  });

  // A savepoint per item (a nested better-sqlite3 transaction): one that fails is rolled back
  // alone, inside the batch's transaction.
  const recordOne = db.transaction((o: AlertOutcome): AlertEvent | null => {
    if (o.type === 'triggered') {
      // Evaluated against the cached alert, which another process (the CLI) may have disabled
      // or changed since: such a trigger records nothing (the alert stays as the change left it).
      const c = o.condition;
      const current = {
        seq: o.alertSeq,
        kind: c?.kind ?? null,
        field: c?.field ?? null,
        operator: c?.operator ?? null,
        value: c?.value ?? null,
      };
      if (changedSince.get(current)) return null;
      const seq = insertEventRow(o.event);
      setLastTriggered.run({ at: o.event.triggeredAt, seq: o.alertSeq });
      setState.run('firing', o.alertSeq);
      return { ...o.event, seq, acknowledged: false, acknowledgedAt: null, resolvedAt: null, resolutionDeliveries: [] };
    }
    setState.run('ok', o.alertSeq);
    const open = toEvent(openEvent.get(o.alertSeq));
    if (!open) return null;
    resolveEvent.run(o.at, JSON.stringify(o.notices), open.seq);
    return { ...open, resolvedAt: o.at, resolutionDeliveries: o.notices };
  });
  const recordOutcomes = db.transaction((batch: AlertOutcome[]): RecordedOutcome[] =>
    batch.map((o) => {
      try {
        return { event: recordOne(o) };
      } catch (error) {
        return { event: null, error };
      }
    }),
  );

  return {
    findById: (id: string) => toAlert(byId.get(id)),
    findBySeq: (seq: number) => toAlert(bySeq.get(seq)),
    listByAccount: (accountSeq: number, limit: number, offset: number) => page.all(accountSeq, limit, offset).map((r) => toAlert(r)!),
    count: (accountSeq: number) => countAll.get(accountSeq)!.n,
    countEnabled: (accountSeq: number) => countEnabled.get(accountSeq)!.n,
    enabledOfDevice: (deviceSeq: number) => enabledOfDevice.all(deviceSeq).map((r) => toAlert(r)!),
    listByDevice: (deviceSeq: number) => ofDevice.all(deviceSeq).map((r) => toAlert(r)!),
    insert: (a: NewAlert) => void insert.run({ id: a.id, accountSeq: a.accountSeq, deviceSeq: a.deviceSeq, ...alertParams(a) }),
    update: (seq: number, a: AlertChanges, endFiring: boolean): void => updateTx.immediate(seq, a, endFiring),
    setEnabled: (seq: number, enabled: boolean, now: number): void => setEnabledTx.immediate(seq, enabled, now),
    noDataWatches: (): NoDataWatch[] => noDataWatches.all().map((r) => ({ alert: toAlert(r)!, deviceResumedAt: r.device_resumed_at })),
    firingNoDataDeviceIds: (accountSeq: number): string[] => firingNoData.all(accountSeq),
    remove: (seq: number) => void remove.run(seq),
    recordOutcomes: (batch: AlertOutcome[]): RecordedOutcome[] => recordOutcomes.immediate(batch),

    findEventById: (id: string) => toEvent(eventById.get(id)),
    history: (alertSeq: number, limit: number) => history.all(alertSeq, limit).map((r) => toEvent(r)!),
    /** One event row as recordOutcomes inserts it (tests that need an event without a trigger). */
    insertEvent: insertEventRow,
    acknowledgeEvent: (seq: number, now: number) => void acknowledge.run(now, seq),
    setDeliveries: (seq: number, deliveries: ActionDelivery[]) => void setDeliveries.run(JSON.stringify(deliveries), seq),
    setResolutionDeliveries: (seq: number, deliveries: ActionDelivery[]) =>
      void setResolutionDeliveries.run(JSON.stringify(deliveries), seq),
    /**
     * One server at a time sends the deliveries of a SQLite database, and a clean stop records
     * what it could not finish as failed: a delivery still `pending` when a server starts was
     * left by one that crashed. The server asks once, as it starts its jobs, before it has
     * recorded anything itself; later calls find nothing to adopt.
     */
    adoptAbandonedDeliveries: (): { eventId: string; type: 'triggered' | 'resolved' }[] => {
      if (abandonedAdopted) return [];
      abandonedAdopted = true;
      return leftPending
        .all()
        .flatMap((r) => [
          ...(r.triggered ? [{ eventId: r.id, type: 'triggered' as const }] : []),
          ...(r.resolved ? [{ eventId: r.id, type: 'resolved' as const }] : []),
        ]);
    },
  };
}

// The row and its mapping, shared with the PostgreSQL repository (postgres/repos/alerts.ts) so both backends
// hand the domain the same objects.
export { type AlertRow, type EventRow, toAlert, toEvent };
