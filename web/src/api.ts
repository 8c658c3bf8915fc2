/** The dashboard's client of its own JSON API (/ui/api): session cookie + CSRF header. */
import { toast } from './dom';

export interface Session {
  account: { id: string; email: string; name: string; plan: string; status: string; limits: Record<string, number> };
  csrf_token: string;
  public_url: string;
  mqtt: { host: string; port: number; enabled: boolean; certificate_pem: string | null; self_signed: boolean | null };
  /** Whether the server sends alert email (--smtp-url). */
  email: { enabled: boolean };
}

/** GET /ui/api/storage: whether the server takes new readings, and why not. */
export interface StorageStatus {
  writable: boolean;
  reason: string | null;
  /** Free bytes on the data directory's file system (null before the first check). */
  free_bytes: number | null;
  snapshots_free_bytes: number | null;
  /** --min-free-disk in bytes; 0 when off. */
  min_free_bytes: number;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

let csrfToken = '';
export let session: Session | null = null;
let onUnauthorized: () => void = () => {};

export function setUnauthorizedHandler(fn: () => void): void {
  onUnauthorized = fn;
}

export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (method !== 'GET') {
    // Sent on every state-changing request (the server refuses it otherwise).
    headers['x-csrf-token'] = csrfToken || 'pre-session';
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(`/ui/api${path}`, {
    method,
    headers,
    body: method === 'GET' ? undefined : JSON.stringify(body ?? {}),
    credentials: 'same-origin',
  });
  const text = await res.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { error: text };
  }
  if (!res.ok) {
    if (res.status === 401 && !path.startsWith('/sign-in') && !path.startsWith('/setup')) onUnauthorized();
    throw new ApiError(res.status, data?.error ?? `request failed (${res.status})`);
  }
  return data as T;
}

/**
 * Tells the user an action failed, with the server's message. Not for a 401: the session
 * ended, and the handler of that (setUnauthorizedHandler) has already said so and shown the
 * sign-in page.
 */
export function toastFailure(err: unknown): void {
  if (err instanceof ApiError && err.status === 401) return;
  toast(err instanceof Error ? err.message : String(err), 'error');
}

/**
 * A request a page repeats (a range change, a live refresh, the poll) whose calls can be in
 * flight together, an earlier one answering last: the wrapped call resolves to null when a
 * later call was made meanwhile, so a page only ever shows the newest answer.
 */
export function newestOnly<A extends unknown[], T>(request: (...args: A) => Promise<T>): (...args: A) => Promise<T | null> {
  let calls = 0;
  return async (...args) => {
    const call = ++calls;
    const result = await request(...args);
    return call === calls ? result : null;
  };
}

/** Who is signed in; the server answers `{"account": null}` when no one is. */
export async function loadSession(): Promise<Session | null> {
  const answer = await api<Session | { account: null }>('GET', '/session');
  session = answer.account ? (answer as Session) : null;
  csrfToken = session?.csrf_token ?? '';
  return session;
}

export function clearSession(): void {
  session = null;
  csrfToken = '';
}
