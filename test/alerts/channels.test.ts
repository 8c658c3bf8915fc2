/**
 * Resolution and every notification channel against real receivers: HTTP listeners that
 * check the bodies and headers Slack, Discord, ntfy and a webhook receiver get, and
 * smtp-server for email. Covers hysteresis (clear_value), notify_resolved, retries, the
 * Public API's alert shape (action names, never URLs), and the definitions the dashboard API
 * refuses (a clear value on the wrong side, a URL without its action).
 */
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AlertAction } from '../../src/domain/types.js';
import { dashboardSession } from '../helpers/dashboard.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';
import { eventsOf, type ReceivedRequest, send, sleep, startHttpReceiver, waitFor, waitForEvents } from './helpers.js';

const PUBLIC_URL = 'https://telemetry.example.test';
let server: TestServer;
let receiver: Awaited<ReturnType<typeof startHttpReceiver>>;
let smtp: SMTPServer;
const mails: string[] = [];

beforeAll(async () => {
  receiver = await startHttpReceiver();
  smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onData(stream, _session, callback) {
      let raw = '';
      stream.on('data', (c: Buffer) => (raw += c.toString('utf8')));
      stream.on('end', () => {
        mails.push(readableMail(raw));
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve));
  server = await startTestServer(
    { 'public-url': PUBLIC_URL, 'smtp-url': `smtp://127.0.0.1:${(smtp.server.address() as AddressInfo).port}` },
    { webhookRetryDelaysMs: [50, 50, 50], silenceCheckMs: 200 },
  );
});
afterAll(async () => {
  await server.stop();
  await receiver.close();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

/**
 * The message with folded headers unfolded and a quoted-printable body decoded (nodemailer
 * picks it for text with non-ASCII characters, such as a device named "Kühlraum").
 */
function readableMail(raw: string): string {
  const unfolded = raw.replace(/\r\n(?=[ \t])/g, '');
  if (!/^Content-Transfer-Encoding: quoted-printable/im.test(unfolded)) return unfolded;
  const qp = unfolded.replace(/=\r\n/g, '').replace(/(?:=[0-9A-F]{2})+/g, (m) => Buffer.from(m.replace(/=/g, ''), 'hex').toString('utf8'));
  return qp;
}

/** Requests to one path, parsed by kind, once `n` have arrived. */
async function requestsTo(path: string, n: number): Promise<ReceivedRequest[]> {
  return waitFor(() => {
    const got = receiver.received.filter((r) => r.url === path);
    return got.length >= n ? got : null;
  }, `${n} request(s) to ${path}`);
}

function decodeWord(value: string): string {
  const m = /^=\?UTF-8\?B\?([A-Za-z0-9+/=]+)\?=$/.exec(value);
  return m ? Buffer.from(m[1]!, 'base64').toString('utf8') : value;
}

/** The actions with a receiver URL for each that POSTs (an alert takes no URL of an action it lacks). */
function channels(tag: string, actions: AlertAction[]) {
  const url = (action: AlertAction, path: string) => (actions.includes(action) ? `${receiver.base}/${tag}/${path}` : null);
  return {
    actions,
    webhookUrl: url('webhook', 'hook'),
    slackUrl: url('slack', 'slack'),
    discordUrl: url('discord', 'discord'),
    ntfyUrl: url('ntfy', 'ntfy/fridge-alerts'),
  };
}

describe('threshold alerts: resolution, hysteresis and every channel', () => {
  it('sends short messages with a device link to slack, discord, ntfy, webhook and email, then resolution notices', async () => {
    const s = await seedAccount(server, { email: 'cold@example.com', device: { name: 'Kühlraum 3' } });
    const alert = await server.services.alerts.create(s.device, {
      name: 'Too warm',
      field: 'env.temp',
      operator: '>',
      value: 30,
      clearValue: 25,
      cooldown: 0,
      severity: 'critical',
      ...channels('a', ['email', 'webhook', 'slack', 'discord', 'ntfy']),
    });
    const link = `${PUBLIC_URL}/#/devices/${s.device.id}`;
    const who = `Too warm: Kühlraum 3 (${s.device.id})`;

    await send(server, s.device, s.token, { env: { temp: 31 } });
    const [event] = await eventsOf(server, alert.id);
    expect((await server.services.alerts.getAny(alert.id)).state).toBe('firing');

    const [slack] = await requestsTo('/a/slack', 1);
    expect(slack!.method).toBe('POST');
    expect(slack!.headers['content-type']).toBe('application/json');
    const slackText = JSON.parse(slack!.body).text as string;
    expect(Object.keys(JSON.parse(slack!.body))).toEqual(['text']);
    const text = `[critical] ${who}\nenv.temp = 31 (condition > 30) at ${event!.triggered_at}\n${link}`;
    // Slack reads < > & as markup: they are escaped.
    expect(slackText).toBe(text.replace('>', '&gt;'));

    const [discord] = await requestsTo('/a/discord', 1);
    expect(discord!.headers['content-type']).toBe('application/json');
    expect(JSON.parse(discord!.body)).toEqual({ content: text });

    const [ntfy] = await requestsTo('/a/ntfy/fridge-alerts', 1);
    expect(ntfy!.body).toBe(`env.temp = 31 (condition > 30) at ${event!.triggered_at}`);
    // A non-ASCII title goes as an RFC 2047 encoded word (ntfy decodes it).
    expect(ntfy!.headers.title).toMatch(/^=\?UTF-8\?B\?/);
    expect(decodeWord(ntfy!.headers.title as string)).toBe(`[critical] ${who}`);
    expect(ntfy!.headers.priority).toBe('5');
    expect(ntfy!.headers.tags).toBe('rotating_light,critical');
    expect(ntfy!.headers.click).toBe(link);

    const [hook] = await requestsTo('/a/hook', 1);
    expect(hook!.headers['x-telemetryd-signature']).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    expect(JSON.parse(hook!.body)).toMatchObject({
      type: 'triggered',
      event: { id: event!.id, resolved_at: null },
      reading: { data: { env: { temp: 31 } } },
    });

    const mail = await waitFor(() => mails.find((m) => m.includes(event!.id)), 'the alert email');
    expect(mail).toContain(link);

    // Hysteresis: 28 no longer meets > 30 but is not below 25: still firing, nothing sent.
    await send(server, s.device, s.token, { env: { temp: 28 } });
    // A reading without the field does not resolve either.
    await send(server, s.device, s.token, { other: 1 });
    expect((await server.services.alerts.getAny(alert.id)).state).toBe('firing');
    // While firing, matches keep triggering under the cooldown (0 here).
    await send(server, s.device, s.token, { env: { temp: 32 } });
    const [, second] = await requestsTo('/a/slack', 2);
    expect(JSON.parse(second!.body).text).toContain('env.temp = 32');
    await sleep(300);
    expect(receiver.received.filter((r) => r.url === '/a/slack')).toHaveLength(2);

    await send(server, s.device, s.token, { env: { temp: 24.5 } });
    const resolvedAt = new Date((await server.storage.repos.readings.latest(s.device.seq))!.time).toISOString();
    expect((await server.services.alerts.getAny(alert.id)).state).toBe('ok');
    const events = await eventsOf(server, alert.id);
    expect(events).toHaveLength(2);
    // The latest event of the firing carries the resolution.
    expect(events[0]!.resolved_at).toBe(resolvedAt);
    expect(events[1]!.resolved_at).toBeNull();

    const resolvedText = `[critical] Resolved: ${who}\nenv.temp = 24.5 (condition > 30, clear at 25) at ${resolvedAt}\n${link}`;
    expect(JSON.parse((await requestsTo('/a/slack', 3))[2]!.body)).toEqual({ text: resolvedText.replace('>', '&gt;') });
    expect(JSON.parse((await requestsTo('/a/discord', 3))[2]!.body)).toEqual({ content: resolvedText });
    const ntfyResolved = (await requestsTo('/a/ntfy/fridge-alerts', 3))[2]!;
    expect(decodeWord(ntfyResolved.headers.title as string)).toBe(`[critical] Resolved: ${who}`);
    expect(ntfyResolved.headers.tags).toBe('white_check_mark,critical');
    const hookResolved = JSON.parse((await requestsTo('/a/hook', 3))[2]!.body);
    expect(hookResolved).toMatchObject({
      type: 'resolved',
      event: { id: events[0]!.id, resolved_at: resolvedAt },
      reading: { data: { env: { temp: 24.5 } } },
    });
    const resolvedMail = await waitFor(() => mails.find((m) => /^Subject: .*resolved/m.test(m)), 'the resolution email');
    expect(resolvedMail).toContain(events[0]!.id);

    // Outcomes of the resolution notice are kept apart from the trigger's.
    const detail = await waitFor(async () => {
      const [latest] = await server.services.alerts.historyWithDeliveries(await server.services.alerts.getAny(alert.id), 10);
      return latest!.resolution_deliveries.every((d) => d.status === 'sent') ? latest : null;
    }, 'resolution deliveries sent');
    expect(detail.resolution_deliveries.map((d) => d.action).sort()).toEqual(['discord', 'email', 'ntfy', 'slack', 'webhook']);
    expect(detail.deliveries.every((d) => d.status === 'sent')).toBe(true);
  });

  it('without clear_value the first reading that no longer meets the condition resolves; notify_resolved false sends no notice', async () => {
    const s = await seedAccount(server);
    const alert = await server.services.alerts.create(s.device, {
      name: 'Door',
      field: 'door',
      operator: '>=',
      value: 1,
      severity: 'warning',
      notifyResolved: false,
      ...channels('b', ['slack', 'ntfy']),
    });
    await send(server, s.device, s.token, { door: 1 });
    await requestsTo('/b/slack', 1);
    const [ntfy] = await requestsTo('/b/ntfy/fridge-alerts', 1);
    expect(ntfy!.headers.priority).toBe('4');
    expect(ntfy!.headers.tags).toBe('warning,warning');
    expect(ntfy!.headers.title).toBe(`[warning] Door: sensor 1 (${s.device.id})`);

    await send(server, s.device, s.token, { door: 0 });
    expect((await server.services.alerts.getAny(alert.id)).state).toBe('ok');
    expect((await eventsOf(server, alert.id))[0]!.resolved_at).not.toBeNull();
    const [latest] = await server.services.alerts.historyWithDeliveries(await server.services.alerts.getAny(alert.id), 10);
    expect(latest!.resolution_deliveries).toEqual([]);
    await sleep(500);
    expect(receiver.received.filter((r) => r.url.startsWith('/b/'))).toHaveLength(2);
  });

  it('a chat channel answering 500 is retried like a webhook and recorded as sent; info maps to ntfy priority 3', async () => {
    const flaky = await startHttpReceiver((n) => (n <= 2 ? 500 : 200));
    try {
      const s = await seedAccount(server);
      const alert = await server.services.alerts.create(s.device, {
        name: 'Battery',
        field: 'battery',
        operator: '<',
        value: 10,
        severity: 'info',
        actions: ['ntfy'],
        ntfyUrl: `${flaky.base}/topic`,
      });
      await send(server, s.device, s.token, { battery: 5 });
      const d = await waitFor(async () => {
        const [latest] = await server.services.alerts.historyWithDeliveries(await server.services.alerts.getAny(alert.id), 10);
        return latest?.deliveries[0]?.status === 'sent' ? latest.deliveries[0] : null;
      }, 'the ntfy delivery');
      expect(d).toMatchObject({ action: 'ntfy', status: 'sent', attempts: 3 });
      expect(flaky.received).toHaveLength(3);
      expect(flaky.received.every((r) => r.headers.priority === '3')).toBe(true);
    } finally {
      await flaky.close();
    }
  });

  it('no_data messages name the silence; the Public API lists action names, never URLs', async () => {
    const s = await seedAccount(server, { device: { name: 'Freezer' } });
    const alert = await server.services.alerts.create(s.device, {
      name: 'Silent',
      kind: 'no_data',
      field: 'temp',
      value: 10,
      ...channels('c', ['discord', 'webhook']),
    });
    await send(server, s.device, s.token, { temp: -18 });
    const [event] = await waitForEvents(server, alert.id, 1);
    const [discord] = await requestsTo('/c/discord', 1);
    expect(JSON.parse(discord!.body).content).toBe(
      `[warning] Silent: Freezer (${s.device.id})\nno reading with temp for ${event!.condition_value} s (limit 10 s), since ${new Date(
        Date.parse(event!.triggered_at!) - (event!.condition_value as number) * 1000,
      ).toISOString()} at ${event!.triggered_at}\n${PUBLIC_URL}/#/devices/${s.device.id}`,
    );
    await send(server, s.device, s.token, { temp: -17 });
    const [, back] = await requestsTo('/c/discord', 2);
    expect(JSON.parse(back!.body).content).toMatch(
      /^\[warning\] Resolved: Silent: Freezer \(dev_\w+\)\nsending again after 1\d s of silence at /,
    );

    const res = await server.request(`/v1/alerts/${alert.id}`, { key: s.key });
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).not.toContain(receiver.base);
    expect(text).not.toMatch(/_url/);
    expect(JSON.parse(text).data).toMatchObject({
      kind: 'no_data',
      state: 'ok',
      notify_resolved: true,
      actions: ['discord', 'webhook'],
      condition: { field: 'temp', operator: 'no_data', value: 10 },
    });
    expect(JSON.parse(text).data.condition).not.toHaveProperty('clear_value');
    const history = await (await server.request(`/v1/alerts/${alert.id}/history`, { key: s.key })).json();
    expect(history.data[0].resolved_at).toMatch(/Z$/);
  }, 30_000);
});

describe('alert definitions the dashboard API refuses, on create and on edit', () => {
  /** A signed-in dashboard session of a new account; `call` answers status and parsed body. */
  async function dashboard() {
    const s = await seedAccount(server);
    await server.services.accounts.setPassword(s.account.seq, 'password-123');
    const { call } = await dashboardSession(server.httpUrl, s.account.email, 'password-123');
    return { ...s, call, stored: async () => await server.services.alerts.listForDevice(s.device) };
  }

  it('clear_value on the wrong side of the threshold, or equal to it, is 400 and stores nothing', async () => {
    const d = await dashboard();
    const base = { device_id: d.device.id, name: 'hysteresis', field: 't', actions: ['email'] };
    const cases: [Record<string, unknown>, string][] = [
      // Would resolve as soon as the condition stops holding, not at the clear value.
      [
        { operator: '>', value: 30, clear_value: 35 },
        'clear_value must be below the threshold for the > operator (got clear_value 35, value 30)',
      ],
      [
        { operator: '>=', value: 30, clear_value: '31' },
        'clear_value must be below the threshold for the >= operator (got clear_value 31, value 30)',
      ],
      [
        { operator: '<', value: 5, clear_value: 2 },
        'clear_value must be above the threshold for the < operator (got clear_value 2, value 5)',
      ],
      [
        { operator: '<=', value: -5, clear_value: -6 },
        'clear_value must be above the threshold for the <= operator (got clear_value -6, value -5)',
      ],
      // Equal: no band between firing and resolving.
      [
        { operator: '>', value: 30, clear_value: 30 },
        'clear_value must be below the threshold for the > operator (got clear_value 30, value 30)',
      ],
      [
        { operator: '>=', value: 30, clear_value: 30 },
        'clear_value must be below the threshold for the >= operator (got clear_value 30, value 30)',
      ],
      [
        { operator: '<', value: 5, clear_value: 5 },
        'clear_value must be above the threshold for the < operator (got clear_value 5, value 5)',
      ],
      [
        { operator: '<=', value: 5, clear_value: 5 },
        'clear_value must be above the threshold for the <= operator (got clear_value 5, value 5)',
      ],
    ];
    for (const [condition, error] of cases) {
      const r = await d.call('POST', '/alerts', { ...base, ...condition });
      expect(r.status, JSON.stringify(condition)).toBe(400);
      expect(r.body, JSON.stringify(condition)).toEqual({ error });
    }
    expect(await d.stored()).toEqual([]);

    // Just past the threshold on the resolving side is a band, however narrow.
    for (const condition of [
      { operator: '>', value: 30, clear_value: 29.99 },
      { operator: '>=', value: 30, clear_value: 29 },
      { operator: '<', value: 5, clear_value: '5.5' },
      { operator: '<=', value: -5, clear_value: -4 },
    ]) {
      const r = await d.call('POST', '/alerts', { ...base, ...condition });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.data.condition).toEqual({
        field: 't',
        operator: condition.operator,
        value: condition.value,
        clear_value: Number(condition.clear_value),
      });
    }
    expect(await d.stored()).toHaveLength(4);
  });

  it('an edit that would put clear_value on the wrong side is 400 and leaves the alert as it was', async () => {
    const d = await dashboard();
    const base = { device_id: d.device.id, name: 'warm', field: 't', actions: ['email'] };
    const created = await d.call('POST', '/alerts', { ...base, operator: '>', value: 30, clear_value: 25, cooldown: 0 });
    expect(created.status).toBe(200);
    const id = created.body.data.id as string;
    // Firing, so a refused edit that went through anyway would show as a state change too.
    await send(server, d.device, d.token, { t: 31 });
    const before = await server.services.alerts.getAny(id);
    expect(before.state).toBe('firing');

    for (const [edit, error] of [
      [{ operator: '>', value: 30, clear_value: 35 }, /below the threshold for the > operator \(got clear_value 35, value 30\)/],
      // The threshold moved below the stored clear value (clear_value not sent: it is kept).
      [{ operator: '>', value: 20 }, /below the threshold for the > operator \(got clear_value 25, value 20\)/],
      [{ operator: '>', value: 25 }, /below the threshold for the > operator \(got clear_value 25, value 25\)/],
      // Only the operator changes: the stored clear value is now on the wrong side.
      [{ operator: '<', value: 30 }, /above the threshold for the < operator \(got clear_value 25, value 30\)/],
    ] as const) {
      const r = await d.call('PUT', `/alerts/${id}`, { ...base, ...edit });
      expect(r.status, JSON.stringify(edit)).toBe(400);
      expect(r.body, JSON.stringify(edit)).toEqual({ error: expect.stringMatching(error) });
      expect(await server.services.alerts.getAny(id), JSON.stringify(edit)).toEqual(before);
    }

    // Changing the operator together with a clear value on its side is accepted.
    const flipped = await d.call('PUT', `/alerts/${id}`, { ...base, operator: '<', value: 30, clear_value: 33 });
    expect(flipped.status, JSON.stringify(flipped.body)).toBe(200);
    expect(flipped.body.data.condition).toEqual({ field: 't', operator: '<', value: 30, clear_value: 33 });
  });

  it('a channel URL without its action is 400 on create and edit; an edit dropping an action drops its URL', async () => {
    const d = await dashboard();
    const base = { device_id: d.device.id, name: 'door', field: 'door', operator: '==', value: 1 };
    const hook = `${receiver.base}/d/hook`;
    for (const [body, action] of [
      [{ actions: ['email'], webhook_url: hook }, 'webhook'],
      [{ actions: [], slack_url: `${receiver.base}/d/slack` }, 'slack'],
      [{ actions: ['webhook'], webhook_url: hook, discord_url: `${receiver.base}/d/discord` }, 'discord'],
      [{ actions: ['email', 'slack'], slack_url: `${receiver.base}/d/slack`, ntfy_url: `${receiver.base}/d/ntfy` }, 'ntfy'],
    ] as const) {
      const r = await d.call('POST', '/alerts', { ...base, ...body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body).toEqual({ error: `a ${action} URL is used only by the ${action} action, which the alert's actions do not include` });
    }
    expect(await d.stored()).toEqual([]);

    const created = await d.call('POST', '/alerts', {
      ...base,
      actions: ['webhook', 'slack'],
      webhook_url: hook,
      slack_url: `${receiver.base}/d/slack`,
    });
    expect(created.status).toBe(200);
    const id = created.body.data.id as string;
    const before = await server.services.alerts.getAny(id);

    // Unticking the webhook while still sending its URL: refused, nothing changes.
    for (const edit of [
      { actions: ['slack'], webhook_url: hook },
      { actions: ['webhook', 'slack'], webhook_url: hook, ntfy_url: `${receiver.base}/d/ntfy` },
    ]) {
      const r = await d.call('PUT', `/alerts/${id}`, { ...base, ...edit });
      expect(r.status, JSON.stringify(edit)).toBe(400);
      expect(r.body.error).toMatch(/URL is used only by the (webhook|ntfy) action/);
      expect(await server.services.alerts.getAny(id)).toEqual(before);
    }

    // Dropping slack without mentioning its URL drops the URL too; the webhook's stays.
    const dropped = await d.call('PUT', `/alerts/${id}`, { ...base, actions: ['webhook'], webhook_url: hook });
    expect(dropped.status, JSON.stringify(dropped.body)).toBe(200);
    expect(dropped.body.data).toMatchObject({ actions: ['webhook'], webhook_url: hook, slack_url: null });
    expect(await server.services.alerts.getAny(id)).toMatchObject({ actions: ['webhook'], webhookUrl: hook, slackUrl: null });

    // An edit that leaves every URL out keeps them, the webhook's as the others'.
    const moved = await d.call('PUT', `/alerts/${id}`, { ...base, value: 2, actions: ['webhook'] });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    expect(await server.services.alerts.getAny(id)).toMatchObject({ value: 2, actions: ['webhook'], webhookUrl: hook });

    // A URL that is not text is the caller's mistake (400), on create and edit alike.
    const kept = await server.services.alerts.getAny(id);
    for (const [method, path] of [
      ['PUT', `/alerts/${id}`],
      ['POST', '/alerts'],
    ] as const) {
      for (const field of ['webhook_url', 'slack_url'] as const) {
        const r = await d.call(method, path, { ...base, actions: ['webhook', 'slack'], webhook_url: hook, [field]: 5 });
        expect(r.status, `${method} ${field}`).toBe(400);
        expect(r.body).toEqual({ error: `${field} must be a string` });
      }
    }
    expect(await server.services.alerts.getAny(id)).toEqual(kept);
    expect((await d.stored()).length).toBe(1);
  });
});
