/**
 * The dashboard's JSON API without a browser: sign-in throttling, cookie attributes, session
 * lifetime on password change, the setup link's limits, and exports of many readings.
 */

import { readFileSync } from 'node:fs';
import path from 'node:path';
import tls from 'node:tls';
import ExcelJS from 'exceljs';
import { afterEach, describe, expect, it } from 'vitest';
import { readingChunks } from '../../src/http/routes/dashboardLive.js';
import { snippets } from '../../web/src/snippets.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

const servers: TestServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.stop()));
});

async function start(overrides: Record<string, unknown> = {}) {
  const server = await startTestServer(overrides);
  servers.push(server);
  return server;
}

const json = { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' };

async function signIn(server: TestServer, email: string, password: string) {
  const res = await server.request('/ui/api/sign-in', { method: 'POST', headers: json, body: JSON.stringify({ email, password }) });
  const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0]!;
  const body = (await res.json()) as { csrf_token?: string; error?: string };
  return { res, cookie, csrf: body.csrf_token ?? '', body };
}

async function accountWithPassword(server: TestServer, password = 'password-123', plan = 'starter') {
  const seeded = await seedAccount(server, { plan });
  await server.services.accounts.setPassword(seeded.account.seq, password);
  return seeded;
}

describe('dashboard API', () => {
  it('requires a session for everything but sign-in', async () => {
    const server = await start();
    for (const path of ['/ui/api/devices', '/ui/api/keys', '/ui/api/account', '/ui/api/events']) {
      expect((await server.request(path)).status, path).toBe(401);
    }
    // The session probe answers "no one" as a value (a signed-out visit is no error).
    const probe = await server.request('/ui/api/session');
    expect(probe.status).toBe(200);
    expect(await probe.json()).toEqual({ account: null });
  });

  it('throttles failed sign-ins per email, with the same answer for unknown emails', async () => {
    const server = await start();
    const { account } = await accountWithPassword(server);
    for (let i = 0; i < 5; i++) {
      const known = await signIn(server, account.email, 'wrong-password');
      expect(known.res.status).toBe(401);
      expect(known.body.error).toBe('wrong email or password');
      expect((await signIn(server, 'ghost@example.com', 'wrong-password')).body.error).toBe('wrong email or password');
    }
    // Locked now, even with the right password; an unknown email is locked the same way.
    const locked = await signIn(server, account.email, 'password-123');
    expect(locked.res.status).toBe(429);
    expect(Number(locked.res.headers.get('retry-after'))).toBeGreaterThan(0);
    const lockedGhost = await signIn(server, 'ghost@example.com', 'password-123');
    expect(lockedGhost.res.status).toBe(429);
    expect(lockedGhost.body.error!.replace(/\d+/g, 'N')).toBe(locked.body.error!.replace(/\d+/g, 'N'));
  });

  it('throttles failed sign-ins per client address across many emails', async () => {
    const server = await start();
    await accountWithPassword(server);
    let status = 0;
    for (let i = 0; i < 21; i++) status = (await signIn(server, `spray${i}@example.com`, 'x')).res.status;
    expect(status).toBe(429);
  });

  it('sets an HttpOnly SameSite cookie, Secure when the public URL is https', async () => {
    const plain = await start();
    const a = await accountWithPassword(plain);
    const res = (await signIn(plain, a.account.email, 'password-123')).res;
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Lax/);
    expect(cookie).not.toMatch(/Secure/);

    const tls = await start({ 'public-url': 'https://telemetry.example.com' });
    const b = await accountWithPassword(tls);
    expect((await signIn(tls, b.account.email, 'password-123')).res.headers.get('set-cookie')).toMatch(/; Secure/);
  });

  it('changing the password needs the current one and signs out the other sessions', async () => {
    const server = await start();
    const { account } = await accountWithPassword(server);
    const one = await signIn(server, account.email, 'password-123');
    const two = await signIn(server, account.email, 'password-123');
    const change = (cookie: string, csrf: string, current: string) =>
      server.request('/ui/api/account/password', {
        method: 'POST',
        headers: { ...json, cookie, 'x-csrf-token': csrf },
        body: JSON.stringify({ current_password: current, new_password: 'new-password-456' }),
      });
    expect((await change(one.cookie, one.csrf, 'not it')).status).toBe(400);
    expect((await change(one.cookie, one.csrf, 'password-123')).status).toBe(200);
    expect((await server.request('/ui/api/account', { headers: { cookie: one.cookie } })).status).toBe(200);
    expect((await server.request('/ui/api/account', { headers: { cookie: two.cookie } })).status).toBe(401);
    expect((await signIn(server, account.email, 'password-123')).res.status).toBe(401);
    expect((await signIn(server, account.email, 'new-password-456')).res.status).toBe(200);

    // Sign-out ends the session server-side.
    const out = await server.request('/ui/api/sign-out', {
      method: 'POST',
      headers: { ...json, cookie: one.cookie, 'x-csrf-token': one.csrf },
    });
    expect(out.status).toBe(200);
    expect((await server.request('/ui/api/account', { headers: { cookie: one.cookie } })).status).toBe(401);
  });

  it('the setup link is refused once an account exists (e.g. created with the CLI)', async () => {
    const server = await start();
    const token = new URL(server.setupUrl!).searchParams.get('token')!;
    await seedAccount(server);
    const check = await server.request(`/ui/api/setup?token=${token}`);
    expect(await check.json()).toEqual({ valid: false });
    const res = await server.request('/ui/api/setup', {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ token, email: 'late@example.com', password: 'password-123' }),
    });
    expect(res.status).toBe(401);
  });

  it('a state-changing request without the CSRF header is refused before sign-in too', async () => {
    const server = await start();
    const { account } = await accountWithPassword(server);
    const res = await server.request('/ui/api/sign-in', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: account.email, password: 'password-123' }),
    });
    expect(res.status).toBe(403);
    const form = await server.request('/ui/api/sign-in', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: 'http://evil.example' },
      body: 'email=a&password=b',
    });
    expect(form.status).toBe(403);
  });

  it('exports every reading of a range across chunk boundaries, nested objects as dotted columns, arrays as JSON text, capped to retention', async () => {
    const server = await start();
    const { account, device } = await accountWithPassword(server, 'password-123', 'free'); // 7-day retention
    const now = Date.now();
    // 2,500 readings, 1,200 of them sharing one millisecond (a chunk ends inside that run).
    const batch = Array.from({ length: 2500 }, (_, i) => ({
      deviceSeq: device.seq,
      time: i < 1200 ? now - 60_000 : now - 60_000 + (i - 1199),
      data: JSON.stringify({ n: i, env: { t: i / 10, deep: { on: i % 2 === 0 } }, note: i === 0 ? '=cmd()' : 'ok', list: [i, { a: 1 }] }),
    }));
    batch.push({ deviceSeq: device.seq, time: now - 8 * 86_400_000, data: JSON.stringify({ n: -1 }) }); // outside retention
    await Promise.all(batch.map((r) => server.storage.writer.append(r)));

    const seen: number[] = [];
    for await (const chunk of readingChunks(server.services, account, device, now - 86_400_000, now + 1))
      for (const r of chunk) seen.push(JSON.parse(r.data).n);
    expect(seen).toEqual(Array.from({ length: 2500 }, (_, i) => i));

    const { cookie } = await signIn(server, account.email, 'password-123');
    const csv = await server.request(`/ui/api/devices/${device.id}/export?format=csv&range=30d`, { headers: { cookie } });
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-disposition')).toContain(`${device.id}-7d.csv`); // 30d capped to the free plan's 7 days
    const lines = (await csv.text()).trim().split('\r\n');
    expect(lines[0]).toBe('time,n,env.t,env.deep.on,note,list');
    expect(lines).toHaveLength(2501);
    expect(lines[1]).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z,0,0,true,'=cmd\(\),"\[0,{""a"":1}\]"$/);

    const xlsx = await server.request(`/ui/api/devices/${device.id}/export?format=xlsx&range=24h`, { headers: { cookie } });
    expect(xlsx.status).toBe(200);
    const workbook = new ExcelJS.Workbook();
    await workbook.xlsx.load(Buffer.from(await xlsx.arrayBuffer()) as unknown as ArrayBuffer);
    const sheet = workbook.getWorksheet('readings')!;
    expect(sheet.rowCount).toBe(2501);
    expect((sheet.getRow(1).values as unknown[]).slice(1)).toEqual(['time', 'n', 'env.t', 'env.deep.on', 'note', 'list']);
    expect((sheet.getRow(2501).values as unknown[]).slice(2)).toEqual([2499, 249.9, false, 'ok', JSON.stringify([2499, { a: 1 }])]);
  });

  it("gives devices the MQTT listener's real certificate: a download that verifies the TLS listener, in the session and in the snippets", async () => {
    const server = await start({ 'mqtt-port': '0' });
    const download = await server.request('/mqtt-ca.pem');
    expect(download.status).toBe(200);
    const pem = await download.text();
    expect(pem).toBe(readFileSync(path.join(server.dataDir, 'tls', 'cert.pem'), 'utf8'));
    // A device that trusts only the downloaded PEM completes a verified handshake.
    const authorized = await new Promise<boolean>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', servername: 'localhost', port: server.mqttPort!, ca: pem }, () => {
        resolve(socket.authorized);
        socket.destroy();
      });
      socket.once('error', reject);
    });
    expect(authorized).toBe(true);

    const { account } = await accountWithPassword(server);
    const { cookie } = await signIn(server, account.email, 'password-123');
    const session = (await (await server.request('/ui/api/session', { headers: { cookie } })).json()) as {
      mqtt: { certificate_pem: string; self_signed: boolean; port: number };
    };
    expect(session.mqtt).toMatchObject({ certificate_pem: pem, self_signed: true, port: server.mqttPort });

    const input = { deviceId: 'dev_x', token: 't'.repeat(32), publicUrl: server.config.publicUrl, mqttHost: 'localhost', mqttPort: 8883 };
    const shown = snippets({
      ...input,
      fields: [],
      network: 'wifi',
      protocol: 'mqtt',
      mqttEnabled: true,
      intervalSeconds: 60,
      certificatePem: pem,
      selfSigned: true,
    });
    const code = (id: string) => shown.find((s) => s.id === id)!.code;
    expect(code('esp32')).toContain(`R"(${pem.trim()})"`);
    // A keep-alive past the 60 s interval: PubSubClient's 15 s would have the broker close
    // the connection between two readings.
    expect(code('esp32')).toContain('mqtt.setKeepAlive(120);');
    expect(code('python')).toContain(`CA_CERT = """${pem.trim()}"""`);
    // The HTTP script goes on after a reading the server did not take, or a server it did not reach.
    const overHttp = snippets({
      ...input,
      fields: [],
      network: 'wifi',
      protocol: 'http',
      mqttEnabled: true,
      intervalSeconds: 60,
      certificatePem: pem,
      selfSigned: true,
    });
    const pythonHttp = overHttp.find((s) => s.id === 'python')!.code;
    expect(pythonHttp).toContain('except requests.RequestException as e:');
    expect(pythonHttp).not.toContain('raise_for_status');
    expect(code('mosquitto')).toContain(`curl -fsS -o ca.pem '${server.config.publicUrl}/mqtt-ca.pem'`);
  });

  it('has no certificate to download while MQTT over TLS is off', async () => {
    const server = await start();
    expect((await server.request('/mqtt-ca.pem')).status).toBe(404);
  });
});

