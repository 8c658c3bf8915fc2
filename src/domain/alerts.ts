import { badRequest, notFound } from '../errors.js';
import { newId } from '../ids.js';
import type { Repositories } from '../storage/index.js';
import type { Clock } from '../time.js';
import type { DomainEvents } from './events.js';
import { presentAlertEventDetail } from './presenters.js';
import {
  type Account,
  ALERT_ACTIONS,
  ALERT_OPERATORS,
  ALERT_SEVERITIES,
  type Alert,
  type AlertAction,
  type AlertOperator,
  type Device,
} from './types.js';

export interface AlertInput {
  name: string;
  field: string;
  operator: string;
  value: number;
  severity?: string;
  cooldown?: number;
  actions?: string[];
  webhookUrl?: string | null;
  enabled?: boolean;
}

/** Validates an alert definition: operators, severities, actions (docs/api.md, "Alert"). */
function validateAlertInput(input: AlertInput, existing?: Alert) {
  const name = (input.name ?? existing?.name ?? '').trim();
  if (!name) throw badRequest('an alert needs a name');
  const field = (input.field ?? existing?.field ?? '').trim();
  if (!field || !/^[^.\s]+(\.[^.\s]+)*$/.test(field)) throw badRequest('field must be a field name or a dotted path such as env.temp');
  const operator = input.operator ?? existing?.operator;
  if (!(ALERT_OPERATORS as readonly string[]).includes(operator as string)) {
    throw badRequest(`unknown operator "${operator}" (one of ${ALERT_OPERATORS.join(' ')})`);
  }
  const value = Number(input.value ?? existing?.value);
  if (!Number.isFinite(value)) throw badRequest('value must be a number');
  const severity = input.severity ?? existing?.severity ?? 'warning';
  if (!(ALERT_SEVERITIES as readonly string[]).includes(severity))
    throw badRequest(`unknown severity "${severity}" (one of ${ALERT_SEVERITIES.join(', ')})`);
  const cooldown = input.cooldown ?? existing?.cooldown ?? 300;
  if (!Number.isInteger(cooldown) || cooldown < 0) throw badRequest('cooldown must be a whole number of seconds >= 0');
  const actions = [...new Set(input.actions ?? existing?.actions ?? ['email'])];
  for (const a of actions) {
    if (!(ALERT_ACTIONS as readonly string[]).includes(a)) throw badRequest(`unknown action "${a}" (one of ${ALERT_ACTIONS.join(', ')})`);
  }
  const webhookUrl = input.webhookUrl === undefined ? (existing?.webhookUrl ?? null) : input.webhookUrl || null;
  if (actions.includes('webhook')) {
    if (!webhookUrl) throw badRequest('the webhook action needs a webhook URL');
    let url: URL;
    try {
      url = new URL(webhookUrl);
    } catch {
      throw badRequest(`invalid webhook URL "${webhookUrl}"`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw badRequest('webhook URL must be http:// or https://');
  }
  return {
    name,
    field,
    operator: operator as AlertOperator,
    value,
    severity,
    cooldown,
    actions: actions as AlertAction[],
    webhookUrl,
    enabled: input.enabled ?? existing?.enabled ?? true,
  };
}

/**
 * Alert CRUD for the dashboard and the CLI. Every change emits 'alert.changed' so the
 * evaluator (alerts/evaluator.ts) drops its cache; a change made by the CLI, another
 * process, reaches it as 'external.change' instead.
 */
export function alertService(repos: Repositories, clock: Clock, events?: DomainEvents) {
  const changed = (alertId: string, change: 'created' | 'updated' | 'enabled' | 'disabled' | 'deleted') =>
    events?.emit('alert.changed', { alertId, change });

  function getOwned(account: Account, id: string): Alert {
    const alert = repos.alerts.findById(id);
    if (!alert || alert.accountSeq !== account.seq) throw notFound('alert not found');
    return alert;
  }

  function getAny(id: string): Alert {
    const alert = repos.alerts.findById(id);
    if (!alert) throw notFound(`no alert ${id}`);
    return alert;
  }

  return {
    getOwned,
    getAny,
    list: (account: Account, limit: number, offset: number) => ({
      alerts: repos.alerts.listByAccount(account.seq, limit, offset),
      total: repos.alerts.count(account.seq),
    }),

    /** Alerts of one device, oldest first (dashboard device page). */
    listForDevice: (device: Device) => repos.alerts.listByDevice(device.seq),

    create(device: Device, input: AlertInput): Alert {
      const values = validateAlertInput(input);
      const id = newId('alert');
      repos.alerts.insert({ id, accountSeq: device.accountSeq, deviceSeq: device.seq, ...values, now: clock.now() });
      changed(id, 'created');
      return repos.alerts.findById(id)!;
    },

    update(alert: Alert, input: Partial<AlertInput>): Alert {
      const values = validateAlertInput(input as AlertInput, alert);
      repos.alerts.update(alert.seq, { ...values, now: clock.now() });
      changed(alert.id, 'updated');
      return repos.alerts.findById(alert.id)!;
    },

    setEnabled(alert: Alert, enabled: boolean): Alert {
      repos.alerts.setEnabled(alert.seq, enabled, clock.now());
      changed(alert.id, enabled ? 'enabled' : 'disabled');
      return repos.alerts.findById(alert.id)!;
    },

    /** Deletes the alert and its trigger history. */
    remove(alert: Alert): void {
      repos.alerts.remove(alert.seq);
      changed(alert.id, 'deleted');
    },

    /** Trigger events, newest first (docs/api.md, "Pagination and page sizes"). */
    history: (alert: Alert, limit: number) => repos.alerts.history(alert.seq, limit),

    /**
     * The Alert trigger event shape plus each action's delivery outcome (pending, sent,
     * failed with a reason, not_configured), for the dashboard; the Public API shows only
     * the fields of docs/api.md, "Alert trigger event".
     */
    historyWithDeliveries: (alert: Alert, limit: number) => repos.alerts.history(alert.seq, limit).map(presentAlertEventDetail),

    /** Sets acknowledged and acknowledged_at = now; idempotent. */
    acknowledge(account: Account, eventId: string) {
      const event = repos.alerts.findEventById(eventId);
      const alert = event ? repos.alerts.findBySeq(event.alertSeq) : null;
      if (!event || !alert || alert.accountSeq !== account.seq) throw notFound('alert event not found');
      repos.alerts.acknowledgeEvent(event.seq, clock.now());
      return repos.alerts.findEventById(eventId)!;
    },
  };
}
