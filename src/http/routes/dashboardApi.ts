import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Services } from '../../composition.js';
import type { DeviceInput } from '../../domain/devices.js';
import {
  presentAccount,
  presentAggregateJson,
  presentAlertDetail,
  presentAlertEventDetail,
  presentApiKey,
  presentDeviceDetail,
  presentReading,
} from '../../domain/presenters.js';
import { RANGE_NAMES, type RangeName } from '../../domain/telemetry.js';
import type { Account, Device } from '../../domain/types.js';
import { badRequest } from '../../errors.js';

/** Dashboard-side device settings (docs/api.md, "Device"): informational, kept in `settings`. */
const DATA_DIRECTIONS = ['send_only', 'receive_only', 'send_and_receive'] as const;
const NETWORKS = ['wifi', 'ethernet', '4g'] as const;
const PROTOCOLS = ['mqtt', 'http'] as const;

type DeviceBody = {
  name?: string;
  type?: string;
  description?: string;
  data_direction?: string;
  network?: string;
  protocol?: string;
  data_interval_seconds?: number | string;
  schema_mode?: string;
  fields?: unknown;
  snapshots_enabled?: boolean;
};

type AlertBody = {
  device_id?: string;
  name?: string;
  kind?: string;
  field?: string;
  operator?: string;
  value?: number | string;
  clear_value?: number | string | null;
  severity?: string;
  cooldown?: number | string;
  actions?: string[];
  webhook_url?: string | null;
  slack_url?: string | null;
  discord_url?: string | null;
  ntfy_url?: string | null;
  notify_resolved?: boolean;
  enabled?: boolean;
};

/** A form's text: empty means "not given". */
const text = (v: unknown) => (v === undefined || v === null || v === '' ? undefined : String(v));
/** A form's URL: empty or null clears it, absent keeps it. */
function urlText(v: unknown, field: string): string | null | undefined {
  if (v === undefined) return undefined;
  if (v === null || v === '') return null;
  if (typeof v !== 'string') throw badRequest(`${field} must be a string`);
  return v;
}

function oneOf<T extends string>(value: unknown, allowed: readonly T[], what: string, fallback: T): T {
  if (value === undefined || value === null || value === '') return fallback;
  if (!(allowed as readonly string[]).includes(value as string)) throw badRequest(`${what} must be one of ${allowed.join(', ')}`);
  return value as T;
}

/**
 * The dashboard-only settings from a device form. Creating, `current` is empty and what the
 * form leaves out takes its default; editing, `current` is the device's settings, so what the
 * form leaves out (or leaves empty) keeps its value.
 */
function deviceSettings(body: DeviceBody, current: Record<string, unknown> = {}) {
  const given = body.data_interval_seconds !== undefined && body.data_interval_seconds !== '';
  const interval = given ? Number(body.data_interval_seconds) : Number(current.data_interval_seconds ?? 60);
  if (!Number.isInteger(interval) || interval < 1 || interval > 7 * 86_400)
    throw badRequest('data interval must be a whole number of seconds between 1 and 604800');
  return {
    data_direction: oneOf(
      body.data_direction,
      DATA_DIRECTIONS,
      'data direction',
      known(current.data_direction, DATA_DIRECTIONS, 'send_only'),
    ),
    network: oneOf(body.network, NETWORKS, 'network', known(current.network, NETWORKS, 'wifi')),
    protocol: oneOf(body.protocol, PROTOCOLS, 'protocol', known(current.protocol, PROTOCOLS, 'mqtt')),
    data_interval_seconds: interval,
  };
}

/** A stored setting, if it is one the form offers (settings are free-form for other clients). */
function known<T extends string>(value: unknown, allowed: readonly T[], fallback: T): T {
  return (allowed as readonly string[]).includes(value as string) ? (value as T) : fallback;
}

/**
 * The domain's input from a device form, for creation (no `current`) or an edit of `current`.
 * Creating, what the body leaves out takes the defaults; editing, it keeps the device's value,
 * so a client may send only what it changes. Either way the domain (devices.ts normalize)
 * checks the values: the same checks and messages for both.
 */
function deviceInput(body: DeviceBody, current?: Device): DeviceInput {
  if (body.description !== undefined && body.description !== null && typeof body.description !== 'string')
    throw badRequest('description must be text');
  if (!current) {
    return {
      name: String(body.name ?? ''),
      type: body.type || undefined,
      description: body.description ?? '',
      schemaMode: body.schema_mode || undefined,
      fields: body.fields ?? [],
      snapshotsEnabled: body.snapshots_enabled === true,
      settings: deviceSettings(body),
    };
  }
  return {
    name: body.name === undefined ? current.name : String(body.name ?? ''),
    type: body.type || undefined,
    description: body.description ?? undefined,
    schemaMode: body.schema_mode || undefined,
    fields: body.fields,
    snapshotsEnabled: typeof body.snapshots_enabled === 'boolean' ? body.snapshots_enabled : undefined,
    // Settings the form does not know (set by another client) stay as they are.
    settings: { ...current.settings, ...deviceSettings(body, current.settings) },
  };
}

