import { hash, randomBytes } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Uniform random base62 string (rejection sampling, so no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248) out += BASE62[byte % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

export type IdPrefix = 'acc' | 'dev' | 'key' | 'alert' | 'evt';

/** Opaque identifiers with a type prefix (docs/api.md, "Identifiers and timestamps"). */
export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomBase62(16)}`;
}

/** Secrets (API keys, device tokens) are stored only as this hash (docs/api.md, "Authentication"). */
export function hashSecret(secret: string): string {
  // One-shot crypto.hash: a third of createHash().update().digest()'s cost, once per ingest.
  return hash('sha256', secret, 'hex');
}

/**
 * Whether two strings are equal, in a time that depends only on their lengths (not on where
 * they first differ): for secrets and their digests, whose lengths are public. Compared as
 * strings: decoding both to Buffers for timingSafeEqual costs on every HTTP ingest.
 */
export function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

export const API_KEY_PREFIX = 'tlm_';

/** `tlm_` + 40 base62 characters; key_prefix is `tlm_` plus the next 8 (docs/api.md, "Authentication"). */
export function newApiKey(): { key: string; keyPrefix: string } {
  const key = API_KEY_PREFIX + randomBase62(40);
  return { key, keyPrefix: key.slice(0, API_KEY_PREFIX.length + 8) };
}

/** Device access token: 40 random base62 characters (at least 32 required). */
export function newDeviceToken(): string {
  return randomBase62(40);
}
