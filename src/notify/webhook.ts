/**
/**
 * HTTP alert actions. `webhook` (docs/alerts.md, "webhook") is a JSON POST to the alert's URL, signed with
 *
 *   X-Telemetryd-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">
 *
 * keyed by the account's webhook secret (the string exactly as `accounts webhook-secret`
 * prints it). The chat actions (slack, discord, ntfy) are unsigned POSTs through the same
 * loop. A 2xx answer is delivered; anything else (non-2xx, network error, timeout) is
 * retried with exponential backoff for about a minute, then reported as failed.
 */
import { createHmac } from 'node:crypto';

/** Waits between attempts: 7 attempts over 1+2+4+8+15+30 = 60 s, about a minute. */
const DEFAULT_WEBHOOK_RETRY_DELAYS_MS = [1_000, 2_000, 4_000, 8_000, 15_000, 30_000];
/** One attempt that has not answered within this is counted as failed and retried. */
const WEBHOOK_ATTEMPT_TIMEOUT_MS = 10_000;

function signWebhook(secret: string, body: string, unixSeconds: number): string {
  const v1 = createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex');
  return `t=${unixSeconds},v1=${v1}`;
}

export interface WebhookResult {
  ok: boolean;
  attempts: number;
  /** Why the last attempt failed (status line or network error); absent when delivered. */
  reason?: string;
}

export interface WebhookOptions {
  retryDelaysMs?: readonly number[];
  attemptTimeoutMs?: number;
  /** Aborts waiting and in-flight attempts (server shutdown). */
  signal?: AbortSignal;
  /** Asked before each retry: a reason ends the delivery there (its alert was deleted). */
  stopReason?: () => Promise<string | null>;
  now?: () => number;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    timer.unref();
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}

/** POSTs a signed webhook `body` until a 2xx answer or the retry schedule is used up; never throws. */
export function deliverWebhook(url: string, body: string, secret: string, options: WebhookOptions = {}): Promise<WebhookResult> {
  const now = options.now ?? Date.now;
  // A fresh timestamp per attempt, so a receiver may reject stale signatures.
  return postWithRetries(
    url,
    body,
    () => ({
      'content-type': 'application/json',
      'user-agent': 'telemetryd-webhook',
      'x-telemetryd-signature': signWebhook(secret, body, Math.floor(now() / 1000)),
    }),
    options,
  );
}

/**
 * The URL without its user info, and that user info as HTTP Basic authentication: fetch
 * refuses a URL holding credentials, and a protected ntfy topic (or a webhook behind basic
 * auth) takes them in the Authorization header.
 */
function splitCredentials(url: string): { target: string; authorization: string | null } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return { target: url, authorization: null };
  }
  if (parsed.username === '' && parsed.password === '') return { target: url, authorization: null };
  const credentials = `${decodeURIComponent(parsed.username)}:${decodeURIComponent(parsed.password)}`;
  parsed.username = '';
  parsed.password = '';
  return { target: parsed.href, authorization: `Basic ${Buffer.from(credentials).toString('base64')}` };
}

/** POSTs `body` with `headers()` of each attempt until a 2xx answer or the schedule is used up; never throws. */
export async function postWithRetries(
  url: string,
  body: string,
  headers: () => Record<string, string>,
  options: WebhookOptions = {},
): Promise<WebhookResult> {
  const delays = options.retryDelaysMs ?? DEFAULT_WEBHOOK_RETRY_DELAYS_MS;
  const timeoutMs = options.attemptTimeoutMs ?? WEBHOOK_ATTEMPT_TIMEOUT_MS;
  const { target, authorization } = splitCredentials(url);
  let reason = 'not attempted';
  for (let attempt = 1; attempt <= delays.length + 1; attempt++) {
    if (options.signal?.aborted) return { ok: false, attempts: attempt - 1, reason: `shut down before delivery (last: ${reason})` };
    try {
      const signals = [AbortSignal.timeout(timeoutMs), ...(options.signal ? [options.signal] : [])];
      const res = await fetch(target, {
        method: 'POST',
        headers: authorization === null ? headers() : { ...headers(), authorization },
        body,
        redirect: 'manual',
        signal: AbortSignal.any(signals),
      });
      // The body is not needed; drain it so the connection can be reused or closed.
      await res.arrayBuffer().catch(() => undefined);
      if (res.status >= 200 && res.status < 300) return { ok: true, attempts: attempt };
      reason = `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}`;
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } };
      reason = e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (e.cause?.code ?? e.cause?.message ?? e.message);
    }
    const delay = delays[attempt - 1];
    if (delay === undefined) return { ok: false, attempts: attempt, reason };
    await sleep(delay, options.signal);
    const stop = options.signal?.aborted ? null : await options.stopReason?.();
    if (stop) return { ok: false, attempts: attempt, reason: stop };
  }
  return { ok: false, attempts: delays.length + 1, reason };
}
