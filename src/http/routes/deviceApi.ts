import type { FastifyInstance } from 'fastify';
import type { Services } from '../../composition.js';
import { MAX_INGEST_BYTES } from '../../domain/ingest/pipeline.js';
import { badRequest } from '../../errors.js';
import { bearerToken } from '../bearer.js';
import { type IngestBody, parseIngestBody } from '../jsonBody.js';

/** The Device API's HTTP ingest (docs/api.md, "HTTP ingest"). Snapshot routes live beside it. */
export async function deviceApiRoutes(app: FastifyInstance, { services }: { services: Services }) {
  // Devices and quick curl tests often send JSON without the right Content-Type; ingest
  // parses any body as JSON (with the same prototype-poisoning protection as fastify's).
  // fastify's built-in text/plain parser would hand the handler a string: drop it here so
  // text/plain bodies are parsed as JSON too, like every other type. application/json gets
  // the same parser, which also keeps the text of the body's `data` member: the reading is
  // stored as sent instead of serialized again (domain/ingest/pipeline.ts, store).
  app.removeContentTypeParser(['text/plain', 'application/json']);
  const parser = (_req: unknown, body: string | Buffer, done: (err: Error | null, body?: unknown) => void) => {
    try {
      done(null, parseIngestBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  };
  app.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: MAX_INGEST_BYTES }, parser);
  app.addContentTypeParser('*', { parseAs: 'string', bodyLimit: MAX_INGEST_BYTES }, parser);

  app.post<{ Body: IngestBody | undefined }>('/ingest', { bodyLimit: MAX_INGEST_BYTES, schema: { hide: true } }, async (request) => {
    const body = request.body?.value;
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw badRequest('body must be a JSON object with device_id and data');
    const { device_id: deviceId, access_token: bodyToken, data } = body as Record<string, unknown>;
    if (deviceId === undefined || deviceId === '') throw badRequest('device_id is required');
    if (typeof deviceId !== 'string') throw badRequest('device_id must be a string');
    // An empty or null access_token counts as absent, so a Bearer header sent beside it is used.
    if (bodyToken !== undefined && bodyToken !== null && typeof bodyToken !== 'string') throw badRequest('access_token must be a string');
    const token = bodyToken || bearerToken(request);
    if (token === undefined || token === '') throw badRequest('access_token is required (in the body or as Authorization: Bearer)');
    if (data === undefined) throw badRequest('data is required');
    // Resolves only after the reading's transaction has committed (docs/operations.md, "Durability").
    await services.ingest.ingestReading({ transport: 'http', deviceId, token, data, dataText: request.body?.dataText });
    return { success: true };
  });
}
