import type { FastifyInstance } from 'fastify';
import type { Services } from '../../composition.js';
import { INTERVAL_NAMES, MAX_FIELDS } from '../../domain/aggregates.js';
import { planHasApiAccess } from '../../domain/plans.js';
import {
  presentAggregateJson,
  presentAlert,
  presentAlertEvent,
  presentApiKey,
  presentDevice,
  presentReading,
  presentReadingJson,
} from '../../domain/presenters.js';
import type { RateLimitState } from '../../domain/rateLimit.js';
import { RANGE_NAMES, type RangeName } from '../../domain/telemetry.js';
import type { Account } from '../../domain/types.js';
import { type AppError, badRequest, forbidden } from '../../errors.js';
import { bearerToken } from '../bearer.js';
import { errorBody } from '../errors.js';
import { paginationSchema, publicErrorResponses, ref } from '../schemas.js';

declare module 'fastify' {
  interface FastifyRequest {
    account?: Account;
  }
}

/** Page sizes (docs/api.md, "Pagination and page sizes"); a limit above the max is clamped. */
const LIMITS = { devices: [50, 100], alerts: [50, 100], history: [50, 100], telemetry: [100, 1000] } as const;
const clamp = (value: number | undefined, [def, max]: readonly [number, number]) => Math.min(value ?? def, max);

// The maximum matters: an offset past 2^53 would reach SQLite as a float; it is a 400
// (docs/api.md, "Pagination and page sizes"). Infinity ("1e309") is refused by the preValidation hook below.
const limitParam = ([def, max]: readonly [number, number]) =>
  ({
    type: 'integer',
    minimum: 1,
    maximum: Number.MAX_SAFE_INTEGER,
    default: def,
    description: `page size, ${def} unless given; a larger one than ${max} gives ${max}`,
  }) as const;
const offsetParam = { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER, default: 0 } as const;

/** The four headers every counted response carries (docs/api.md, "Rate limits"), for the OpenAPI document. */
const RATE_HEADERS = {
  'X-RateLimit-Limit': { type: 'integer', description: "requests per minute of the account's plan" },
  'X-RateLimit-Remaining': { type: 'integer', description: 'requests left in the current UTC minute' },
  'X-RateLimit-Daily-Limit': { type: 'integer', description: "requests per UTC day of the account's plan" },
  'X-RateLimit-Daily-Remaining': { type: 'integer', description: 'requests left in the current UTC day' },
} as const;
const idParams = { type: 'object', properties: { id: { type: 'string', maxLength: 200 } }, required: ['id'] } as const;

/**
 * The body of a range query over one device's telemetry (history and aggregates): its rows,
 * and the query as answered, with the range after capping to retention plus `extra` fields.
 */
function rangeResponse(items: object, extra: Record<string, object>) {
  const queryProperties = {
    device_id: { type: 'string' },
    requested_range: { type: 'string' },
    range: { type: 'string' },
    ...extra,
    data_retention_days: { type: 'integer' },
  };
  return {
    type: 'object',
    properties: {
      data: { type: 'array', items },
      query: { type: 'object', properties: queryProperties, required: Object.keys(queryProperties) },
    },
    required: ['data', 'query'],
  } as const;
}

function setRateHeaders(reply: { header(k: string, v: string): unknown }, s: RateLimitState) {
  reply.header('X-RateLimit-Limit', String(s.limit));
  reply.header('X-RateLimit-Remaining', String(s.remaining));
  reply.header('X-RateLimit-Daily-Limit', String(s.dailyLimit));
  reply.header('X-RateLimit-Daily-Remaining', String(s.dailyRemaining));
}

