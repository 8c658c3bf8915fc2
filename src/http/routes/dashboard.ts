import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Services } from '../../composition.js';
import type { ServerConfig } from '../../config.js';
import type { ResolvedSession } from '../../domain/sessions.js';
import { badRequest, unauthorized } from '../../errors.js';
import { resolveWebRoot } from '../../webRoot.js';
import type { MqttCertificate } from '../app.js';
import { checkCrossSite, isStateChanging, sessionFromRequest } from '../dashboardSession.js';
import { parseJsonBody } from '../jsonBody.js';
import { dashboardApiRoutes } from './dashboardApi.js';
import { dashboardAuthRoutes, type SetupState } from './dashboardAuth.js';
import { dashboardLiveRoutes } from './dashboardLive.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The dashboard session of this request (set by the /ui/api auth hook). */
    dashboard?: ResolvedSession | null;
  }
  interface FastifyContextConfig {
    /** A dashboard route reachable without a session (sign-in, setup, session probe). */
    dashboardPublic?: boolean;
  }
}

/** The files under the dashboard root as URL paths, without dot files (as @fastify/static). */
function dashboardFiles(root: string): string[] {
  return readdirSync(root, { recursive: true, withFileTypes: true })
    .map((entry) => ({ entry, rel: path.relative(root, path.join(entry.parentPath, entry.name)).split(path.sep).join('/') }))
    .filter(
      ({ entry, rel }) =>
        !rel.split('/').some((segment) => segment.startsWith('.')) &&
        (entry.isFile() || (entry.isSymbolicLink() && statSync(path.join(root, rel)).isFile())),
    )
    .map(({ rel }) => rel)
    .sort();
}

function contentSecurityPolicy(publicUrl: string): string {
  let publicOrigin = '';
  try {
    publicOrigin = ` ${new URL(publicUrl).origin}`;
  } catch {
    // no extra origin
  }
  // No inline script anywhere; snapshot thumbnails may come from the public URL's origin.
  return [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    `img-src 'self' data: blob:${publicOrigin}`,
    "connect-src 'self'",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/**
 * The web dashboard (docs/dashboard.md): the single-page app from the built web root and its
 * session-authenticated JSON API under /ui/api, which calls the same domain services as the
 * CLI. Everything here carries strict security headers.
 */
export async function dashboardRoutes(
  app: FastifyInstance,
  opts: { services: Services; config: ServerConfig; setupToken?: string | null; mqttCertificate: () => MqttCertificate | null },
) {
  const { services, config } = opts;
  const setup: SetupState = { token: opts.setupToken ?? null };
  const webRoot = resolveWebRoot(config.dataDir);

  app.addHook('onSend', async (_request, reply, payload) => {
    reply.header('Content-Security-Policy', contentSecurityPolicy(config.publicUrl));
    reply.header('X-Content-Type-Options', 'nosniff');
    reply.header('X-Frame-Options', 'DENY');
    reply.header('Referrer-Policy', 'same-origin');
    reply.header('Cross-Origin-Opener-Policy', 'same-origin');
    if (!reply.hasHeader('Cache-Control')) reply.header('Cache-Control', 'no-cache');
    return payload;
  });

  const sendIndex = (_request: FastifyRequest, reply: FastifyReply) => {
    if (!webRoot) return reply.code(503).type('text/plain').send('The dashboard was not built: run `npm run build`.\n');
    return reply.sendFile('index.html', webRoot);
  };

  if (webRoot) {
    // The routes @fastify/static makes with `wildcard: false` (GET and HEAD of each file), but
    // from a synchronous listing: its glob walk of the directory costs start time for a
    // handful of files. Not `wildcard: true`: every unknown path would then be a file lookup.
    const root = path.resolve(webRoot);
    await app.register(fastifyStatic, { root, serve: false, index: false, cacheControl: false });
    for (const file of dashboardFiles(root)) {
      app.route({
        method: ['HEAD', 'GET'],
        url: `/${file}`,
        schema: { hide: true },
        handler: (_request, reply) => reply.sendFile(file, root),
      });
    }
  } else {
    app.log.warn('dashboard files not found (dist/web): run npm run build');
  }
  app.get('/', sendIndex);
  // The MQTT listener's certificate, for devices to trust (the device snippets link it). It
  // is no secret: every TLS handshake presents it.
  app.get('/mqtt-ca.pem', { schema: { hide: true } }, async (_request, reply) => {
    const certificate = opts.mqttCertificate();
    if (!certificate) return reply.code(404).type('text/plain').send('MQTT over TLS is off\n');
    return reply
      .type('application/x-pem-file')
      .header('Content-Disposition', 'attachment; filename="telemetryd-ca.pem"')
      .send(certificate.pem);
  });
  // The first-run link `serve` prints (docs/operations.md, "First run"); the app reads the token from the URL.
  app.get('/setup', sendIndex);

  await app.register(
    async (api) => {
      // An action without parameters (pause, sign-out) may come with an empty JSON body.
      api.removeContentTypeParser('application/json');
      api.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: 1_048_576 }, (_request, body, done) => {
        if (!String(body).trim()) return done(null, {});
        try {
          // Depth-limited, so a deeply nested email or settings value is a 400, not a stack overflow (docs/reliability.md, "Bad input").
          done(null, parseJsonBody(String(body)));
        } catch (err) {
          done(badRequest((err as Error).message), undefined);
        }
      });
      api.addHook('onRequest', async (request) => {
        request.dashboard = await sessionFromRequest(services, request);
        if (isStateChanging(request.method)) checkCrossSite(request, config.publicUrl, request.dashboard);
        if (!request.dashboard && !request.routeOptions.config.dashboardPublic) throw unauthorized('not signed in');
      });
      await api.register(dashboardAuthRoutes, { services, config, setup, mqttCertificate: opts.mqttCertificate });
      await api.register(dashboardApiRoutes, { services });
      await api.register(dashboardLiveRoutes, { services });
    },
    { prefix: '/ui/api' },
  );
}
