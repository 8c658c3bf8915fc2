import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Services } from '../../composition.js';
import type { SnapshotReader } from '../../domain/snapshots.js';
import { API_KEY_PREFIX } from '../../ids.js';
import { bearerToken } from '../bearer.js';
import { accountFromSession } from '../dashboardSession.js';

/**
 * Works out who is asking to read a snapshot, from one kind of credential. Returns null when
 * the request does not carry that credential or it is not valid: the route then answers 404
 * unless another resolver recognises the caller (docs/snapshots.md, "Reading").
 */
export type SnapshotReaderResolver = (request: FastifyRequest, services: Services, deviceId: string) => Promise<SnapshotReader | null>;

/** The device's own access token, as Bearer. A paused device, like a wrong token, reads nothing. */
const deviceTokenReader: SnapshotReaderResolver = async (request, services, deviceId) => {
  const token = bearerToken(request);
  if (!token || token.startsWith(API_KEY_PREFIX)) return null;
  try {
    return { deviceSeq: (await services.devices.authenticate(deviceId, token)).device.seq };
  } catch {
    return null;
  }
};

/**
 * An API key (Bearer tlm_…) of the owning account. Any plan: the key only says who is asking
 * (snapshot reads are not Public API calls, so no plan gate and no rate-limit count); a
 * suspended account reads nothing.
 */
const apiKeyReader: SnapshotReaderResolver = async (request, services) => {
  const key = bearerToken(request);
  if (!key?.startsWith(API_KEY_PREFIX)) return null;
  try {
    return { accountSeq: (await services.keys.authenticate(key)).account.seq };
  } catch {
    return null;
  }
};

/** The owner's dashboard session cookie (thumbnails in the device page's readings table). */
const dashboardSessionReader: SnapshotReaderResolver = async (request, services) => {
  const account = await accountFromSession(services, request);
  return account ? { accountSeq: account.seq } : null;
};

/** Every credential that may read a snapshot (docs/snapshots.md, "Reading"). */
const SNAPSHOT_READER_RESOLVERS: SnapshotReaderResolver[] = [deviceTokenReader, apiKeyReader, dashboardSessionReader];

/** Ids are random UUIDs never reused, so a URL always names the same bytes. */
const IMMUTABLE_CACHE = 'private, max-age=31536000, immutable';

/**
 * Camera snapshots (docs/snapshots.md), under the
 * /api/devices prefix, so errors take the Device API shape {"success": false, "error"}.
 */
export async function snapshotRoutes(
  app: FastifyInstance,
  { services, readers = SNAPSHOT_READER_RESOLVERS }: { services: Services; readers?: SnapshotReaderResolver[] },
) {
  // The body reaches the domain as the raw request stream, whatever its Content-Type: the
  // domain decides which types are accepted (400 otherwise) and reads only up to the 512,000
  // byte limit (413), so nothing past the limit is ever buffered.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));

  app.post<{ Params: { deviceId: string } }>('/:deviceId/snapshot', { schema: { hide: true } }, async (request, reply) => {
    const stream = request.body as Readable | undefined;
    const declared = request.headers['content-length'];
    try {
      const { id, url } = await services.snapshots.upload({
        deviceId: request.params.deviceId,
        token: bearerToken(request),
        contentType: request.headers['content-type'],
        // Do not destroy the socket when the domain stops reading early: the refusal still
        // has to be written to it.
        body: stream?.iterator({ destroyOnReturn: false }),
        declaredLength: declared !== undefined && /^\d+$/.test(declared) ? Number(declared) : undefined,
      });
      return { success: true, url, id };
    } catch (err) {
      // A refusal before the whole body was read: close the connection after the answer
      // rather than read (possibly many) unwanted bytes to reuse it.
      if (stream && !stream.readableEnded) reply.header('connection', 'close');
      throw err;
    }
  });

  app.get<{ Params: { deviceId: string; id: string } }>('/:deviceId/snapshot/:id', { schema: { hide: true } }, async (request, reply) => {
    const { deviceId, id } = request.params;
    const who = (await Promise.all(readers.map((resolve) => resolve(request, services, deviceId)))).filter(
      (r): r is SnapshotReader => r !== null,
    );
    const snapshot = await services.snapshots.read(deviceId, id, who);
    const etag = `"${snapshot.id}"`;
    reply.header('cache-control', IMMUTABLE_CACHE).header('etag', etag).header('x-content-type-options', 'nosniff');
    if (noneMatchHits(request.headers['if-none-match'], etag)) return reply.code(304).send();
    return reply.type(snapshot.contentType).header('content-length', String(snapshot.size)).send(snapshot.bytes);
  });
}

/**
 * Whether an If-None-Match header names this ETag: `*`, or any listed tag compared weakly
 * (a `W/` prefix does not count), as HTTP defines the header.
 */
function noneMatchHits(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  return header.split(',').some((tag) => {
    const t = tag.trim();
    return t === '*' || (t.startsWith('W/') ? t.slice(2) : t) === etag;
  });
}