describe('dashboard API: alerts of both kinds', () => {
  it('creates no_data and threshold alerts, refuses inconsistent ones with 400, and marks silent devices', async () => {
    const server = await start();
    const { account, device } = await accountWithPassword(server);
    const { cookie, csrf } = await signIn(server, account.email, 'password-123');
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await server.request(`/ui/api${path}`, {
        method,
        headers: { cookie, 'x-csrf-token': csrf, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      return { status: res.status, body: (await res.json()) as Record<string, any> };
    };
    const base = { device_id: device.id, name: 'a', actions: ['email'] };

    const noData = await call('POST', '/alerts', { ...base, kind: 'no_data', field: '*', operator: 'no_data', value: '600' });
    expect(noData.status).toBe(200);
    expect(noData.body.data).toMatchObject({ kind: 'no_data', state: 'ok', condition: { field: '*', operator: 'no_data', value: 600 } });
    const threshold = await call('POST', '/alerts', {
      ...base,
      field: 't',
      operator: '<',
      value: 2,
      clear_value: 4,
      actions: ['discord'],
      discord_url: 'https://chat.example.test/api/webhooks/1/x',
      notify_resolved: false,
    });
    expect(threshold.status).toBe(200);
    expect(threshold.body.data).toMatchObject({
      condition: { clear_value: 4 },
      notify_resolved: false,
      discord_url: 'https://chat.example.test/api/webhooks/1/x',
    });
    // Empty clears the clear value.
    const cleared = await call('PUT', `/alerts/${threshold.body.data.id}`, {
      ...base,
      field: 't',
      operator: '<',
      value: 2,
      clear_value: '',
    });
    expect(cleared.body.data.condition).not.toHaveProperty('clear_value');

    for (const [body, message] of [
      [{ ...base, field: 't', operator: '==', value: 1, clear_value: 0 }, /clear_value does not apply/],
      [{ ...base, kind: 'no_data', value: 9 }, /from 10 to 2592000/],
      [{ ...base, kind: 'no_data', value: 60, clear_value: 1 }, /threshold alerts only/],
      [{ ...base, kind: 'silence', value: 60 }, /unknown alert kind/],
      [{ ...base, field: 't', operator: '>', value: 1, actions: ['ntfy'] }, /ntfy URL/],
    ] as const) {
      const r = await call('POST', '/alerts', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error).toMatch(message);
    }

    // Seen once, 3 minutes ago, with a 60 s interval: silent. Paused: not silent.
    await server.storage.writer.append({ deviceSeq: device.seq, time: Date.now() - 180_000, data: '{"t":5}' });
    let list = await call('GET', '/devices');
    expect(list.body.data.find((d: { id: string }) => d.id === device.id).silent).toBe(true);
    await server.services.devices.pause(device);
    list = await call('GET', '/devices');
    expect(list.body.data.find((d: { id: string }) => d.id === device.id).silent).toBe(false);
  });
});