/** The read-only Public API under /v1 (docs/api.md, "Public API endpoints"). */
export async function publicApiRoutes(app: FastifyInstance, { services }: { services: Services }) {
  const { keys, devices, telemetry, aggregates, alerts, usage, rateLimiter } = services;

  // Authentication, plan gating and rate limiting, in that order: 401, then 403 (no rate
  // headers), then the limit; every counted request carries the four headers, errors included.
  app.addHook('onRequest', async (request, reply) => {
    if ((request.routeOptions.config as { public?: boolean }).public) return;
    const { account } = await keys.authenticate(bearerToken(request));
    if (!planHasApiAccess(account.plan)) throw forbidden('the free plan has no Public API access; upgrade to starter or above');
    try {
      setRateHeaders(reply, await rateLimiter.consume(account));
    } catch (err) {
      const state = (err as { rateLimit?: RateLimitState }).rateLimit;
      if (state) setRateHeaders(reply, state);
      throw err as AppError;
    }
    request.account = account;
  });

  // limit and offset are whole decimal numbers, checked here with one wording before ajv's
  // coercion, which takes whatever Number() takes ("0x10", " 10", "1e2") and turns "1e309"
  // into an Infinity that passes minimum and maximum. Only where the route takes them:
  // elsewhere unknown parameters are ignored.
  app.addHook('preValidation', async (request) => {
    const declared = (request.routeOptions.schema?.querystring as { properties?: Record<string, unknown> } | undefined)?.properties;
    if (!declared) return;
    const query = request.query as Record<string, unknown>;
    for (const name of ['limit', 'offset'] as const) {
      const value = query[name];
      if (!(name in declared) || value === undefined) continue;
      const smallest = name === 'limit' ? 1 : 0;
      if (typeof value !== 'string' || !/^[0-9]{1,16}$/.test(value) || Number(value) < smallest || Number(value) > Number.MAX_SAFE_INTEGER)
        throw badRequest(`${name} must be ${name === 'limit' ? 'a positive' : 'a non-negative'} integer of at most 2^53 - 1`);
    }
  });

  // An unknown path under /v1 is a 404 after the key, plan and rate limit checks above, like
  // any other request with a key (docs/api.md, "Rate limits").
  app.setNotFoundHandler((request, reply) => reply.code(404).send(errorBody(request.url, 'not found')));

  // What every route's responses have in common, for the OpenAPI document: the rate headers on
  // a 200, and a 414 where the path holds an id (an id over 200 characters is refused first).
  app.addHook('onRoute', (route) => {
    const response = route.schema?.response as Record<string, object> | undefined;
    if (!response?.[200]) return;
    response[200] = { ...response[200], headers: RATE_HEADERS };
    if (route.url.includes(':id')) response[414] = ref('Error');
  });

  const tags = ['Public API'];
  const security = [{ bearerAuth: [] }];

  app.get<{ Querystring: { limit?: number; offset: number; status?: 'active' | 'paused' } }>(
    '/devices',
    {
      schema: {
        tags,
        security,
        operationId: 'listDevices',
        summary: 'List devices',
        querystring: {
          type: 'object',
          properties: { limit: limitParam(LIMITS.devices), offset: offsetParam, status: { type: 'string', enum: ['active', 'paused'] } },
        },
        response: {
          200: {
            type: 'object',
            properties: { data: { type: 'array', items: ref('Device') }, pagination: paginationSchema },
            required: ['data', 'pagination'],
          },
          ...publicErrorResponses,
        },
      },
    },
    async (request) => {
      const limit = clamp(request.query.limit, LIMITS.devices);
      const { offset, status } = request.query;
      const page = await devices.list(request.account!, { limit, offset, status });
      return { data: page.devices.map(presentDevice), pagination: { total: page.total, limit, offset } };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/devices/:id',
    {
      schema: {
        tags,
        security,
        operationId: 'getDevice',
        summary: 'Get a device',
        params: idParams,
        response: { 200: { type: 'object', properties: { data: ref('Device') }, required: ['data'] }, ...publicErrorResponses },
      },
    },
    async (request) => ({ data: presentDevice(await devices.getOwned(request.account!, request.params.id)) }),
  );

  app.get<{ Params: { id: string } }>(
    '/devices/:id/telemetry/latest',
    {
      schema: {
        tags,
        security,
        operationId: 'getLatestReading',
        summary: 'Latest reading of a device',
        params: idParams,
        response: {
          200: { type: 'object', properties: { data: { anyOf: [ref('TelemetryReading'), { type: 'null' }] } }, required: ['data'] },
          ...publicErrorResponses,
        },
      },
    },
    async (request) => {
      const account = request.account!;
      const reading = await telemetry.latest(account, await devices.getOwned(account, request.params.id));
      return { data: reading ? presentReading(reading) : null };
    },
  );

  app.get<{ Params: { id: string }; Querystring: { range: RangeName; limit?: number } }>(
    '/devices/:id/telemetry',
    {
      schema: {
        tags,
        security,
        operationId: 'listTelemetry',
        summary: 'Telemetry history, newest first, capped to the plan retention',
        params: idParams,
        querystring: {
          type: 'object',
          properties: { range: { type: 'string', enum: RANGE_NAMES, default: '24h' }, limit: limitParam(LIMITS.telemetry) },
        },
        response: {
          200: rangeResponse(ref('TelemetryReading'), { limit: { type: 'integer' } }),
          ...publicErrorResponses,
        },
      },
    },
    async (request, reply) => {
      const account = request.account!;
      const device = await devices.getOwnedForReading(account, request.params.id);
      const limit = clamp(request.query.limit, LIMITS.telemetry);
      const { range, readings } = await telemetry.history(account, device, request.query.range, limit);
      const query = {
        device_id: device.id,
        requested_range: request.query.range,
        range,
        limit,
        data_retention_days: account.limits.retentionDays,
      };
      // The response schema above documents this body; it is written here as text so the
      // stored JSON of each reading is spliced, not parsed and re-serialized (BENCHMARKS.md, "Design decisions").
      return reply
        .type('application/json; charset=utf-8')
        .send(`{"data":[${readings.map(presentReadingJson).join(',')}],"query":${JSON.stringify(query)}}`);
    },
  );

  app.get<{ Params: { id: string }; Querystring: { range: RangeName; interval?: string; fields?: string } }>(
    '/devices/:id/telemetry/aggregate',
    {
      schema: {
        tags,
        security,
        operationId: 'getTelemetryAggregate',
        summary: 'Count, min, max and avg per numeric field path in UTC-aligned buckets, oldest first',
        description:
          'Buckets are aligned on UTC multiples of the interval since the Unix epoch; only readings inside the range ' +
          '(the last `range` before the request, capped to the plan retention) count, so the first bucket may be partial. ' +
          'A value counts when it is a JSON number reached through object keys only. A bucket is listed when some ' +
          'requested path has a value in it. See docs/api.md, "Aggregates".',
        params: idParams,
        querystring: {
          type: 'object',
          properties: {
            range: { type: 'string', enum: RANGE_NAMES, default: '24h' },
            interval: {
              type: 'string',
              enum: INTERVAL_NAMES,
              description: 'default: the smallest interval giving at most 500 buckets (1h→1m, 6h→1m, 24h→5m, 7d→1h, 30d→6h)',
            },
            fields: {
              type: 'string',
              description: `comma-separated field paths, dotted for nested values (env.humidity), at most ${MAX_FIELDS}; default: every numeric path in the range`,
            },
          },
        },
        response: {
          200: rangeResponse(ref('AggregateBucket'), {
            interval: { type: 'string' },
            fields: { type: 'array', items: { type: 'string' } },
          }),
          ...publicErrorResponses,
        },
      },
    },
    async (request, reply) => {
      const account = request.account!;
      const device = await devices.getOwnedForReading(account, request.params.id);
      const result = await aggregates.aggregate(account, device, request.query);
      return reply.type('application/json; charset=utf-8').send(presentAggregateJson(result, device, account, request.query.range));
    },
  );

  app.get<{ Querystring: { limit?: number; offset: number } }>(
    '/alerts',
    {
      schema: {
        tags,
        security,
        operationId: 'listAlerts',
        summary: 'List alerts',
        querystring: { type: 'object', properties: { limit: limitParam(LIMITS.alerts), offset: offsetParam } },
        response: {
          200: {
            type: 'object',
            properties: { data: { type: 'array', items: ref('Alert') }, pagination: paginationSchema },
            required: ['data', 'pagination'],
          },
          ...publicErrorResponses,
        },
      },
    },
    async (request) => {
      const limit = clamp(request.query.limit, LIMITS.alerts);
      const { offset } = request.query;
      const page = await alerts.list(request.account!, limit, offset);
      return { data: page.alerts.map(presentAlert), pagination: { total: page.total, limit, offset } };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/alerts/:id',
    {
      schema: {
        tags,
        security,
        operationId: 'getAlert',
        summary: 'Get an alert',
        params: idParams,
        response: { 200: { type: 'object', properties: { data: ref('Alert') }, required: ['data'] }, ...publicErrorResponses },
      },
    },
    async (request) => ({ data: presentAlert(await alerts.getOwned(request.account!, request.params.id)) }),
  );

  app.get<{ Params: { id: string }; Querystring: { limit?: number } }>(
    '/alerts/:id/history',
    {
      schema: {
        tags,
        security,
        operationId: 'listAlertHistory',
        summary: 'Trigger history of an alert, newest first',
        params: idParams,
        querystring: { type: 'object', properties: { limit: limitParam(LIMITS.history) } },
        response: {
          200: { type: 'object', properties: { data: { type: 'array', items: ref('AlertTriggerEvent') } }, required: ['data'] },
          ...publicErrorResponses,
        },
      },
    },
    async (request) => {
      const alert = await alerts.getOwned(request.account!, request.params.id);
      return { data: (await alerts.history(alert, clamp(request.query.limit, LIMITS.history))).map(presentAlertEvent) };
    },
  );

  app.get(
    '/account/usage',
    {
      schema: {
        tags,
        security,
        operationId: 'getAccountUsage',
        summary: 'Account usage',
        response: { 200: { type: 'object', properties: { data: ref('AccountUsage') }, required: ['data'] }, ...publicErrorResponses },
      },
    },
    async (request) => ({ data: await usage.usage(request.account!) }),
  );

  app.get(
    '/account/keys',
    {
      schema: {
        tags,
        security,
        operationId: 'listApiKeys',
        summary: 'API key metadata (the keys themselves are never returned)',
        response: {
          200: { type: 'object', properties: { data: { type: 'array', items: ref('ApiKey') } }, required: ['data'] },
          ...publicErrorResponses,
        },
      },
    },
    async (request) => ({ data: (await keys.list(request.account!)).map(presentApiKey) }),
  );

  app.get('/openapi.json', { config: { public: true }, schema: { hide: true } }, async () => app.swagger());
}
