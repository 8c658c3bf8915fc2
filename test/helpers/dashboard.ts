import { expect } from 'vitest';

/** What a dashboard API call answered: its status and parsed JSON body. */
export interface DashboardAnswer {
  status: number;
  body: Record<string, any>;
}

/**
 * Signs in to the dashboard API of the server at `baseUrl` as the browser app does (the
 * pre-session CSRF header, then the session's cookie and CSRF token), without a browser.
 * `call` makes a request in that session.
 */
export async function dashboardSession(baseUrl: string, email: string, password: string) {
  const res = await fetch(`${baseUrl}/ui/api/sign-in`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-csrf-token': 'pre-session' },
    body: JSON.stringify({ email, password }),
  });
  expect(res.status).toBe(200);
  const cookie = (res.headers.get('set-cookie') ?? '').split(';')[0]!;
  const { csrf_token: csrf } = (await res.json()) as { csrf_token: string };
  const call = async (method: string, path: string, body?: unknown): Promise<DashboardAnswer> => {
    const r = await fetch(`${baseUrl}/ui/api${path}`, {
      method,
      headers: { cookie, 'x-csrf-token': csrf, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as DashboardAnswer['body'] };
  };
  return { cookie, csrf, call };
}
