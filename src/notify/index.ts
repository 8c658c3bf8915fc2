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
  /** `stopReason`, asked before each retry, ends the retries with its reason (webhook.ts). */
  postWebhook(url: string, body: string, secret: string, stopReason?: () => Promise<string | null>): Promise<WebhookResult>;
  /** An unsigned POST (slack, discord, ntfy) with the webhook's retries. */
  post(url: string, body: string, headers: Record<string, string>, stopReason?: () => Promise<string | null>): Promise<WebhookResult>;
  /** Stops retries and waiting attempts (shutdown). */
  close(): void;
}

export function createNotifier(settings: NotifySettings): AlertNotifier {
  const email = settings.smtpUrl ? createEmailSender(settings.smtpUrl, settings.smtpFrom) : null;
  const shutdown = new AbortController();
  const retries = (stopReason?: () => Promise<string | null>) => ({
    retryDelaysMs: settings.webhookRetryDelaysMs,
    attemptTimeoutMs: settings.webhookAttemptTimeoutMs,
    signal: shutdown.signal,
    stopReason,
  });
  return {
    sendEmail: email ? (message) => email.send(message) : null,
    postWebhook: (url, body, secret, stopReason) => deliverWebhook(url, body, secret, retries(stopReason)),
    post: (url, body, headers, stopReason) =>
      postWithRetries(url, body, () => ({ 'user-agent': 'telemetryd', ...headers }), retries(stopReason)),
    close() {
      shutdown.abort();
      email?.close();
    },
  };
}
