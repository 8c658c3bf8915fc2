import type { TestServer } from '../helpers/server.js';

export interface UploadResult {
  status: number;
  body: Record<string, any>;
  headers: Headers;
}

/** POST /api/devices/{id}/snapshot over real HTTP. */
export async function upload(
  server: TestServer,
  deviceId: string,
  token: string | null,
  body: Uint8Array | null,
  contentType: string | null = 'image/jpeg',
): Promise<UploadResult> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (contentType !== null) headers['content-type'] = contentType;
  const res = await server.request(`/api/devices/${deviceId}/snapshot`, {
    method: 'POST',
    headers,
    body: (body ?? undefined) as BodyInit | undefined,
  });
  return { status: res.status, body: (await res.json()) as Record<string, any>, headers: res.headers };
}

/** GET a snapshot URL with an optional Bearer credential; returns status and raw bytes. */
export async function fetchSnapshot(server: TestServer, url: string, bearer?: string, headers: Record<string, string> = {}) {
  const res = await server.request(url, { headers: bearer ? { ...headers, authorization: `Bearer ${bearer}` } : headers });
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) };
}
