import swagger from '@fastify/swagger';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { ServerConfig } from '../config.js';
import { MAX_INGEST_BYTES } from '../domain/ingest/pipeline.js';
import type { Services } from '../domain/services.js';
import { errorBody, handleError } from './errors.js';
import { parseJsonBody } from './jsonBody.js';
import { createMetrics, installMetrics } from './metrics.js';
import { dashboardRoutes } from './routes/dashboard.js';
import { deviceApiRoutes } from './routes/deviceApi.js';
import { healthRoutes } from './routes/health.js';
import { publicApiRoutes } from './routes/publicApi.js';
import { snapshotRoutes } from './routes/snapshots.js';
import { SHARED_SCHEMAS } from './schemas.js';
import { buildLazyValidator, buildSharedSerializer } from './serializers.js';

export interface AppOptions {
  services: Services;
  config: ServerConfig;
  /** A pino logger instance or fastify logger options. */
  logger?: boolean | object;
  version: string;
  /** One-time first-run setup token, while no account exists (used by the dashboard). */
  setupToken?: string | null;
  /** Slow-client bounds (docs/api.md, "HTTP in general"); tests shorten them. */
  httpTimeouts?: HttpTimeouts;
}

export interface HttpTimeouts {
  /** All request headers must arrive within this (slowloris). Default 10 s. */
  headersMs?: number;
  /** The whole request, body included. Default 30 s. */
  requestMs?: number;
  /** How often node checks the two above. Default 1 s. */
  checkIntervalMs?: number;
}

/** Builds the HTTP app without listening; server.ts listens, tests may inject requests instead. */
export async function buildApp(opts: AppOptions): Promise<FastifyInstance> {
  const { services, config } = opts;
  const timeouts = { headersMs: 10_000, requestMs: 30_000, checkIntervalMs: 1_000, ...opts.httpTimeouts };
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: MAX_INGEST_BYTES,
    // Per-request log lines at ingest rates cost more than the work itself; errors are still logged.
    logController: new LogController({ disableRequestLogging: true }),
    // Bound what a slow or hostile client can hold (reliability: slowloris, huge headers).
    requestTimeout: timeouts.requestMs,
    connectionTimeout: 60_000,
    // Node checks headers/request deadlines only every connectionsCheckingInterval (30 s by
    // default): a client that trickles header bytes is cut off within about headersMs.
    http: { headersTimeout: timeouts.headersMs, connectionsCheckingInterval: timeouts.checkIntervalMs },
    routerOptions: { maxParamLength: 200 },
    return503OnClosing: true,
    schemaController: { compilersFactory: { buildSerializer: buildSharedSerializer, buildValidator: buildLazyValidator } },
    ajv: { customOptions: { coerceTypes: true, removeAdditional: true, useDefaults: true, allErrors: false, validateSchema: false } },
  });

  // fastify's JSON parser, plus a nesting limit (./jsonBody.ts); plugins may override it.
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    if (body === '') return done(Object.assign(new Error('request body is empty'), { statusCode: 400 }), undefined);
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });
  for (const schema of SHARED_SCHEMAS) app.addSchema(schema);
  app.setErrorHandler(handleError);
  installMetrics(app, createMetrics(services));
  app.setNotFoundHandler((request, reply) => reply.code(404).send(errorBody(request.url, 'not found')));

  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'telemetryd Public API',
        version: opts.version,
        description: 'Read-only access to devices, telemetry, alerts and account usage.',
      },
      servers: [{ url: config.publicUrl }],
      components: { securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', description: 'API key (tlm_…)' } } },
    },
    hideUntagged: true,
  });

  await app.register(healthRoutes, { services, version: opts.version });
  await app.register(publicApiRoutes, { prefix: '/v1', services });
  await app.register(deviceApiRoutes, { prefix: '/api/devices', services });
  await app.register(snapshotRoutes, { prefix: '/api/devices', services });
  await app.register(dashboardRoutes, { services, config, setupToken: opts.setupToken });
  return app;
}
