import type { FastifyInstance } from 'fastify';
import type { Services } from '../../composition.js';
import { MAX_INGEST_BYTES } from '../../domain/ingest/pipeline.js';
import { badRequest } from '../../errors.js';
import { bearerToken } from '../bearer.js';
import { parseJsonBody } from '../jsonBody.js';

/** The Device API's HTTP ingest (docs/api.md, "HTTP ingest"). Snapshot routes live beside it. */
export async function deviceApiRoutes(app: FastifyInstance, { services }: { services: Services }) {
  // Devices and quick curl tests often send JSON without the right Content-Type; ingest
  // parses any body as JSON (with the same prototype-poisoning protection as fastify's).
  // fastify's built-in text/plain parser would hand the handler a string: drop it here so
  // text/plain bodies are parsed as JSON too, like every other type.
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('*', { parseAs: 'string', bodyLimit: MAX_INGEST_BYTES }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  app.post<{ Body: unknown }>('/ingest', { bodyLimit: MAX_INGEST_BYTES, schema: { hide: true } }, async (request) => {
    const body = request.body;
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw badRequest('body must be a JSON object with device_id and data');
    const { device_id: deviceId, access_token: bodyToken, data } = body as Record<string, unknown>;
    if (deviceId === undefined || deviceId === '') throw badRequest('device_id is required');
    if (typeof deviceId !== 'string') throw badRequest('device_id must be a string');
    const token = bodyToken ?? bearerToken(request);
    if (token === undefined || token === '') throw badRequest('access_token is required (in the body or as Authorization: Bearer)');
    if (data === undefined) throw badRequest('data is required');
    // Resolves only after the reading's transaction has committed (docs/operations.md, "Durability").
    await services.ingest.ingestReading({ transport: 'http', deviceId, token, data });
    return { success: true };
  });
}
