/**
 * Wire shapes of the resources (docs/api.md, "Resources"). One place turns
 * domain records into them, so the Public API, the CLI's --json and the dashboard agree.
 */
import { iso } from '../time.js';
import type { AggregateResult } from './aggregates.js';
import type { Account, Alert, AlertEvent, ApiKey, Device, StoredReading } from './types.js';

const readingId = (seq: number) => `tel_${seq.toString(36).padStart(8, '0')}`;

export function presentDevice(d: Device) {
  return {
    id: d.id,
    name: d.name,
    type: d.type,
    description: d.description,
    status: d.status,
    settings: d.settings,
    last_seen: iso(d.lastSeen),
    created_at: iso(d.createdAt),
    updated_at: iso(d.updatedAt),
  };
}

/** What the owner sees beyond the Public API shape (CLI and dashboard). */
export function presentDeviceDetail(d: Device) {
  return {
    ...presentDevice(d),
    schema_mode: d.schemaMode,
    fields: d.fields,
    snapshots_enabled: d.snapshotsEnabled,
    rejected_count: d.rejectedCount,
    last_rejection_reason: d.lastRejectionReason,
    last_rejection_at: iso(d.lastRejectionAt),
  };
}

export function presentReading(r: StoredReading) {
  return { id: readingId(r.seq), time: iso(r.time), data: JSON.parse(r.data) as Record<string, unknown> };
}

/**
 * The same wire shape as presentReading, as JSON text: the stored data is already JSON text
 * (written by JSON.stringify at ingest), so it is spliced in rather than parsed and
 * serialized again: a history response carries up to 1,000 readings.
 */
export function presentReadingJson(r: StoredReading): string {
  return `{"id":"${readingId(r.seq)}","time":"${iso(r.time)}","data":${r.data}}`;
}

/** `actions` names the actions only: their URLs are the owner's (presentAlertDetail). */
export function presentAlert(a: Alert) {
  return {
    id: a.id,
    device_id: a.deviceId,
    name: a.name,
    kind: a.kind,
    condition:
      a.clearValue === null
        ? { field: a.field, operator: a.operator, value: a.value }
        : { field: a.field, operator: a.operator, value: a.value, clear_value: a.clearValue },
    actions: a.actions,
    severity: a.severity,
    enabled: a.enabled,
    state: a.state,
    notify_resolved: a.notifyResolved,
    cooldown: a.cooldown,
    last_triggered: iso(a.lastTriggered),
    created_at: iso(a.createdAt),
    updated_at: iso(a.updatedAt),
  };
}

export function presentAlertDetail(a: Alert) {
  return { ...presentAlert(a), webhook_url: a.webhookUrl, slack_url: a.slackUrl, discord_url: a.discordUrl, ntfy_url: a.ntfyUrl };
}

export function presentAlertEvent(e: AlertEvent) {
  return {
    id: e.id,
    device_id: e.deviceId,
    condition_value: e.conditionValue,
    severity: e.severity,
    acknowledged: e.acknowledged,
    acknowledged_at: iso(e.acknowledgedAt),
    triggered_at: iso(e.triggeredAt),
    resolved_at: iso(e.resolvedAt),
  };
}

const presentDelivery = (d: AlertEvent['deliveries'][number]) => ({
  action: d.action,
  status: d.status,
  detail: d.detail ?? null,
  attempts: d.attempts ?? null,
  at: iso(d.at),
});

/**
 * The event plus each action's delivery outcome, of the trigger and of the resolution
 * notice: the owner's view (dashboard), not /v1.
 */
export function presentAlertEventDetail(e: AlertEvent) {
  return {
    ...presentAlertEvent(e),
    deliveries: e.deliveries.map(presentDelivery),
    resolution_deliveries: e.resolutionDeliveries.map(presentDelivery),
  };
}

export function presentApiKey(k: ApiKey) {
  return {
    id: k.id,
    key_prefix: k.keyPrefix,
    name: k.name,
    last_used_at: iso(k.lastUsedAt),
    created_at: iso(k.createdAt),
    revoked_at: iso(k.revokedAt),
  };
}

export function presentAccount(a: Account) {
  return {
    id: a.id,
    email: a.email,
    name: a.name,
    plan: a.plan,
    status: a.status,
    limits: {
      rate_per_minute: a.limits.ratePerMinute,
      rate_per_day: a.limits.ratePerDay,
      device_limit: a.limits.deviceLimit,
      retention_days: a.limits.retentionDays,
      snapshots_per_day: a.limits.snapshotsPerDay,
      snapshot_retention_days: a.limits.snapshotRetentionDays,
      field_limit: a.limits.fieldLimit,
    },
    created_at: iso(a.createdAt),
    updated_at: iso(a.updatedAt),
  };
}

/**
 * The aggregate endpoints' body (Public API and dashboard), as JSON text: the buckets are
 * already JSON (aggregate service), written as they are like the history's readings.
 */
export function presentAggregateJson(
  result: AggregateResult,
  device: Device,
  account: Account,
  requestedRange: string | undefined,
): string {
  const query = {
    device_id: device.id,
    requested_range: requestedRange,
    range: result.range,
    interval: result.interval,
    fields: result.fields,
    data_retention_days: account.limits.retentionDays,
  };
  return `{"data":${result.dataJson},"query":${JSON.stringify(query)}}`;
}
