import { createHmac } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerSession } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres, openDataDirStorage } from '../helpers/backend.js';
import { runCliAsync } from '../helpers/cli.js';
import { ingest, seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { history, send, waitFor } from './helpers.js';

interface ReceivedMail {
  from: string;
  to: string[];
  raw: string;
}

async function startSmtp() {
  const mails: ReceivedMail[] = [];
  const smtp = new SMTPServer({
    authOptional: true,
    secure: false,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onData(stream, session: SMTPServerSession, callback) {
      let raw = '';
      stream.on('data', (chunk: Buffer) => (raw += chunk.toString('utf8')));
      stream.on('end', () => {
        mails.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          raw,
        });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve));
  const port = (smtp.server.address() as AddressInfo).port;
  return { mails, port, close: () => new Promise<void>((resolve) => smtp.close(() => resolve())) };
}

interface ReceivedHook {
  headers: IncomingMessage['headers'];
  body: string;
  path: string;
}

/** A real HTTP listener; `answer` decides each response (status), may hold it back. */
async function startReceiver(answer: (n: number, res: ServerResponse) => unknown = (_n, res) => res.writeHead(200).end('ok')) {
  const hooks: ReceivedHook[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      hooks.push({ headers: req.headers, body, path: req.url ?? '' });
      void answer(hooks.length, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return {
    hooks,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port with nothing listening on it. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

type Delivery = { action: string; status: string; detail: string | null; attempts: number | null };

async function deliveries(server: TestServer, alertId: string) {
  const alert = await server.services.alerts.getAny(alertId);
  return (await server.services.alerts.historyWithDeliveries(alert, 100)) as (Record<string, unknown> & { deliveries: Delivery[] })[];
}

async function settledDelivery(server: TestServer, alertId: string, action: string): Promise<Delivery> {
  return waitFor(async () => {
    const events = await deliveries(server, alertId);
    const d = events[0]?.deliveries.find((x) => x.action === action);
    return d && d.status !== 'pending' ? d : null;
  }, `${action} delivery of ${alertId}`);
}

const unfold = (raw: string) => raw.replace(/\r\n(?=[ \t])/g, '');

/** Decodes RFC 2047 encoded words (nodemailer Q-encodes long header values). */
function decodeHeader(value: string): string {
  return value.replace(/\?=\s+=\?/g, '?==?').replace(/=\?UTF-8\?([QB])\?([^?]*)\?=/gi, (_, enc: string, text: string) =>
    enc.toUpperCase() === 'B'
      ? Buffer.from(text, 'base64').toString('utf8')
      : Buffer.from(
          text.replace(/_/g, ' ').replace(/=([0-9A-F]{2})/gi, (_m, h: string) => String.fromCharCode(parseInt(h, 16))),
          'latin1',
        ).toString('utf8'),
  );
}

describe('email action', () => {
  let smtp: Awaited<ReturnType<typeof startSmtp>>;
  let server: TestServer;

  beforeAll(async () => {
    smtp = await startSmtp();
    server = await startTestServer({ 'smtp-url': `smtp://127.0.0.1:${smtp.port}`, 'smtp-from': 'alerts@telemetryd.test' });
  });
  afterAll(async () => {
    await server.stop();
    await smtp.close();
  });

  it('mails the account owner from --smtp-from, naming the alert and the value; delivery is "sent"', async () => {
    const s = await seedAccount(server, { email: 'owner-mail@example.com' });
    const alert = await server.services.alerts.create(s.device, { name: 'Freezer too warm', field: 'env.temp', operator: '>', value: -10 });
    expect(alert.actions).toEqual(['email']);
    await send(server, s.device, s.token, { env: { temp: -4.5 } });
    const mail = await waitFor(() => smtp.mails.find((m) => m.to.includes('owner-mail@example.com')), 'the alert email');
    expect(mail.to).toEqual(['owner-mail@example.com']);
    expect(mail.from).toBe('alerts@telemetryd.test');
    const raw = unfold(mail.raw);
    expect(raw).toMatch(/^From: alerts@telemetryd\.test\r?$/m);
    expect(raw).toMatch(/^To: owner-mail@example\.com\r?$/m);
    const subject = decodeHeader(/^Subject: (.*?)\r?$/m.exec(raw)![1]!);
    expect(subject).toContain('Freezer too warm');
    expect(subject).toContain('-4.5');
    expect(raw).toMatch(/^Value: -4\.5\r?$/m);
    expect(raw).toContain('env.temp > -10');
    const [event] = (await history(server, s.key, alert.id)).body.data;
    expect(raw).toContain(event!.id as string);

    const d = await settledDelivery(server, alert.id, 'email');
    expect(d).toMatchObject({ action: 'email', status: 'sent', detail: null });
  });
});

describe('email action without a reachable SMTP server', () => {
  it('no --smtp-url: the event is recorded and the email delivery is "not_configured"', async () => {
    const server = await startTestServer();
    try {
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, { name: 'no smtp', field: 't', operator: '>', value: 0 });
      await send(server, s.device, s.token, { t: 1 });
      const events = await deliveries(server, alert.id);
      expect(events).toHaveLength(1);
      expect(events[0]!.deliveries).toEqual([
        expect.objectContaining({ action: 'email', status: 'not_configured', detail: expect.stringContaining('SMTP') }),
      ]);
      expect((await history(server, s.key, alert.id)).body.data).toHaveLength(1);
    } finally {
      await server.stop();
    }
  });

  it('SMTP unreachable: the event is recorded and the email delivery is "failed" with the reason', async () => {
    const port = await closedPort();
    const server = await startTestServer({ 'smtp-url': `smtp://127.0.0.1:${port}` });
    try {
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, { name: 'smtp down', field: 't', operator: '>', value: 0 });
      const res = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { t: 1 } });
      expect(res.status).toBe(200);
      expect((await history(server, s.key, alert.id)).body.data).toHaveLength(1);
      const d = await settledDelivery(server, alert.id, 'email');
      expect(d.status).toBe('failed');
      expect(d.detail).toMatch(/ECONNREFUSED|connect/i);
    } finally {
      await server.stop();
    }
  });
});

describe('webhook action', () => {
  let server: TestServer;

  beforeAll(async () => {
    // A short retry schedule keeps the tests quick; the default spans about a minute.
    server = await startTestServer({}, { webhookRetryDelaysMs: [50, 100, 200] });
  });
  afterAll(() => server.stop());

  it('POSTs the event, the alert and the reading as JSON with a verifiable signature', async () => {
    const receiver = await startReceiver();
    try {
      const s = await seedAccount(server, { email: 'hooks@example.com' });
      const alert = await server.services.alerts.create(s.device, {
        name: 'door open',
        field: 'door',
        operator: '==',
        value: 1,
        actions: ['webhook', 'email'],
        webhookUrl: receiver.url,
      });
      await send(server, s.device, s.token, { door: 1, battery: { level: 80 } });
      const hook = await waitFor(() => receiver.hooks[0], 'the webhook');

      expect(hook.headers['content-type']).toBe('application/json');
      const signature = hook.headers['x-telemetryd-signature'] as string;
      const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(signature);
      expect(m, signature).not.toBeNull();
      const t = Number(m![1]);
      expect(Math.abs(t - Date.now() / 1000)).toBeLessThan(300);
      // The secret exactly as the CLI prints it.
      const cli = await runCliAsync(['accounts', 'webhook-secret', 'hooks@example.com', '--json'], { dataDir: server.dataDir });
      expect(cli.status, cli.stderr).toBe(0);
      expect(cli.json.account).toBe(s.account.id);
      const secret = cli.json.webhook_secret as string;
      expect(m![2]).toBe(createHmac('sha256', secret).update(`${t}.${hook.body}`).digest('hex'));
      expect(m![2]).not.toBe(createHmac('sha256', `${secret}x`).update(`${t}.${hook.body}`).digest('hex'));

      const body = JSON.parse(hook.body);
      expect(Object.keys(body).sort()).toEqual(['alert', 'event', 'reading', 'type']);
      expect(body.type).toBe('triggered');
      expect(body.alert).toEqual({ id: alert.id, name: 'door open', device_id: s.device.id });
      const [event] = (await history(server, s.key, alert.id)).body.data;
      expect(body.event).toEqual(event);
      const latest = await (await server.request(`/v1/devices/${s.device.id}/telemetry/latest`, { key: s.key })).json();
      expect(body.reading).toEqual(latest.data);
      expect(body.reading.data).toEqual({ door: 1, battery: { level: 80 } });

      // Each action keeps its own outcome: webhook sent, email not configured on this server.
      const d = await settledDelivery(server, alert.id, 'webhook');
      expect(d).toMatchObject({ status: 'sent', attempts: 1 });
      expect((await deliveries(server, alert.id))[0]!.deliveries.find((x) => x.action === 'email')!.status).toBe('not_configured');

      // After rotation, the next delivery is signed with the new secret.
      const rotated = await runCliAsync(['accounts', 'webhook-secret', s.account.id, '--rotate', '--json'], { dataDir: server.dataDir });
      expect(rotated.json.webhook_secret).not.toBe(secret);
      await send(server, s.device, s.token, { door: 1 });
      // cooldown 300 by default: nothing new; an alert with cooldown 0 shows the rotated secret.
      await server.services.alerts.update(alert, { cooldown: 0 });
      await send(server, s.device, s.token, { door: 1 });
      const second = await waitFor(() => receiver.hooks[1], 'the second webhook');
      expect(receiver.hooks).toHaveLength(2);
      const [, t2, v2] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(second.headers['x-telemetryd-signature'] as string)!;
      expect(v2).toBe(createHmac('sha256', rotated.json.webhook_secret).update(`${t2}.${second.body}`).digest('hex'));
    } finally {
      await receiver.close();
    }
  });

  it('credentials in a URL (webhook, ntfy) go as HTTP Basic authentication, and never into a delivery detail', async () => {
    const receiver = await startReceiver((_n, res) => res.writeHead(200).end());
    try {
      const s = await seedAccount(server);
      const { host } = new URL(receiver.url);
      const withCredentials = (path: string) => `http://hook%20user:p%40ss:w0rd@${host}${path}`;
      const alert = await server.services.alerts.create(s.device, {
        name: 'guarded',
        field: 'g',
        operator: '>',
        value: 0,
        actions: ['webhook', 'ntfy'],
        webhookUrl: withCredentials('/hook?x=1'),
        ntfyUrl: withCredentials('/topic'),
      });
      await send(server, s.device, s.token, { g: 1 });
      for (const action of ['webhook', 'ntfy'])
        expect(await settledDelivery(server, alert.id, action)).toMatchObject({ status: 'sent', attempts: 1 });
      expect(receiver.hooks.map((h) => h.path).sort()).toEqual(['/hook?x=1', '/topic']);
      const basic = `Basic ${Buffer.from('hook user:p@ss:w0rd').toString('base64')}`;
      for (const h of receiver.hooks) expect(h.headers.authorization).toBe(basic);
    } finally {
      await receiver.close();
    }
    // Unreachable now: the failure's detail names the URL without its password.
    const s = await seedAccount(server);
    const port = await closedPort();
    const alert = await server.services.alerts.create(s.device, {
      name: 'guarded, down',
      field: 'g',
      operator: '>',
      value: 0,
      actions: ['webhook'],
      webhookUrl: `http://user:s3cret@127.0.0.1:${port}/hook`,
    });
    await send(server, s.device, s.token, { g: 1 });
    const failed = await settledDelivery(server, alert.id, 'webhook');
    expect(failed.status).toBe('failed');
    expect(JSON.stringify(await deliveries(server, alert.id))).not.toContain('s3cret');
  });

  it('retries stop once the alert is deleted', async () => {
    let deleted!: () => void;
    const deletion = new Promise<void>((resolve) => (deleted = resolve));
    // Every attempt is answered 500, the first ones only once the alert is gone.
    const receiver = await startReceiver(async (_n, res) => {
      await deletion;
      res.writeHead(500).end();
    });
    try {
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, {
        name: 'deleted while paging',
        field: 'p',
        operator: '>',
        value: 0,
        cooldown: 0,
        actions: ['webhook', 'ntfy'],
        webhookUrl: receiver.url,
        ntfyUrl: `${receiver.url}/topic`,
      });
      await send(server, s.device, s.token, { p: 1 });
      await waitFor(() => (receiver.hooks.length === 2 ? true : null), 'the first attempts');
      await server.services.alerts.remove(alert);
      deleted();
      // The whole schedule (50 + 100 + 200 ms) and more: no attempt after the deletion.
      await new Promise((r) => setTimeout(r, 800));
      expect(receiver.hooks).toHaveLength(2);
    } finally {
      await receiver.close();
    }
  });

  it('a webhook answering 500 is retried with backoff and recorded as sent once it answers 200', async () => {
    const receiver = await startReceiver((n, res) => res.writeHead(n <= 2 ? 500 : 204).end());
    try {
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, {
        name: 'flaky',
        field: 'p',
        operator: '<',
        value: 5,
        actions: ['webhook'],
        webhookUrl: receiver.url,
      });
      await send(server, s.device, s.token, { p: 1 });
      const d = await settledDelivery(server, alert.id, 'webhook');
      expect(d).toMatchObject({ status: 'sent', attempts: 3 });
      expect(receiver.hooks).toHaveLength(3);
      // Every attempt carries the same body and a valid signature header.
      expect(new Set(receiver.hooks.map((h) => h.body)).size).toBe(1);
    } finally {
      await receiver.close();
    }
  });

  it('a failing webhook neither delays nor fails ingest, and ends "failed" with the reason', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    // The first attempt is held open until the test has its ingest answer.
    const receiver = await startReceiver(async (n, res) => {
      if (n === 1) await held;
      res.writeHead(500).end('nope');
    });
    try {
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, {
        name: 'down',
        field: 'p',
        operator: '>',
        value: 0,
        actions: ['webhook'],
        webhookUrl: receiver.url,
        // The second reading (p: 0) resolves the alert: only the trigger's delivery is counted here.
        notifyResolved: false,
      });
      const res = await ingest(server, { device_id: s.device.id, access_token: s.token, data: { p: 7 } });
      await waitFor(() => receiver.hooks.length === 1, 'the first attempt');
      // Ingest answered 200 while the webhook attempt was still open, and the reading is stored.
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ success: true });
      const latest = await (await server.request(`/v1/devices/${s.device.id}/telemetry/latest`, { key: s.key })).json();
      expect(latest.data.data).toEqual({ p: 7 });
      expect((await deliveries(server, alert.id))[0]!.deliveries[0]!.status).toBe('pending');
      // Other readings keep flowing meanwhile.
      expect((await ingest(server, { device_id: s.device.id, access_token: s.token, data: { p: 0 } })).status).toBe(200);
      release();
      const d = await settledDelivery(server, alert.id, 'webhook');
      expect(d).toMatchObject({ status: 'failed', attempts: 4 });
      expect(d.detail).toMatch(/HTTP 500/);
      expect(receiver.hooks).toHaveLength(4);
    } finally {
      release();
      await receiver.close();
    }
  });

  it('an unreachable webhook URL ends "failed" with the network reason', async () => {
    const port = await closedPort();
    const s = await seedAccount(server);
    const alert = await server.services.alerts.create(s.device, {
      name: 'nowhere',
      field: 'p',
      operator: '>',
      value: 0,
      actions: ['webhook'],
      webhookUrl: `http://127.0.0.1:${port}/x`,
    });
    expect((await ingest(server, { device_id: s.device.id, access_token: s.token, data: { p: 1 } })).status).toBe(200);
    const d = await settledDelivery(server, alert.id, 'webhook');
    expect(d).toMatchObject({ status: 'failed', attempts: 4 });
    expect(d.detail).toMatch(/ECONNREFUSED/);
  });
});

