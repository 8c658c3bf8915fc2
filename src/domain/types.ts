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
export const ALERT_ACTIONS = ['email', 'webhook'] as const;
export type AlertAction = (typeof ALERT_ACTIONS)[number];

export interface Alert {
  seq: number;
  id: string;
  accountSeq: number;
  deviceSeq: number;
  deviceId: string;
  name: string;
  field: string;
  operator: AlertOperator;
  value: number;
  actions: AlertAction[];
  webhookUrl: string | null;
  severity: string;
  enabled: boolean;
  cooldown: number;
  lastTriggered: number | null;
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
  readingSeq: number | null;
  deliveries: ActionDelivery[];
}
