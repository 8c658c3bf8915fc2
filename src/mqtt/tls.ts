import { X509Certificate } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
import path from 'node:path';
import type { ServerConfig } from '../config.js';
import { makeDirs } from '../fsDirs.js';

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
 * Where a cluster keeps its one generated certificate (services.cluster.sharedValue with
 * SHARED_VALUES.mqttTls): null on SQLite, where the data dir alone holds it.
 */
export type SharedTls = (create: () => Promise<string>) => Promise<string> | null;

/**
 * The MQTT listener's certificate (docs/mqtt.md, "TLS and fingerprint pinning"): `--tls-cert/--tls-key` when given,
 * otherwise a self-signed one generated into `<data-dir>/tls/` on first start and reused
 * afterwards, so the fingerprint devices pin stays the same across restarts. On PostgreSQL
 * the pair is generated once per cluster and kept in the database (`shared`), and each node
 * writes it into its own `<data-dir>/tls/`, so every node presents the same certificate
 * (docs/cluster.md, "What every node sees"); a node that had its own pair before the cluster
 * did offers it as the cluster's, so devices that pinned it keep working.
 */
export async function loadTlsMaterial(config: ServerConfig, shared: SharedTls = () => null): Promise<TlsMaterial> {
  if (config.tlsCert && config.tlsKey) {
    const cert = readFileSync(config.tlsCert, 'utf8');
    const key = readFileSync(config.tlsKey, 'utf8');
    return { cert, key, certPath: path.resolve(config.tlsCert), fingerprint: fingerprintOf(cert), source: 'configured' };
  }
  const dir = path.join(config.dataDir, 'tls');
  const certPath = path.join(dir, 'cert.pem');
  const keyPath = path.join(dir, 'key.pem');
  const local =
    existsSync(certPath) && existsSync(keyPath) ? { cert: readFileSync(certPath, 'utf8'), key: readFileSync(keyPath, 'utf8') } : null;
  let generated = false;
  const generate = async () => {
    generated = true;
    return generateSelfSigned(config);
  };
  const sharedValue = shared(async () => JSON.stringify(local ?? (await generate())));
  const pair = sharedValue ? (JSON.parse(await sharedValue) as { cert: string; key: string }) : (local ?? (await generate()));
  if (local && local.cert === pair.cert && local.key === pair.key) {
    return { ...local, certPath, fingerprint: fingerprintOf(local.cert), source: 'reused' };
  }
  makeDirs(dir, 0o700);
  // Key first, each written to a temp name and renamed, so a crash never leaves a cert
  // without its key (which would make the next start generate a new pair).
  writeAtomically(keyPath, pair.key, 0o600);
  writeAtomically(certPath, pair.cert, 0o644);
  return { ...pair, certPath, fingerprint: fingerprintOf(pair.cert), source: generated ? 'generated' : 'reused' };
}

/**
 * This machine's LAN addresses (lanAddresses) that a self-signed certificate generated on an
 * earlier start does not carry, while the server listens on every interface: the machine got
 * an address since (a new DHCP lease), and a device given it fails the name check.
 */
export function lanAddressesNotCovered(certPem: string, config: Pick<ServerConfig, 'host'>): string[] {
  if (!listensEverywhere(config.host)) return [];
  const cert = new X509Certificate(certPem);
  return lanAddresses().filter((ip) => cert.checkIP(ip) === undefined);
}

/**
 * The names of `--host` and `--public-url` that a self-signed certificate generated on an
 * earlier start does not carry (it was made for the names of that start): a device that
 * checks the certificate by such a name fails its TLS handshake.
 */
export function namesNotCovered(certPem: string, config: Pick<ServerConfig, 'host' | 'publicUrl'>): string[] {
  const cert = new X509Certificate(certPem);
  const missing: string[] = [];
  for (const candidate of new Set([config.host, safeHostname(config.publicUrl)])) {
    if (!candidate || candidate === '0.0.0.0' || candidate === '::') continue;
    const covered = isIP(candidate) ? cert.checkIP(candidate) !== undefined : cert.checkHost(candidate) !== undefined;
    if (!covered) missing.push(candidate);
  }
  return missing;
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
  // Listening on every interface, devices on the LAN reach the machine by its addresses there
  // (the ones the start log lists): without them in the certificate, a device given that
  // address fails the TLS handshake. Link-local IPv6 needs a zone, which no name check takes.
  if (listensEverywhere(config.host)) for (const ip of lanAddresses()) ips.add(ip);
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

const listensEverywhere = (host: string) => !host || host === '0.0.0.0' || host === '::';

/** This machine's addresses on its network interfaces, loopback and link-local left out. */
function lanAddresses(): string[] {
  const addresses: string[] = [];
  for (const entries of Object.values(networkInterfaces())) {
    for (const entry of entries ?? [])
      if (!entry.internal && !entry.address.toLowerCase().startsWith('fe80:')) addresses.push(entry.address);
  }
  return addresses;
}

function safeHostname(url: string): string | null {
  try {
    return new URL(url).hostname.replace(/^\[|\]$/g, '');
  } catch {
    return null;
  }
}
