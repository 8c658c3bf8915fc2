/**
 * --trust-proxy behind a real haproxy (HTTP mode, `option forwardfor`): the dashboard sign-in
 * throttle, which counts failures per client address, must see the client haproxy names and
 * nothing a client wrote into X-Forwarded-For itself. Clients bind 127.0.0.2 / 127.0.0.3 so
 * haproxy sees two different clients on one machine.
 */
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { buildServerConfig } from '../../src/config.js';
import { proxyTrust } from '../../src/http/trustProxy.js';
import { type RunningHaproxy, startHaproxy } from '../helpers/haproxy.js';
import { seedAccount, startTestServer, type TestServer } from '../helpers/server.js';

/** Failed sign-ins from one address before it gets 429 (src/domain/sessions.ts). */
const MAX_FAILURES_PER_ADDRESS = 20;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A server with one account whose password is `password-123`; its email is `s.email`. */
async function server(overrides: Record<string, unknown>): Promise<TestServer & { email: string }> {
  const s = await startTestServer(overrides);
  cleanups.push(() => s.stop());
  const seeded = await seedAccount(s);
  await s.services.accounts.setPassword(seeded.account.seq, 'password-123');
  return Object.assign(s, { email: seeded.account.email });
}

async function haproxyInFront(s: TestServer, serverOptions = '', frontendLines: string[] = []): Promise<RunningHaproxy> {
  const proxy = await startHaproxy([
    {
      name: 'web',
      mode: 'http',
      frontendLines: ['option forwardfor', ...frontendLines],
      backendLines: ['option httpchk GET /healthz'],
      server: `127.0.0.1:${new URL(s.httpUrl).port} check inter 200 ${serverOptions}`,
    },
  ]);
  cleanups.push(() => proxy.stop());
  return proxy;
}

/** A failed sign-in (unknown email) sent from `localAddress`; resolves with the status. */
function failedSignIn(port: number, localAddress: string, headers: Record<string, string> = {}): Promise<number> {
  const body = JSON.stringify({ email: `spray-${Math.random().toString(36).slice(2)}@example.com`, password: 'wrong' });
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        localAddress,
        method: 'POST',
        path: '/ui/api/sign-in',
        headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session', ...headers },
        agent: false,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Statuses of `n` failed sign-ins in a row; each may send its own X-Forwarded-For. */
async function spray(port: number, localAddress: string, n: number, spoof = false): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i++) {
    const headers: Record<string, string> = spoof ? { 'x-forwarded-for': `198.51.100.${i + 1}` } : {};
    statuses.push(await failedSignIn(port, localAddress, headers));
  }
  return statuses;
}

const lockedOut = (statuses: number[]) => statuses.at(-1) === 429 && statuses.slice(0, MAX_FAILURES_PER_ADDRESS).every((s) => s === 401);

describe('--trust-proxy behind haproxy', () => {
  it('throttles the client haproxy names, not haproxy, and ignores what the client prepends', async () => {
    const s = await server({ 'trust-proxy': true });
    const proxy = await haproxyInFront(s);
    // Each attempt claims another address; haproxy appends the real one, which is what counts.
    const first = await spray(proxy.ports.web!, '127.0.0.2', MAX_FAILURES_PER_ADDRESS + 1, true);
    expect(first, proxy.output()).toSatisfy(lockedOut);
    // Another client through the same haproxy is a different address: not locked out.
    expect(await failedSignIn(proxy.ports.web!, '127.0.0.3')).toBe(401);
    // And the proxy passes ordinary traffic: the health endpoint answers through it.
    const health = await fetch(`http://127.0.0.1:${proxy.ports.web}/healthz`);
    expect(health.status).toBe(200);
  });

  it('without --trust-proxy, X-Forwarded-For is ignored: every client behind haproxy is haproxy', async () => {
    const s = await server({});
    // A client talking to the server directly cannot dodge the throttle by naming other addresses.
    const direct = await spray(Number(new URL(s.httpUrl).port), '127.0.0.2', MAX_FAILURES_PER_ADDRESS + 1, true);
    expect(direct).toSatisfy(lockedOut);
    const proxy = await haproxyInFront(s);
    expect(await spray(proxy.ports.web!, '127.0.0.4', MAX_FAILURES_PER_ADDRESS + 1)).toSatisfy(lockedOut);
    // haproxy connects from 127.0.0.1, so a second client behind it shares the lockout.
    expect(await failedSignIn(proxy.ports.web!, '127.0.0.3')).toBe(429);
  });

  it('with a list of proxy addresses, only those are believed', async () => {
    const s = await server({ 'trust-proxy': '127.0.0.9, 10.0.0.0/8' });
    // haproxy connects to the server from 127.0.0.9, the one trusted address.
    const proxy = await haproxyInFront(s, 'source 127.0.0.9');
    expect(await spray(proxy.ports.web!, '127.0.0.2', MAX_FAILURES_PER_ADDRESS + 1, true)).toSatisfy(lockedOut);
    expect(await failedSignIn(proxy.ports.web!, '127.0.0.3')).toBe(401);
    // A loopback client that is not the listed proxy cannot claim to be someone else.
    const port = Number(new URL(s.httpUrl).port);
    expect(await spray(port, '127.0.0.5', MAX_FAILURES_PER_ADDRESS + 1, true)).toSatisfy(lockedOut);
  });
});

