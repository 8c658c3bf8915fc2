import type { FastifyRequest } from 'fastify';

/**
 * The credential of an `Authorization: Bearer <token>` header: an API key (Public API,
 * snapshot reads) or a device access token (Device API). Undefined when the header is
 * absent or not of that form.
 */
export function bearerToken(request: FastifyRequest): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '');
  return m?.[1];
}
