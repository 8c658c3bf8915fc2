import { badRequest, notFound } from '../errors.js';
import { newId } from '../ids.js';
import type { Repositories } from '../storage/repositories.js';
import type { Clock } from '../time.js';
import type { DomainEvents } from './events.js';
import { presentAlertEventDetail } from './presenters.js';
import {
  type Account,
  ALERT_ACTIONS,
  ALERT_KINDS,
  ALERT_OPERATORS,
  ALERT_SEVERITIES,
  type Alert,
  type AlertAction,
  type AlertKind,
  type AlertOperator,
  type Device,
  NO_DATA_MAX_SECONDS,
  NO_DATA_MIN_SECONDS,
  type UrlAction,
} from './types.js';

/** A year: longer is no cooldown anyone means, and the column is a 32-bit integer on PostgreSQL. */
const MAX_COOLDOWN_S = 31_536_000;

export interface AlertInput {
  name: string;
  /** `threshold` (default) or `no_data`; an operator of `no_data` implies it. */
  kind?: string;
  field?: string;
  operator?: string;
  /** The threshold, or a no_data alert's silence in seconds. */
  value?: number;
  clearValue?: number | null;
  severity?: string;
  cooldown?: number;
  actions?: string[];
  webhookUrl?: string | null;
  slackUrl?: string | null;
  discordUrl?: string | null;
  ntfyUrl?: string | null;
  notifyResolved?: boolean;
  enabled?: boolean;
}

const FIELD_PATH = /^[^.\s]+(\.[^.\s]+)*$/;

const URL_FIELDS = { webhook: 'webhookUrl', slack: 'slackUrl', discord: 'discordUrl', ntfy: 'ntfyUrl' } as const;
const URL_ACTIONS = Object.keys(URL_FIELDS) as UrlAction[];

/**
 * clear_value is where a firing alert resolves (hysteresis), so it must lie strictly on the
 * side the value leaves the condition by: below the threshold for > and >=, above it for <
 * and <=. On the other side the alert would resolve as soon as the condition stops holding,
 * as if it had none; equal to the threshold there is no band between firing and resolving
 * (with >= and <= it changes nothing at all), so it is refused too.
 */
function checkClearSide(operator: AlertOperator, value: number, clearValue: number) {
  const below = operator === '>' || operator === '>=';
  if (below ? clearValue < value : clearValue > value) return;
  throw badRequest(
    `clear_value must be ${below ? 'below' : 'above'} the threshold for the ${operator} operator (got clear_value ${clearValue}, value ${value})`,
  );
}