export function parseRange(value: unknown): RangeName {
  const range = (value ?? '24h') as RangeName;
  if (!RANGE_NAMES.includes(range)) throw badRequest(`range must be one of ${RANGE_NAMES.join(', ')}`);
  return range;
}

const account = (request: FastifyRequest): Account => request.dashboard!.account;

/** Devices, readings, alerts, keys and account for the dashboard (docs/dashboard.md), under /ui/api. */
export async function dashboardApiRoutes(app: FastifyInstance, { services }: { services: Services }) {
  const { devices, telemetry, alerts, keys, usage } = services;
  type IdParams = { Params: { id: string } };

  // ---- devices
  app.get('/devices', async (request) => {
    const { devices: list } = await devices.list(account(request), { limit: 100_000, offset: 0 });
    const silent = await alerts.silentDevices(account(request), list);
    return { data: list.map((d) => ({ ...presentDeviceDetail(d), silent: silent.has(d.id) })) };
  });

  app.post<{ Body: DeviceBody }>('/devices', async (request) => {
    const { device, accessToken } = await devices.create(account(request), deviceInput(request.body ?? {}));
    return { data: presentDeviceDetail(device), access_token: accessToken };
  });

  app.get<IdParams>('/devices/:id', async (request) => {
    const device = await devices.getOwned(account(request), request.params.id);
    const latest = await telemetry.latest(account(request), device);
    return { data: presentDeviceDetail(device), latest: latest ? presentReading(latest) : null };
  });

  /**
   * Edits what creation set (name, type, description, schema mode, fields, snapshots, the
   * dashboard settings); never the id, the token, the status or any reading. The domain's
   * `device.changed` tells the owner's other tabs (dashboardLive.ts) and re-checks MQTT sessions.
   */
  app.put<IdParams & { Body: DeviceBody }>('/devices/:id', async (request) => {
    const acc = account(request);
    const device = await devices.getOwned(acc, request.params.id);
    return { data: presentDeviceDetail(await devices.update(device, acc, deviceInput(request.body ?? {}, device))) };
  });

  app.post<IdParams>('/devices/:id/pause', async (request) => ({
    data: presentDeviceDetail(await devices.pause(await devices.getOwned(account(request), request.params.id))),
  }));
  app.post<IdParams>('/devices/:id/resume', async (request) => ({
    data: presentDeviceDetail(await devices.resume(await devices.getOwned(account(request), request.params.id))),
  }));
  app.post<IdParams>('/devices/:id/regenerate-token', async (request) => {
    const { device, accessToken } = await devices.regenerateToken(await devices.getOwned(account(request), request.params.id));
    return { data: presentDeviceDetail(device), access_token: accessToken };
  });

  /** Delete needs the device's name typed back (the dashboard's typed confirmation). */
  app.post<IdParams & { Body: { confirm_name?: string } }>('/devices/:id/delete', async (request) => {
    const device = await devices.getOwned(account(request), request.params.id);
    if ((request.body?.confirm_name ?? '') !== device.name) throw badRequest('type the device name exactly to confirm deletion');
    await devices.remove(device);
    return { deleted: device.id };
  });

  /** Readings of a range, newest first, capped to the plan retention like /v1 (docs/api.md, "Telemetry ranges and retention"). */
  app.get<IdParams & { Querystring: { range?: string; limit?: string } }>('/devices/:id/readings', async (request) => {
    const acc = account(request);
    const device = await devices.getOwnedForReading(acc, request.params.id);
    const requested = parseRange(request.query.range);
    const limit = Math.min(Math.max(Number(request.query.limit ?? 1000) || 1000, 1), 5000);
    const { range, readings } = await telemetry.history(acc, device, requested, limit);
    return {
      data: readings.map(presentReading),
      query: { device_id: device.id, requested_range: requested, range, limit, data_retention_days: acc.limits.retentionDays },
    };
  });

  /** Aggregates for the device page's charts: the Public API's figures (docs/api.md, "Aggregates"). */
  app.get<IdParams & { Querystring: { range?: string; interval?: string; fields?: string } }>(
    '/devices/:id/aggregate',
    async (request, reply) => {
      const acc = account(request);
      const device = await devices.getOwnedForReading(acc, request.params.id);
      const requested = parseRange(request.query.range);
      const result = await services.aggregates.aggregate(acc, device, { ...request.query, range: requested });
      return reply.type('application/json; charset=utf-8').send(presentAggregateJson(result, device, acc, requested));
    },
  );

  // ---- alerts
  app.get('/alerts', async (request) => {
    const { alerts: list } = await alerts.list(account(request), 100_000, 0);
    return { data: list.map(presentAlertDetail) };
  });

  const alertInput = (body: AlertBody) => ({
    name: String(body.name ?? ''),
    kind: text(body.kind),
    field: text(body.field) ?? (body.kind === 'no_data' ? undefined : ''),
    operator: text(body.operator),
    value: body.value === '' || body.value === undefined ? NaN : Number(body.value),
    // Empty clears it; absent keeps it.
    clearValue:
      body.clear_value === undefined ? undefined : body.clear_value === '' || body.clear_value === null ? null : Number(body.clear_value),
    severity: body.severity || undefined,
    cooldown: body.cooldown === undefined || body.cooldown === '' ? undefined : Number(body.cooldown),
    actions: Array.isArray(body.actions) ? body.actions.map(String) : undefined,
    webhookUrl: urlText(body.webhook_url, 'webhook_url'),
    slackUrl: urlText(body.slack_url, 'slack_url'),
    discordUrl: urlText(body.discord_url, 'discord_url'),
    ntfyUrl: urlText(body.ntfy_url, 'ntfy_url'),
    notifyResolved: typeof body.notify_resolved === 'boolean' ? body.notify_resolved : undefined,
    enabled: typeof body.enabled === 'boolean' ? body.enabled : undefined,
  });

  app.post<{ Body: AlertBody }>('/alerts', async (request) => {
    const body = request.body ?? {};
    const device = await devices.getOwned(account(request), String(body.device_id ?? ''));
    return { data: presentAlertDetail(await alerts.create(device, alertInput(body))) };
  });

  app.put<IdParams & { Body: AlertBody }>('/alerts/:id', async (request) => {
    const alert = await alerts.getOwned(account(request), request.params.id);
    return { data: presentAlertDetail(await alerts.update(alert, alertInput(request.body ?? {}))) };
  });

  app.post<IdParams>('/alerts/:id/enable', async (request) => ({
    data: presentAlertDetail(await alerts.setEnabled(await alerts.getOwned(account(request), request.params.id), true)),
  }));
  app.post<IdParams>('/alerts/:id/disable', async (request) => ({
    data: presentAlertDetail(await alerts.setEnabled(await alerts.getOwned(account(request), request.params.id), false)),
  }));
  app.delete<IdParams>('/alerts/:id', async (request) => {
    const alert = await alerts.getOwned(account(request), request.params.id);
    await alerts.remove(alert);
    return { deleted: alert.id };
  });

  app.get<IdParams>('/alerts/:id/history', async (request) => {
    const alert = await alerts.getOwned(account(request), request.params.id);
    return { data: await alerts.historyWithDeliveries(alert, 100) };
  });

  app.post<IdParams>('/alert-events/:id/acknowledge', async (request) => ({
    data: presentAlertEventDetail(await alerts.acknowledge(account(request), request.params.id)),
  }));

  // ---- API keys and account
  app.get('/keys', async (request) => ({ data: (await keys.list(account(request))).map(presentApiKey) }));
  app.post<{ Body: { name?: string } }>('/keys', async (request) => {
    const { key, record } = await keys.create(account(request), String(request.body?.name ?? ''));
    return { data: presentApiKey(record), key };
  });
  app.post<IdParams>('/keys/:id/revoke', async (request) => ({
    data: presentApiKey(await keys.revoke(request.params.id, account(request))),
  }));

  app.get('/account', async (request) => ({ account: presentAccount(account(request)), usage: await usage.usage(account(request)) }));

  // ---- storage: the banner shown while new readings are refused (docs/reliability.md)
  const nullableInteger = { type: ['integer', 'null'] } as const;
  app.get(
    '/storage',
    {
      schema: {
        hide: true,
        response: {
          200: {
            type: 'object',
            properties: {
              writable: { type: 'boolean' },
              reason: { type: ['string', 'null'] },
              free_bytes: nullableInteger,
              snapshots_free_bytes: nullableInteger,
              min_free_bytes: { type: 'integer' },
            },
          },
        },
      },
    },
    async () => {
      const report = services.storageStatus.report();
      return {
        writable: report.writable,
        reason: report.reason,
        free_bytes: report.freeBytes.database,
        snapshots_free_bytes: report.freeBytes.snapshots,
        min_free_bytes: report.minFreeBytes,
      };
    },
  );
}
