import type { ActionDelivery, Alert, AlertAction, AlertEvent, AlertOperator } from '../../domain/types.js';
import type { Db } from '../db.js';

interface AlertRow {
  seq: number;
  id: string;
  account_seq: number;
  device_seq: number;
  device_id: string;
  name: string;
  field: string;
  operator: AlertOperator;
  value: number;
  actions: string;
  webhook_url: string | null;
  severity: string;
  enabled: number;
  cooldown: number;
  last_triggered: number | null;
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
  reading_seq: number | null;
  deliveries: string;
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
        field: r.field,
        operator: r.operator,
        value: r.value,
        actions: JSON.parse(r.actions) as AlertAction[],
        webhookUrl: r.webhook_url,
        severity: r.severity,
        enabled: r.enabled === 1,
        cooldown: r.cooldown,
        lastTriggered: r.last_triggered,
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
        readingSeq: r.reading_seq,
        deliveries: JSON.parse(r.deliveries) as ActionDelivery[],
      }
    : null;

const SELECT = 'SELECT a.*, d.id AS device_id FROM alerts a JOIN devices d ON d.seq = a.device_seq';

export type NewAlert = Pick<
  Alert,
  | 'id'
  | 'accountSeq'
  | 'deviceSeq'
  | 'name'
  | 'field'
  | 'operator'
  | 'value'
  | 'actions'
  | 'webhookUrl'
  | 'severity'
  | 'enabled'
  | 'cooldown'
> & { now: number };

export function alertsRepo(db: Db) {
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
  const insert = db.prepare(`INSERT INTO alerts (id, account_seq, device_seq, name, field, operator, value, actions, webhook_url,
      severity, enabled, cooldown, created_at, updated_at)
    VALUES (@id, @accountSeq, @deviceSeq, @name, @field, @operator, @value, @actions, @webhookUrl, @severity, @enabled, @cooldown, @now, @now)`);
  const update = db.prepare(`UPDATE alerts SET name = @name, field = @field, operator = @operator, value = @value, actions = @actions,
      webhook_url = @webhookUrl, severity = @severity, enabled = @enabled, cooldown = @cooldown, updated_at = @now WHERE seq = @seq`);
  const setEnabled = db.prepare('UPDATE alerts SET enabled = ?, updated_at = ? WHERE seq = ?');
  const setLastTriggered = db.prepare('UPDATE alerts SET last_triggered = ? WHERE seq = ?');
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

  const alertParams = (a: Omit<NewAlert, 'id' | 'accountSeq' | 'deviceSeq'>) => ({
    name: a.name,
    field: a.field,
    operator: a.operator,
    value: a.value,
    actions: JSON.stringify(a.actions),
    webhookUrl: a.webhookUrl,
    severity: a.severity,
    enabled: a.enabled ? 1 : 0,
    cooldown: a.cooldown,
    now: a.now,
  });

  return {
    findById: (id: string) => toAlert(byId.get(id)),
    findBySeq: (seq: number) => toAlert(bySeq.get(seq)),
    listByAccount: (accountSeq: number, limit: number, offset: number) => page.all(accountSeq, limit, offset).map((r) => toAlert(r)!),
    count: (accountSeq: number) => countAll.get(accountSeq)!.n,
    countEnabled: (accountSeq: number) => countEnabled.get(accountSeq)!.n,
    enabledOfDevice: (deviceSeq: number) => enabledOfDevice.all(deviceSeq).map((r) => toAlert(r)!),
    listByDevice: (deviceSeq: number) => ofDevice.all(deviceSeq).map((r) => toAlert(r)!),
    insert: (a: NewAlert) => insert.run({ id: a.id, accountSeq: a.accountSeq, deviceSeq: a.deviceSeq, ...alertParams(a) }),
    update: (seq: number, a: Omit<NewAlert, 'id' | 'accountSeq' | 'deviceSeq'>) => update.run({ seq, ...alertParams(a) }),
    setEnabled: (seq: number, enabled: boolean, now: number) => setEnabled.run(enabled ? 1 : 0, now, seq),
    setLastTriggered: (seq: number, at: number) => setLastTriggered.run(at, seq),
    remove: (seq: number) => remove.run(seq),

    findEventById: (id: string) => toEvent(eventById.get(id)),
    history: (alertSeq: number, limit: number) => history.all(alertSeq, limit).map((r) => toEvent(r)!),
    insertEvent: (e: Omit<AlertEvent, 'seq' | 'acknowledged' | 'acknowledgedAt'>) =>
      Number(insertEvent.run({ ...e, deliveries: JSON.stringify(e.deliveries) }).lastInsertRowid),
    acknowledgeEvent: (seq: number, now: number) => acknowledge.run(now, seq),
    setDeliveries: (seq: number, deliveries: ActionDelivery[]) => setDeliveries.run(JSON.stringify(deliveries), seq),
  };
}
