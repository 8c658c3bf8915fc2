/**
 * The dashboard's JSON API without a browser: sign-in throttling, cookie attributes, session
 * lifetime on password change, the setup link's limits, and exports of many readings.
 */

import ExcelJS from 'exceljs';
import { afterEach, describe, expect, it } from 'vitest';
import { readingChunks } from '../../src/http/routes/dashboardLive.js';
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
    for (const path of ['/ui/api/devices', '/ui/api/keys', '/ui/api/account', '/ui/api/session', '/ui/api/events']) {
      expect((await server.request(path)).status, path).toBe(401);
    }
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
    expect((await server.request('/ui/api/session', { headers: { cookie: one.cookie } })).status).toBe(200);
    expect((await server.request('/ui/api/session', { headers: { cookie: two.cookie } })).status).toBe(401);
    expect((await signIn(server, account.email, 'password-123')).res.status).toBe(401);
    expect((await signIn(server, account.email, 'new-password-456')).res.status).toBe(200);

    // Sign-out ends the session server-side.
    const out = await server.request('/ui/api/sign-out', {
      method: 'POST',
      headers: { ...json, cookie: one.cookie, 'x-csrf-token': one.csrf },
    });
    expect(out.status).toBe(200);
    expect((await server.request('/ui/api/session', { headers: { cookie: one.cookie } })).status).toBe(401);
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
    server.services.repos.readings.insertBatch(batch);

    const seen: number[] = [];
    for (const chunk of readingChunks(server.services, account, device, now - 86_400_000, now + 1))
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
});
