/**
 * The `email` alert action (decisions.md §4): one message to the account's email over the
 * SMTP server of `--smtp-url`, sent from `--smtp-from` (envelope sender and From: header,
 * decisions.md §2). One attempt; an unreachable server is a failed delivery with its reason,
 * never an ingest error.
 */
import nodemailer from 'nodemailer';

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
  const transport = nodemailer.createTransport({
    url: smtpUrl,
    connectionTimeout: 10_000,
    greetingTimeout: 10_000,
    socketTimeout: 30_000,
  });
  return {
    async send(message) {
      await transport.sendMail({ from, envelope: { from, to: message.to }, to: message.to, subject: message.subject, text: message.text });
    },
    close: () => transport.close(),
  };
}
