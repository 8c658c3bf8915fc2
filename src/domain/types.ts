import type { PlanLimits } from './plans.js';

/** Domain records. Times are epoch milliseconds; presenters turn them into ISO strings. */

export interface Account {
  seq: number;
  id: string;
  email: string;
  name: string;
  plan: string;
  status: 'active' | 'suspended';
  limits: PlanLimits;
  webhookSecret: string | null;
  passwordHash: string | null;
  createdAt: number;
  updatedAt: number;
}

export interface ApiKey {
  seq: number;
  id: string;
  accountSeq: number;
  name: string;
  keyPrefix: string;
  lastUsedAt: number | null;
  createdAt: number;
  revokedAt: number | null;
}

export interface FieldDefinition {
  name: string;
  label: string;
  unit: string;
}

export const DEVICE_TYPES = ['sensor', 'camera', 'gateway', 'actuator', 'other'] as const;
export type SchemaMode = 'strict' | 'flexible';

export interface Device {
  seq: number;
  id: string;
  accountSeq: number;
  name: string;
  type: string;
  description: string;
  status: 'active' | 'paused';
  settings: Record<string, unknown>;
  schemaMode: SchemaMode;
  fields: FieldDefinition[];
  snapshotsEnabled: boolean;
  lastSeen: number | null;
  /** When the device was last resumed after a pause (null if never paused and resumed). */
  resumedAt: number | null;
  rejectedCount: number;
  lastRejectionReason: string | null;
  lastRejectionAt: number | null;
  createdAt: number;
  updatedAt: number;
}

/** A stored reading; `data` stays the JSON text the pipeline stored, so reads can splice it. */
export interface StoredReading {
  seq: number;
  deviceSeq: number;
  time: number;
  data: string;
}

export const ALERT_OPERATORS = ['>', '>=', '<', '<=', '==', '!='] as const;
export type AlertOperator = (typeof ALERT_OPERATORS)[number];
export const ALERT_SEVERITIES = ['info', 'warning', 'critical'] as const;
export const ALERT_ACTIONS = ['email', 'webhook', 'slack', 'discord', 'ntfy'] as const;
export type AlertAction = (typeof ALERT_ACTIONS)[number];
/** Actions that POST to a URL of the alert's own (`webhook_url`, `slack_url`, …). */
export type UrlAction = Exclude<AlertAction, 'email'>;
export const ALERT_KINDS = ['threshold', 'no_data'] as const;
export type AlertKind = (typeof ALERT_KINDS)[number];
export type AlertState = 'ok' | 'firing';
/** A no_data alert's silence bounds, in seconds. */
export const NO_DATA_MIN_SECONDS = 10;
export const NO_DATA_MAX_SECONDS = 2_592_000;

export interface Alert {
  seq: number;
  id: string;
  accountSeq: number;
  deviceSeq: number;
  deviceId: string;
  name: string;
  kind: AlertKind;
  /** `*` (any reading) or a path for no_data alerts. */
  field: string;
  /** `no_data` for no_data alerts. */
  operator: AlertOperator | 'no_data';
  /** The threshold, or the silence in seconds of a no_data alert. */
  value: number;
  /** Threshold alerts only: the number the value must cross back over to resolve. */
  clearValue: number | null;
  actions: AlertAction[];
  webhookUrl: string | null;
  slackUrl: string | null;
  discordUrl: string | null;
  ntfyUrl: string | null;
  severity: string;
  enabled: boolean;
  state: AlertState;
  notifyResolved: boolean;
  cooldown: number;
  lastTriggered: number | null;
  /** When the alert was created or last enabled: a no_data silence counts from here at the earliest. */
  enabledAt: number;
  createdAt: number;
  updatedAt: number;
}

export interface ActionDelivery {
  action: AlertAction;
  status: 'pending' | 'sent' | 'failed' | 'not_configured';
  /** Why it failed or was not attempted. */
  detail?: string;
  /** Webhook attempts made (retries included). */
  attempts?: number;
  /** When the status was last set (epoch ms). */
  at: number;
}

export interface AlertEvent {
  seq: number;
  id: string;
  alertSeq: number;
  deviceId: string;
  conditionValue: number;
  severity: string;
  acknowledged: boolean;
  acknowledgedAt: number | null;
  triggeredAt: number;
  /** When the firing this event belongs to ended; null while it lasts. */
  resolvedAt: number | null;
  /** The reading that met the condition; null for a no_data trigger. */
  readingSeq: number | null;
  deliveries: ActionDelivery[];
  /** Outcomes of the resolution notice, one per action; empty until one is sent. */
  resolutionDeliveries: ActionDelivery[];
}
