/**
 * Outbound alert actions (email, webhook, chat POSTs) behind one small interface, built from the
 * server's settings (`--smtp-url`, `--smtp-from`). The domain decides what to send and
 * records the outcome; this module only talks SMTP and HTTP.
 */
import { createEmailSender, type EmailMessage } from './email.js';
import { deliverWebhook, postWithRetries, type WebhookResult } from './webhook.js';

export interface NotifySettings {
  smtpUrl: string | null;
  smtpFrom: string;
  /** Waits between webhook attempts; tests shorten it (default: webhook.ts). */
  webhookRetryDelaysMs?: readonly number[];
  webhookAttemptTimeoutMs?: number;
}

export interface AlertNotifier {
  /** Null when no SMTP server is configured: the email action is then "not_configured". */
  sendEmail: ((message: EmailMessage) => Promise<void>) | null;
  postWebhook(url: string, body: string, secret: string): Promise<WebhookResult>;
  /** An unsigned POST (slack, discord, ntfy) with the webhook's retries. */
  post(url: string, body: string, headers: Record<string, string>): Promise<WebhookResult>;
  /** Stops retries and waiting attempts (shutdown). */
  close(): void;
}

export function createNotifier(settings: NotifySettings): AlertNotifier {
  const email = settings.smtpUrl ? createEmailSender(settings.smtpUrl, settings.smtpFrom) : null;
  const shutdown = new AbortController();
  const retries = () => ({
    retryDelaysMs: settings.webhookRetryDelaysMs,
    attemptTimeoutMs: settings.webhookAttemptTimeoutMs,
    signal: shutdown.signal,
  });
  return {
    sendEmail: email ? (message) => email.send(message) : null,
    postWebhook: (url, body, secret) => deliverWebhook(url, body, secret, retries()),
    post: (url, body, headers) => postWithRetries(url, body, () => ({ 'user-agent': 'telemetryd', ...headers }), retries()),
    close() {
      shutdown.abort();
      email?.close();
    },
  };
}
