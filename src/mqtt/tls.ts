import { X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import path from 'node:path';
import type { ServerConfig } from '../config.js';

export interface TlsMaterial {
  cert: string;
  key: string;
  /** File the certificate was read from (devices trust or pin it). */
  certPath: string;
  /** SHA-256 fingerprint, colon-separated hex, as `openssl x509 -fingerprint -sha256` prints it. */
  fingerprint: string;
  /** Where it came from: operator files, generated on this start, or generated earlier. */
  source: 'configured' | 'generated' | 'reused';
}

/** Lifetime of the generated certificate; replace it by deleting <data-dir>/tls/ (docs/mqtt.md). */
const SELF_SIGNED_YEARS = 10;

/**
 * The MQTT listener's certificate (docs/mqtt.md, "TLS and fingerprint pinning"): `--tls-cert/--tls-key` when given,
 * otherwise a self-signed one generated into `<data-dir>/tls/` on first start and reused
 * afterwards, so the fingerprint devices pin stays the same across restarts.
 */
export async function loadTlsMaterial(config: ServerConfig): Promise<TlsMaterial> {
  if (config.tlsCert && config.tlsKey) {
    const cert = readFileSync(config.tlsCert, 'utf8');
    const key = readFileSync(config.tlsKey, 'utf8');
    return { cert, key, certPath: path.resolve(config.tlsCert), fingerprint: fingerprintOf(cert), source: 'configured' };
  }
  const dir = path.join(config.dataDir, 'tls');
  const certPath = path.join(dir, 'cert.pem');
  const keyPath = path.join(dir, 'key.pem');
  if (existsSync(certPath) && existsSync(keyPath)) {
    const cert = readFileSync(certPath, 'utf8');
    return { cert, key: readFileSync(keyPath, 'utf8'), certPath, fingerprint: fingerprintOf(cert), source: 'reused' };
  }
  const { cert, key } = await generateSelfSigned(config);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // Key first, each written to a temp name and renamed, so a crash never leaves a cert
  // without its key (which would make the next start generate a new pair).
  writeAtomically(keyPath, key, 0o600);
  writeAtomically(certPath, cert, 0o644);
  return { cert, key, certPath, fingerprint: fingerprintOf(cert), source: 'generated' };
}

function fingerprintOf(certPem: string): string {
  return new X509Certificate(certPem).fingerprint256;
}

function writeAtomically(file: string, contents: string, mode: number) {
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, contents, { mode });
  renameSync(tmp, file);
}

async function generateSelfSigned(config: ServerConfig): Promise<{ cert: string; key: string }> {
  // Names a device may use to reach this machine; hostname checks pass for these, and a
  // device that pins the fingerprint need not check the name at all.
  const dnsNames = new Set(['localhost', hostname()]);
  const ips = new Set(['127.0.0.1', '::1']);
  for (const candidate of [config.host, safeHostname(config.publicUrl)]) {
    if (!candidate || candidate === '0.0.0.0' || candidate === '::') continue;
    if (isIP(candidate)) ips.add(candidate);
    else dnsNames.add(candidate);
  }
  const notBeforeDate = new Date(Date.now() - 60_000);
  const notAfterDate = new Date(notBeforeDate);
  notAfterDate.setUTCFullYear(notAfterDate.getUTCFullYear() + SELF_SIGNED_YEARS);
  // Loaded only on a first start without a certificate: it pulls in a whole ASN.1/X.509 stack.
  const { generate } = await import('selfsigned');
  const pems = await generate([{ name: 'commonName', value: 'telemetryd' }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate,
    notAfterDate,
    extensions: [
      // Self-signed: the certificate is its own trust anchor (mosquitto_pub --cafile, mqtt.js ca).
      { name: 'basicConstraints', cA: true },
      { name: 'keyUsage', digitalSignature: true, keyCertSign: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [...[...dnsNames].map((value) => ({ type: 2 as const, value })), ...[...ips].map((ip) => ({ type: 7 as const, ip }))],
      },
    ],
  });
  return { cert: pems.cert, key: pems.private };
}

function safeHostname(url: string): string | null {
  try {
    return new URL(url).hostname.replace(/^\[|\]$/g, '');
  } catch {
    return null;
  }
}
