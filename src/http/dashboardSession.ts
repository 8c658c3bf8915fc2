/**
 * The dashboard's session cookie and CSRF checks, shared by the dashboard routes and by any
 * route that also accepts the owner's dashboard session (the snapshot GET, docs/snapshots.md,
 * "Reading"): plug `accountFromSession(services, request)` in there.
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Services } from '../composition.js';
import type { ResolvedSession } from '../domain/sessions.js';
import { SESSION_IDLE_MS } from '../domain/sessions.js';
import type { Account } from '../domain/types.js';
import { forbidden } from '../errors.js';

export const SESSION_COOKIE = 'telemetryd_session';
const CSRF_HEADER = 'x-csrf-token';

/** Minimal Cookie header parser (RFC 6265 §5.4: `name=value; name2=value2`). */
export function parseCookies(header: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!header) return out;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 1) continue;
    const name = part.slice(0, eq).trim();
    let value = part.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    if (!(name in out)) {
      try {
        out[name] = decodeURIComponent(value);
      } catch {
        out[name] = value;
      }
    }
  }
  return out;
}

type RequestLike = { headers: { cookie?: string | undefined } };

/** The session behind the request's cookie, or null. */
export function sessionFromRequest(services: Services, request: RequestLike): Promise<ResolvedSession | null> {
  return services.sessions.resolve(parseCookies(request.headers.cookie)[SESSION_COOKIE]);
}

/** The account signed in to the dashboard on this request, or null (for the snapshot GET). */
export async function accountFromSession(services: Services, request: RequestLike): Promise<Account | null> {
  return (await sessionFromRequest(services, request))?.account ?? null;
}

/** Secure when the request came over TLS or the public URL is https (behind a TLS proxy). */
function isSecure(request: FastifyRequest, publicUrl: string): boolean {
  return request.protocol === 'https' || publicUrl.startsWith('https:');
}

export function setSessionCookie(request: FastifyRequest, reply: FastifyReply, sessionId: string, publicUrl: string) {
  const attrs = [`${SESSION_COOKIE}=${sessionId}`, 'Path=/', 'HttpOnly', 'SameSite=Lax', `Max-Age=${Math.floor(SESSION_IDLE_MS / 1000)}`];
  if (isSecure(request, publicUrl)) attrs.push('Secure');
  reply.header('Set-Cookie', attrs.join('; '));
}

export function clearSessionCookie(request: FastifyRequest, reply: FastifyReply, publicUrl: string) {
  const attrs = [`${SESSION_COOKIE}=`, 'Path=/', 'HttpOnly', 'SameSite=Lax', 'Max-Age=0'];
  if (isSecure(request, publicUrl)) attrs.push('Secure');
  reply.header('Set-Cookie', attrs.join('; '));
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
export const isStateChanging = (method: string) => !SAFE_METHODS.has(method);

/**
 * Cross-site request refusal for every state-changing dashboard request, run in onRequest so
 * a cross-site form POST is refused with 403 before its body is even parsed:
 * 1. an Origin header that is neither the public URL's origin nor the origin the request
 *    was addressed to is refused; so is Sec-Fetch-Site: cross-site;
 * 2. the request must carry the CSRF header: the session's token when there is a session,
 *    any value before sign-in (a custom header cannot be sent cross-site without a CORS
 *    preflight, which this server never grants).
 */
export function checkCrossSite(request: FastifyRequest, publicUrl: string, session: ResolvedSession | null): void {
  const origin = request.headers.origin;
  if (origin !== undefined) {
    const allowed = new Set<string>();
    try {
      allowed.add(new URL(publicUrl).origin);
    } catch {
      // an invalid public URL only narrows what is allowed
    }
    if (request.headers.host) allowed.add(`${request.protocol}://${request.headers.host}`);
    if (!allowed.has(origin)) throw forbidden('cross-site request refused');
  }
  if (request.headers['sec-fetch-site'] === 'cross-site') throw forbidden('cross-site request refused');
  const presented = request.headers[CSRF_HEADER];
  if (typeof presented !== 'string' || !presented) throw forbidden('missing CSRF token');
  if (session) {
    const a = Buffer.from(presented);
    const b = Buffer.from(session.session.csrfToken);
    if (a.length !== b.length || !timingSafeEqual(a, b)) throw forbidden('invalid CSRF token');
  }
}
