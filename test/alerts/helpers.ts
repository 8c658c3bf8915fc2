import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { presentAlertEvent } from '../../src/domain/presenters.js';
import { ingest, type TestServer } from '../helpers/server.js';

/** Polls until fn returns a truthy value (deliveries finish asynchronously, after ingest). */
export async function waitFor<T>(fn: () => T | Promise<T>, what: string, timeoutMs = 15_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Sends one reading over HTTP and asserts it was accepted. */
export async function send(server: TestServer, device: { id: string }, token: string, data: unknown) {
  const res = await ingest(server, { device_id: device.id, access_token: token, data });
  if (res.status !== 200) throw new Error(`ingest answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res;
}

/** GET /v1/alerts/:id/history through the Public API. */
export async function history(server: TestServer, key: string, alertId: string, query = '') {
  const res = await server.request(`/v1/alerts/${alertId}/history${query}`, { key });
  return { status: res.status, body: (await res.json()) as { data: Record<string, unknown>[]; error?: string } };
}

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
  at: number;
}

/**
 * A real HTTP listener on 127.0.0.1 standing in for Slack, Discord, ntfy or a webhook
 * receiver; `status` decides each answer (by the request's 1-based number).
 */
export async function startHttpReceiver(status: (n: number) => number = () => 200) {
  const received: ReceivedRequest[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      received.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, at: Date.now() });
      res.writeHead(status(received.length)).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    received,
    base,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The alert's trigger events as the Public API shows them, read through the services: polling
 * /v1 every few milliseconds would run into the plan's rate limit.
 */
export async function eventsOf(server: TestServer, alertId: string) {
  const alert = await server.services.alerts.getAny(alertId);
  return (await server.services.alerts.history(alert, 100)).map(presentAlertEvent);
}

/** Polls until the alert has `n` events; returns them, newest first. */
export function waitForEvents(server: TestServer, alertId: string, n: number, timeoutMs = 20_000) {
  return waitFor(
    async () => {
      const events = await eventsOf(server, alertId);
      return events.length >= n ? events : null;
    },
    `${n} event(s) of ${alertId}`,
    timeoutMs,
  );
}
