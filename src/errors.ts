/**
 * Errors are values: every failure the service reports has a code, an HTTP status and a
 * message meant for the caller. Transports map them in one place each
 * (src/http/errors.ts for HTTP, src/mqtt/hooks.ts for MQTT CONNACK codes).
 */
export type ErrorCode =
  | 'bad_request'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'payload_too_large'
  | 'rate_limited'
  | 'unavailable'
  | 'storage_unavailable'
  | 'internal';

const STATUS: Record<ErrorCode, number> = {
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  payload_too_large: 413,
  rate_limited: 429,
  unavailable: 503,
  storage_unavailable: 503,
  internal: 500,
};

export class AppError extends Error {
  readonly status: number;
  /** Seconds to wait, for 429 and 503 responses (sent as Retry-After). */
  retryAfter?: number;

  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'AppError';
    this.status = STATUS[code];
  }

  /** Permanent errors are the caller's fault: resending the same input cannot succeed. */
  get permanent(): boolean {
    return this.status < 500;
  }
}

export const badRequest = (message: string) => new AppError('bad_request', message);
export const unauthorized = (message: string) => new AppError('unauthorized', message);
export const forbidden = (message: string) => new AppError('forbidden', message);
export const notFound = (message: string) => new AppError('not_found', message);
export const conflict = (message: string) => new AppError('conflict', message);
export const payloadTooLarge = (message: string) => new AppError('payload_too_large', message);
export const unavailable = (message: string) => new AppError('unavailable', message);
export const rateLimited = (message: string, retryAfter: number) => {
  const err = new AppError('rate_limited', message);
  err.retryAfter = retryAfter;
  return err;
};

/**
 * A write that storage cannot take now (low disk space, disk full, I/O error, database busy):
 * transient, so the caller is told when to come back. Reported by the storage status service,
 * rate-limited, not once per request.
 */
export const storageUnavailable = (reason: string, retryAfter: number) => {
  const err = new AppError('storage_unavailable', `storage unavailable: ${reason}`);
  err.retryAfter = retryAfter;
  return err;
};
