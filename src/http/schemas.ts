/**
 * JSON schemas of the Public API resources (docs/api.md, "Resources").
 * Routes declare them for validation, fast serialization and the OpenAPI document.
 */
const timestamp = { type: 'string', format: 'date-time' } as const;
const nullableTimestamp = { type: ['string', 'null'], format: 'date-time' } as const;

const errorSchema = {
  $id: 'Error',
  type: 'object',
  properties: { error: { type: 'string' } },
  required: ['error'],
} as const;

const deviceSchema = {
  $id: 'Device',
  type: 'object',
  properties: {
    id: { type: 'string' },
    name: { type: 'string' },
    type: { type: 'string' },
    description: { type: 'string' },
    status: { type: 'string', enum: ['active', 'paused'] },
    settings: { type: 'object', additionalProperties: true },
    last_seen: nullableTimestamp,
    created_at: timestamp,
    updated_at: timestamp,
  },
  required: ['id', 'name', 'type', 'description', 'status', 'settings', 'last_seen', 'created_at', 'updated_at'],
} as const;

const readingSchema = {
  $id: 'TelemetryReading',
  type: 'object',
  properties: {
    id: { type: 'string' },
    time: timestamp,
    data: { type: 'object', additionalProperties: true },
  },
  required: ['id', 'time', 'data'],
} as const;

const alertSchema = {
  $id: 'Alert',
  type: 'object',
  properties: {
    id: { type: 'string' },
    device_id: { type: 'string' },
    name: { type: 'string' },
    kind: { type: 'string', enum: ['threshold', 'no_data'] },
    condition: {
      type: 'object',
      properties: {
        field: { type: 'string', description: 'a field or dotted path; `*` (any reading) for no_data' },
        operator: { type: 'string', description: '> >= < <= == != or no_data' },
        value: { type: 'number', description: 'the threshold, or the silence in seconds (no_data)' },
        clear_value: { type: 'number', description: 'threshold alerts: resolve only once the value crosses back over it' },
      },
      required: ['field', 'operator', 'value'],
    },
    actions: { type: 'array', items: { type: 'string' } },
    severity: { type: 'string' },
    enabled: { type: 'boolean' },
    state: { type: 'string', enum: ['ok', 'firing'] },
    notify_resolved: { type: 'boolean' },
    cooldown: { type: 'integer', description: 'seconds' },
    last_triggered: nullableTimestamp,
    created_at: timestamp,
    updated_at: timestamp,
  },
  required: [
    'id',
    'device_id',
    'name',
    'kind',
    'condition',
    'actions',
    'severity',
    'enabled',
    'state',
    'notify_resolved',
    'cooldown',
    'last_triggered',
    'created_at',
    'updated_at',
  ],
} as const;

const alertEventSchema = {
  $id: 'AlertTriggerEvent',
  type: 'object',
  properties: {
    id: { type: 'string' },
    device_id: { type: 'string' },
    condition_value: { type: 'number', description: 'the value that met the condition, or the silence in seconds (no_data)' },
    severity: { type: 'string' },
    acknowledged: { type: 'boolean' },
    acknowledged_at: nullableTimestamp,
    triggered_at: timestamp,
    resolved_at: nullableTimestamp,
  },
  required: ['id', 'device_id', 'condition_value', 'severity', 'acknowledged', 'acknowledged_at', 'triggered_at', 'resolved_at'],
} as const;

const apiKeySchema = {
  $id: 'ApiKey',
  type: 'object',
  properties: {
    id: { type: 'string' },
    key_prefix: { type: 'string' },
    name: { type: 'string' },
    last_used_at: nullableTimestamp,
    created_at: timestamp,
    revoked_at: nullableTimestamp,
  },
  required: ['id', 'key_prefix', 'name', 'last_used_at', 'created_at', 'revoked_at'],
} as const;

const usageSchema = {
  $id: 'AccountUsage',
  type: 'object',
  properties: {
    plan: {
      type: 'object',
      properties: {
        plan: { type: 'string' },
        status: { type: 'string' },
        device_limit: { type: 'integer' },
        data_retention_days: { type: 'integer' },
        current_period_start: timestamp,
        current_period_end: timestamp,
      },
      required: ['plan', 'status', 'device_limit', 'data_retention_days', 'current_period_start', 'current_period_end'],
    },
    devices: {
      type: 'object',
      properties: { total: { type: 'integer' }, active: { type: 'integer' }, paused: { type: 'integer' }, limit: { type: 'integer' } },
      required: ['total', 'active', 'paused', 'limit'],
    },
    telemetry: { type: 'object', properties: { data_points_24h: { type: 'integer' } }, required: ['data_points_24h'] },
    alerts: { type: 'object', properties: { total: { type: 'integer' }, active: { type: 'integer' } }, required: ['total', 'active'] },
  },
  required: ['plan', 'devices', 'telemetry', 'alerts'],
} as const;

const aggregateBucketSchema = {
  $id: 'AggregateBucket',
  type: 'object',
  properties: {
    time: { ...timestamp, description: 'start of the bucket (UTC)' },
    values: {
      type: 'object',
      description: 'per field path with a value in this bucket',
      additionalProperties: {
        type: 'object',
        properties: {
          count: { type: 'integer' },
          min: { type: 'number' },
          max: { type: 'number' },
          avg: { type: 'number', description: 'sum / count as a double' },
        },
        required: ['count', 'min', 'max', 'avg'],
      },
    },
  },
  required: ['time', 'values'],
} as const;

export const paginationSchema = {
  type: 'object',
  properties: { total: { type: 'integer' }, limit: { type: 'integer' }, offset: { type: 'integer' } },
  required: ['total', 'limit', 'offset'],
} as const;

export const SHARED_SCHEMAS = [
  errorSchema,
  deviceSchema,
  readingSchema,
  alertSchema,
  alertEventSchema,
  apiKeySchema,
  usageSchema,
  aggregateBucketSchema,
];

export const ref = (id: string) => ({ $ref: `${id}#` });

/** Error responses every authenticated Public API route may give. */
export const publicErrorResponses = {
  400: ref('Error'),
  401: ref('Error'),
  403: ref('Error'),
  404: ref('Error'),
  429: ref('Error'),
  500: ref('Error'),
};