describe('deliveries running at shutdown', () => {
  it('are recorded as failed ("server shut down"), whatever the action, not left pending', async () => {
    // An SMTP server that accepts the connection and never greets: the email stays in flight.
    const smtpSockets: net.Socket[] = [];
    const silentSmtp = net.createServer((socket) => smtpSockets.push(socket));
    await new Promise<void>((resolve) => silentSmtp.listen(0, '127.0.0.1', resolve));
    const smtpPort = (silentSmtp.address() as AddressInfo).port;
    // A webhook receiver that never answers.
    const receiver = await startReceiver(() => undefined);
    const dataDir = tempDir('telemetryd-shutdown-deliveries-');
    try {
      const server = await startTestServer({ 'data-dir': dataDir, 'smtp-url': `smtp://127.0.0.1:${smtpPort}` });
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, {
        name: 'held',
        field: 'p',
        operator: '>',
        value: 0,
        actions: ['email', 'webhook'],
        webhookUrl: receiver.url,
      });
      await send(server, s.device, s.token, { p: 1 });
      await waitFor(() => receiver.hooks.length === 1, 'the webhook attempt');
      expect(server.services.alertEvaluation.pending).toBe(2);
      await server.stop();

      const reopened = await openDataDirStorage(dataDir);
      try {
        const stored = await reopened.services.alerts.getAny(alert.id);
        const [event] = (await reopened.services.alerts.historyWithDeliveries(stored, 10)) as { deliveries: Delivery[] }[];
        const byAction = Object.fromEntries(event!.deliveries.map((d) => [d.action, d]));
        if (onPostgres) {
          // Another node may be running: what a node stopping leaves is adopted by the one
          // leading the jobs (docs/cluster.md, "Once per cluster"), so it stays pending.
          expect(byAction.email).toMatchObject({ status: 'pending' });
          expect(byAction.webhook).toMatchObject({ status: 'pending' });
        } else {
          expect(byAction.email).toMatchObject({ status: 'failed', detail: 'server shut down' });
          expect(byAction.webhook).toMatchObject({ status: 'failed' });
        }
      } finally {
        await reopened.close();
      }
    } finally {
      await receiver.close();
      for (const socket of smtpSockets) socket.destroy();
      await new Promise<void>((resolve) => silentSmtp.close(() => resolve()));
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
