import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest, FastifySchemaValidationError } from 'fastify';
import { AppError } from '../errors.js';

/**
 * The one place where errors become HTTP responses. The Public API answers
 * {"error": "..."}; the Device API answers {"success": false, "error": "..."}
 * (docs/api.md, "Errors"). 4xx messages are shown as they are;
 * 5xx details are logged and hidden.
 */
function isDeviceApi(url: string): boolean {
  return url.startsWith('/api/devices');
}

export function errorBody(url: string, message: string) {
  return isDeviceApi(url) ? { success: false, error: message } : { error: message };
}

/** fastify's own errors, turned into the documented statuses (docs/api.md, "Errors"). */
function fromFastify(err: FastifyError, request: FastifyRequest): { status: number; message: string } {
  const { url } = request;
  if (err.validation) return { status: 400, message: err.message };
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE': {
      const limit = request.routeOptions.bodyLimit;
      return { status: 413, message: `request body is too large${limit ? ` (limit ${limit.toLocaleString('en')} bytes)` : ''}` };
    }
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      // Ingest accepts any content type as JSON; this only reaches other routes.
      return { status: isDeviceApi(url) ? 400 : 415, message: 'unsupported content type' };
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return { status: 400, message: 'request body is empty' };
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return { status: 400, message: 'invalid content length' };
  }
  if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
    // e.g. malformed JSON or a __proto__ key: every body parser is parseJsonBody
    // (./jsonBody.ts), whose message says what was wrong with the body.
    return { status: err.statusCode, message: err.message };
  }
  return { status: 500, message: 'internal server error' };
}

/**
 * Schema errors in fastify's own wording ("querystring/range must be …"), plus the allowed
 * values when a value is not one of them, so the answer says what to send instead.
 */
export function formatValidationErrors(errors: FastifySchemaValidationError[], dataVar: string): Error {
  const described = errors.map((e) => {
    const allowed = e.params.allowedValues;
    const choices = e.keyword === 'enum' && Array.isArray(allowed) ? `: ${allowed.join(', ')}` : '';
    return `${dataVar}${e.instancePath || ''} ${e.message}${choices}`;
  });
  return new Error(described.join(', '));
}

/**
 * The error handler of the app: `storageFailure` turns an error of storage itself (the
 * database server unreachable during a lookup, a busy database) into its 503.
 */
export const errorHandler =
  (storageFailure: (err: unknown) => AppError | null) => (err: FastifyError | AppError, request: FastifyRequest, reply: FastifyReply) =>
    handleError(storageFailure(err) ?? err, request, reply);

function handleError(err: FastifyError | AppError, request: FastifyRequest, reply: FastifyReply) {
  let status: number;
  let message: string;
  if (err instanceof AppError) {
    status = err.status;
    message = err.status === 500 ? 'internal server error' : err.message;
    if (err.retryAfter !== undefined) reply.header('Retry-After', String(err.retryAfter));
  } else {
    ({ status, message } = fromFastify(err, request));
  }
  // Storage refusals are logged by the storage status service, once per reason per 10 s: a
  // full disk must not also fill the log with a stack per request.
  if (status >= 500 && !(err instanceof AppError && err.code === 'storage_unavailable')) request.log.error({ err }, 'request failed');
  return reply.code(status).type('application/json').send(errorBody(request.url, message));
}

/**
 * Requests fastify refuses before routing (its `frameworkErrors`): an id in the path longer
 * than the router takes, or a path whose percent-encoding does not decode. The statuses are
 * fastify's; the bodies are the documented ones of the API the path belongs to.
 */
export function frameworkErrorHandler(err: FastifyError, request: FastifyRequest, reply: FastifyReply) {
  const [status, message] =
    err.code === 'FST_ERR_MAX_PARAM_LENGTH'
      ? [414, 'a path segment is too long (ids are at most 200 characters)']
      : err.code === 'FST_ERR_BAD_URL'
        ? [400, 'the path is not valid URL encoding']
        : [400, 'bad request'];
  return reply.code(status).type('application/json').send(errorBody(request.url, message));
}

/**
 * Requests node refuses before there is a request to route (fastify's `clientErrorHandler`):
 * headers too large or too slow, a malformed request. The path is not known yet, so the body
 * is the Public API's `{"error": …}`; the connection is closed, as node does.
 */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket) {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, reason, message] =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Request Timeout', 'the request did not arrive in time']
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'request headers are too large (limit 16 KB)']
        : [400, 'Bad Request', 'malformed HTTP request'];
  const body = JSON.stringify({ error: message });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}
