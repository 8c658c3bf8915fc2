/**
 * The `email` alert action (docs/alerts.md, "email"): one message to the account's email over
 * the SMTP server of `--smtp-url`, sent from `--smtp-from` (envelope sender and From: header).
 * One attempt; an unreachable server is a failed delivery with its reason,
 * never an ingest error.
 */
import type { Transporter } from 'nodemailer';

export interface EmailMessage {
  to: string;
  subject: string;
  text: string;
}

export interface EmailSender {
  send(message: EmailMessage): Promise<void>;
  close(): void;
}

export function createEmailSender(smtpUrl: string, from: string): EmailSender {
  // nodemailer's own timeouts are minutes long; an alert email that cannot be handed over
  // within these is reported as failed instead of holding a connection open.
  // nodemailer is loaded with the first alert email, not at start-up.
  let transport: Promise<Transporter> | null = null;
  const getTransport = () =>
    (transport ??= import('nodemailer').then(({ default: nodemailer }) =>
      nodemailer.createTransport({
        url: smtpUrl,
        connectionTimeout: 10_000,
        greetingTimeout: 10_000,
        socketTimeout: 30_000,
      }),
    ));
  return {
    async send(message) {
      const t = await getTransport();
      await t.sendMail({ from, envelope: { from, to: message.to }, to: message.to, subject: message.subject, text: message.text });
    },
    close: () => void transport?.then((t) => t.close()),
  };
}