function urlOf(action: UrlAction, input: AlertInput, existing: Alert | undefined): string | null {
  const key = URL_FIELDS[action];
  const raw = input[key] === undefined ? (existing?.[key] ?? null) : input[key]?.trim() || null;
  if (raw !== null) {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw badRequest(`invalid ${action} URL "${raw}"`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw badRequest(`${action} URL must be http:// or https://`);
  }
  return raw;
}

/**
 * Validates an alert definition (docs/alerts.md): operators, severities and actions, the
 * no_data kind, clear_value and the channel URLs. `existing` fills what an update leaves out.
 */
function validateAlertInput(input: AlertInput, existing?: Alert) {
  const name = (input.name ?? existing?.name ?? '').trim();
  if (!name) throw badRequest('an alert needs a name');
  const kindIn = input.kind ?? (input.operator === 'no_data' ? 'no_data' : (existing?.kind ?? 'threshold'));
  if (!(ALERT_KINDS as readonly string[]).includes(kindIn))
    throw badRequest(`unknown alert kind "${kindIn}" (one of ${ALERT_KINDS.join(', ')})`);
  const kind = kindIn as AlertKind;
  // A change of kind starts the condition afresh rather than mixing in the other kind's parts.
  const sameKind = existing?.kind === kind ? existing : undefined;

  let field: string;
  let operator: Alert['operator'];
  let value: number;
  let clearValue: number | null;
  if (kind === 'no_data') {
    field = (input.field ?? sameKind?.field ?? '*').trim() || '*';
    if (field !== '*' && !FIELD_PATH.test(field))
      throw badRequest('field must be * (any reading) or a field name or dotted path such as env.temp');
    if (input.operator !== undefined && input.operator !== 'no_data') throw badRequest('a no_data alert takes no operator');
    operator = 'no_data';
    value = Number(input.value ?? sameKind?.value);
    if (!Number.isInteger(value) || value < NO_DATA_MIN_SECONDS || value > NO_DATA_MAX_SECONDS) {
      throw badRequest(`a no_data alert needs a whole number of seconds from ${NO_DATA_MIN_SECONDS} to ${NO_DATA_MAX_SECONDS}`);
    }
    if (input.clearValue !== undefined && input.clearValue !== null) throw badRequest('clear_value applies to threshold alerts only');
    clearValue = null;
  } else {
    field = (input.field ?? sameKind?.field ?? '').trim();
    if (!field || !FIELD_PATH.test(field)) throw badRequest('field must be a field name or a dotted path such as env.temp');
    const op = input.operator ?? sameKind?.operator;
    if (!(ALERT_OPERATORS as readonly string[]).includes(op as string)) {
      throw badRequest(`unknown operator "${op}" (one of ${ALERT_OPERATORS.join(' ')})`);
    }
    operator = op as AlertOperator;
    value = Number(input.value ?? sameKind?.value);
    if (!Number.isFinite(value)) throw badRequest('value must be a number');
    clearValue = input.clearValue === undefined ? (sameKind?.clearValue ?? null) : input.clearValue;
    if (clearValue !== null) {
      if (typeof clearValue !== 'number' || !Number.isFinite(clearValue)) throw badRequest('clear_value must be a number');
      if (operator === '==' || operator === '!=')
        throw badRequest(`clear_value does not apply to the ${operator} operator (only > >= < <=)`);
      checkClearSide(operator, value, clearValue);
    }
  }

  const severity = input.severity ?? existing?.severity ?? 'warning';
  if (!(ALERT_SEVERITIES as readonly string[]).includes(severity))
    throw badRequest(`unknown severity "${severity}" (one of ${ALERT_SEVERITIES.join(', ')})`);
  const cooldown = input.cooldown ?? existing?.cooldown ?? 300;
  if (!Number.isInteger(cooldown) || cooldown < 0 || cooldown > MAX_COOLDOWN_S) {
    throw badRequest('cooldown must be a whole number of seconds from 0 to 31,536,000 (365 days)');
  }
  const actions = [...new Set(input.actions ?? existing?.actions ?? ['email'])];
  for (const a of actions) {
    if (!(ALERT_ACTIONS as readonly string[]).includes(a)) throw badRequest(`unknown action "${a}" (one of ${ALERT_ACTIONS.join(', ')})`);
  }
  const urls = {
    webhookUrl: urlOf('webhook', input, existing),
    slackUrl: urlOf('slack', input, existing),
    discordUrl: urlOf('discord', input, existing),
    ntfyUrl: urlOf('ntfy', input, existing),
  };
  for (const action of URL_ACTIONS) {
    const key = URL_FIELDS[action];
    if (actions.includes(action)) {
      if (!urls[key]) throw badRequest(`the ${action} action needs a ${action} URL`);
    } else if (input[key]?.trim()) {
      // Only its own action ever reads a URL: one given without it would be stored and never used.
      throw badRequest(`a ${action} URL is used only by the ${action} action, which the alert's actions do not include`);
    } else {
      // An edit that drops the action and leaves its stored URL unmentioned drops the URL with it.
      urls[key] = null;
    }
  }
  return {
    name,
    kind,
    field,
    operator,
    value,
    clearValue,
    severity,
    cooldown,
    actions: actions as AlertAction[],
    ...urls,
    notifyResolved: input.notifyResolved ?? existing?.notifyResolved ?? true,
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

  async function getOwned(account: Account, id: string): Promise<Alert> {
    const alert = await repos.alerts.findById(id);
    if (!alert || alert.accountSeq !== account.seq) throw notFound('alert not found');
    return alert;
  }

  async function getAny(id: string): Promise<Alert> {
    const alert = await repos.alerts.findById(id);
    if (!alert) throw notFound(`no alert ${id}`);
    return alert;
  }

  return {
    getOwned,
    getAny,
    list: async (account: Account, limit: number, offset: number) => ({
      alerts: await repos.alerts.listByAccount(account.seq, limit, offset),
      total: await repos.alerts.count(account.seq),
    }),

    /**
     * Ids of the devices (of `list`) that are silent: a no_data alert of theirs is firing, or
     * they have not been seen for more than twice their data interval (dashboard setting
     * `data_interval_seconds`, 60 s unless set). A paused or never-seen device is not silent.
     */
    async silentDevices(account: Account, list: Device[]): Promise<Set<string>> {
      const silent = new Set(await repos.alerts.firingNoDataDeviceIds(account.seq));
      const now = clock.now();
      for (const d of list) {
        if (d.status !== 'active' || d.lastSeen === null) continue;
        const interval = Number(d.settings.data_interval_seconds);
        const seconds = Number.isFinite(interval) && interval > 0 ? interval : 60;
        if (now - d.lastSeen > 2 * seconds * 1000) silent.add(d.id);
      }
      return silent;
    },

    /** Alerts of one device, oldest first (dashboard device page). */
    listForDevice: async (device: Device) => await repos.alerts.listByDevice(device.seq),

    async create(device: Device, input: AlertInput): Promise<Alert> {
      const values = validateAlertInput(input);
      const id = newId('alert');
      await repos.alerts.insert({ id, accountSeq: device.accountSeq, deviceSeq: device.seq, ...values, now: clock.now() });
      changed(id, 'created');
      return (await repos.alerts.findById(id))!;
    },

    /**
     * A firing alert that is disabled, or whose condition changes, stops watching what it
     * reported: it goes back to `ok` and its open event gets `resolved_at`, without a
     * resolution notice (nothing was observed to recover); in the update's transaction.
     */
    async update(alert: Alert, input: Partial<AlertInput>): Promise<Alert> {
      const values = validateAlertInput(input as AlertInput, alert);
      const now = clock.now();
      const conditionChanged =
        values.kind !== alert.kind ||
        values.field !== alert.field ||
        values.operator !== alert.operator ||
        values.value !== alert.value ||
        values.clearValue !== alert.clearValue;
      await repos.alerts.update(alert.seq, { ...values, now }, conditionChanged || !values.enabled);
      changed(alert.id, 'updated');
      return (await repos.alerts.findById(alert.id))!;
    },

    /** Disabling ends a firing as update does. */
    async setEnabled(alert: Alert, enabled: boolean): Promise<Alert> {
      await repos.alerts.setEnabled(alert.seq, enabled, clock.now());
      changed(alert.id, enabled ? 'enabled' : 'disabled');
      return (await repos.alerts.findById(alert.id))!;
    },

    /** Deletes the alert and its trigger history. */
    async remove(alert: Alert): Promise<void> {
      await repos.alerts.remove(alert.seq);
      changed(alert.id, 'deleted');
    },

    /** Trigger events, newest first (docs/api.md, "Pagination and page sizes"). */
    history: async (alert: Alert, limit: number) => await repos.alerts.history(alert.seq, limit),

    /**
     * The Alert trigger event shape plus each action's delivery outcome (pending, sent,
     * failed with a reason, not_configured), for the dashboard; the Public API shows only
     * the fields of docs/api.md, "Alert trigger event".
     */
    historyWithDeliveries: async (alert: Alert, limit: number) =>
      (await repos.alerts.history(alert.seq, limit)).map(presentAlertEventDetail),

    /** Sets acknowledged and acknowledged_at = now; idempotent. */
    async acknowledge(account: Account, eventId: string) {
      const event = await repos.alerts.findEventById(eventId);
      const alert = event ? await repos.alerts.findBySeq(event.alertSeq) : null;
      if (!event || !alert || alert.accountSeq !== account.seq) throw notFound('alert event not found');
      await repos.alerts.acknowledgeEvent(event.seq, clock.now());
      return (await repos.alerts.findEventById(eventId))!;
    },
  };
}
