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