describe('X-Forwarded-Proto', () => {
  const signInCookie = async (url: string, email: string, headers: Record<string, string> = {}) => {
    const res = await fetch(`${url}/ui/api/sign-in`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session', ...headers },
      body: JSON.stringify({ email, password: 'password-123' }),
    });
    expect(res.status).toBe(200);
    return res.headers.get('set-cookie') ?? '';
  };

  it('from a trusted proxy marks the session cookie Secure; from anyone else it is ignored', async () => {
    const trusting = await server({ 'trust-proxy': true });
    const proxy = await haproxyInFront(trusting, '', ['http-request set-header X-Forwarded-Proto https']);
    expect(await signInCookie(`http://127.0.0.1:${proxy.ports.web}`, trusting.email)).toMatch(/; Secure/);
    const plain = await server({});
    expect(await signInCookie(plain.httpUrl, plain.email, { 'x-forwarded-proto': 'https' })).not.toMatch(/Secure/);
  });
});

describe('--trust-proxy values', () => {
  const config = (value: unknown) => buildServerConfig({ 'data-dir': '/tmp/x', 'trust-proxy': value }).trustProxy;

  it('takes a bare flag, on/off words, and lists of addresses and CIDR ranges', () => {
    expect(config(undefined)).toBe(false);
    expect(config(true)).toBe('private');
    expect(config('true')).toBe('private');
    expect(config('on')).toBe('private');
    expect(config('off')).toBe(false);
    expect(config(false)).toBe(false);
    expect(config('10.0.0.5, 192.168.0.0/16,fd00::/8')).toEqual(['10.0.0.5', '192.168.0.0/16', 'fd00::/8']);
    expect(config(['10.0.0.5', '::1'])).toEqual(['10.0.0.5', '::1']);
  });

  it('refuses what is neither', () => {
    for (const bad of ['haproxy.local', '10.0.0.0/33', 'fd00::/129', '10.0.0.1/8/2', ',', '3']) {
      expect(() => config(bad), bad).toThrow(/--trust-proxy/);
    }
  });
});

describe('which peers count as proxies', () => {
  it('bare flag: the direct peer at a loopback or private address, IPv4-mapped forms included, one hop only', () => {
    const trust = proxyTrust('private') as (address: string, hop: number) => boolean;
    for (const address of [
      '127.0.0.1',
      '::1',
      '10.1.2.3',
      '172.16.0.9',
      '172.31.255.1',
      '192.168.1.20',
      'fd12::1',
      '::ffff:192.168.1.20',
      '::FFFF:127.0.0.1',
    ]) {
      expect(trust(address, 0), address).toBe(true);
    }
    for (const address of ['203.0.113.7', '172.32.0.1', '2001:db8::1', '::ffff:203.0.113.7', 'not-an-address', '']) {
      expect(trust(address, 0), address).toBe(false);
    }
    // The address the proxy appended is the client, private or not.
    expect(trust('192.168.1.20', 1)).toBe(false);
  });

  it('a list: exactly those addresses and ranges, at any hop', () => {
    const trust = proxyTrust(['10.0.0.5', '192.168.0.0/16', 'fd00::/8']) as (address: string, hop: number) => boolean;
    expect([trust('10.0.0.5', 0), trust('::ffff:10.0.0.5', 0), trust('192.168.7.7', 2), trust('fd00::7', 1)]).toEqual([
      true,
      true,
      true,
      true,
    ]);
    expect([trust('10.0.0.6', 0), trust('127.0.0.1', 0), trust('fe80::1', 0), trust('garbage', 1)]).toEqual([false, false, false, false]);
    expect(proxyTrust(false)).toBe(false);
  });
});
