import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildServerConfig, type ServerConfig } from '../../src/config.js';
import { type RunningServer, type StartOptions, startServer } from '../../src/server.js';
import { databaseUrlFor } from './backend.js';

export function tempDir(prefix = 'telemetryd-test-'): string {
  return mkdtempSync(path.join(tmpdir(), prefix));
}

export interface TestServer extends RunningServer {
  dataDir: string;
  /** fetch against the server: path relative to its base URL. */
  request(pathname: string, init?: RequestInit & { key?: string }): Promise<Response>;
  stop(): Promise<void>;
}

/**
 * Starts the real server on ephemeral ports against a fresh temp data dir. MQTT is off
 * unless the test asks for it (mqtt-port: '0'). On a PostgreSQL test run (backend.ts) the
 * data dir stands for a database of its own: a server restarted on the same data dir finds
 * the same database.
 */
export async function startTestServer(overrides: Record<string, unknown> = {}, options: StartOptions = {}): Promise<TestServer> {
  const dataDir = (overrides['data-dir'] as string | undefined) ?? tempDir();
  // A test that names its database (test/postgres/) keeps it.
  const databaseUrl = 'database-url' in overrides ? null : databaseUrlFor(dataDir);
  const config: ServerConfig = buildServerConfig({
    'data-dir': dataDir,
    ...(databaseUrl ? { 'database-url': databaseUrl } : {}),
    host: '127.0.0.1',
    'http-port': '0',
    'mqtt-port': 'off',
    'log-level': 'silent',
    ...overrides,
  });
  const server = await startServer(config, options);
  return {
    ...server,
    dataDir,
    request(pathname, init = {}) {
      const headers = new Headers(init.headers);
      if (init.key) headers.set('authorization', `Bearer ${init.key}`);
      return fetch(server.httpUrl + pathname, { ...init, headers });
    },
    async stop() {
      await server.close();
      if (!overrides['data-dir']) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Creates an account, an API key and a device directly through the domain services. */
export async function seedAccount(
  server: RunningServer,
  opts: { email?: string; plan?: string; device?: Parameters<RunningServer['services']['devices']['create']>[1] } = {},
) {
  const { services } = server;
  const account = await services.accounts.create({
    email: opts.email ?? `owner-${Math.random().toString(36).slice(2)}@example.com`,
    plan: opts.plan ?? 'starter',
  });
  const { key } = await services.keys.create(account, 'test key');
  const { device, accessToken } = await services.devices.create(account, opts.device ?? { name: 'sensor 1' });
  return { account, key, device, token: accessToken };
}

export async function ingest(server: { request: TestServer['request'] }, body: unknown, headers: Record<string, string> = {}) {
  const res = await server.request('/api/devices/ingest', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown>, headers: res.headers };
}
