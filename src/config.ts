import { createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import path from 'node:path';

/**
 * Configuration is resolved once, flag > env (TELEMETRYD_<FLAG>) > config file > default
 * (docs/operations.md, "Configuration"), into one typed object that is passed down. Nothing below the CLI reads
 * process.env. The option table here is the single declaration: the CLI builds its commander
 * options from it.
 */
export interface ServerConfig {
  dataDir: string;
  /** Snapshot files (`--snapshots-dir`, default `<data-dir>/snapshots`). */
  snapshotsDir: string;
  /** PostgreSQL instead of SQLite (`--database-url`); null: SQLite in the data dir. */
  databaseUrl: string | null;
  host: string;
  httpPort: number;
  /** TLS MQTT listener port; null when turned off with `--mqtt-port off`. */
  mqttPort: number | null;
  /** Plain-TCP MQTT listener; null (off) unless asked for. */
  mqttPlainPort: number | null;
  /** Address devices and browsers use: setup links, snippets, the OpenAPI server. */
  publicUrl: string;
  tlsCert: string | null;
  tlsKey: string | null;
  smtpUrl: string | null;
  smtpFrom: string;
  durability: 'normal' | 'full';
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** `pretty`: readable lines for a terminal; `json`: one JSON object per line. */
  logFormat: 'pretty' | 'json';
  /**
   * New readings and snapshots are refused while a watched file system has less free space
   * than this (bytes; 0: never). `--min-free-disk` is in MB of 1,048,576 bytes.
   */
  minFreeDiskBytes: number;
  /**
   * Which peers are proxies whose X-Forwarded-For names the HTTP client (docs/operations.md,
   * "Behind a proxy"). false: none, the header is ignored. 'private': the direct peer, when
   * at a loopback or private address, one hop. A list: peers at these addresses or CIDR
   * ranges, every such hop.
   */
  trustProxy: false | 'private' | string[];
  /** MQTT connections start with a PROXY protocol header (v1 or v2) naming the client. */
  mqttProxyProtocol: boolean;
}

export interface OptionSpec {
  /** Long option name, also the config-file key: `http-port` → TELEMETRYD_HTTP_PORT. */
  name: string;
  flags: string;
  description: string;
  default?: string;
}

const DATA_DIR_OPTION: OptionSpec = {
  name: 'data-dir',
  flags: '--data-dir <dir>',
  description: 'data directory (SQLite database, snapshots, TLS material)',
  default: './telemetryd-data',
};

const SNAPSHOTS_DIR_OPTION: OptionSpec = {
  name: 'snapshots-dir',
  flags: '--snapshots-dir <dir>',
  description: 'folder of the snapshot image files (default: <data-dir>/snapshots)',
};

/** The password in it is never printed: messages show it through redactDatabaseUrl. */
const DATABASE_URL_OPTION: OptionSpec = {
  name: 'database-url',
  flags: '--database-url <url>',
  description: 'PostgreSQL instead of SQLite: postgres://USER[:PASSWORD]@HOST[:PORT]/DB',
};

/** Where a command keeps its data: the options every command takes besides --config and --json. */
export const STORAGE_OPTIONS: OptionSpec[] = [DATA_DIR_OPTION, SNAPSHOTS_DIR_OPTION, DATABASE_URL_OPTION];

export interface StorageConfig {
  dataDir: string;
  snapshotsDir: string;
  databaseUrl: string | null;
}

/** The storage options resolved (flag > env > file > default), as buildServerConfig does for serve. */
export function buildStorageConfig(values: Record<string, unknown>): StorageConfig {
  const dataDir = path.resolve(str(values['data-dir']) ?? DATA_DIR_OPTION.default!);
  const snapshotsDir = str(values['snapshots-dir']);
  return {
    dataDir,
    snapshotsDir: snapshotsDir === null ? path.join(dataDir, 'snapshots') : path.resolve(snapshotsDir),
    databaseUrl: str(values['database-url']),
  };
}

export const CONFIG_OPTION: OptionSpec = {
  name: 'config',
  flags: '--config <file>',
  description: 'JSON config file whose keys are long option names',
};

export const SERVE_OPTIONS: OptionSpec[] = [
  { name: 'host', flags: '--host <host>', description: 'address to bind', default: '0.0.0.0' },
  { name: 'http-port', flags: '--http-port <port>', description: 'HTTP port (Public API, Device API, dashboard)', default: '8080' },
  { name: 'mqtt-port', flags: '--mqtt-port <port|off>', description: 'MQTT over TLS port, or "off"', default: '8883' },
  {
    name: 'mqtt-plain-port',
    flags: '--mqtt-plain-port <port>',
    description: 'plain MQTT port for LAN devices without TLS (off by default)',
  },
  { name: 'public-url', flags: '--public-url <url>', description: 'address devices and browsers use (default http://<host>:<http-port>)' },
  {
    name: 'tls-cert',
    flags: '--tls-cert <file>',
    description: 'TLS certificate (PEM); default: self-signed, generated into <data-dir>/tls/',
  },
  { name: 'tls-key', flags: '--tls-key <file>', description: 'TLS private key (PEM)' },
  { name: 'smtp-url', flags: '--smtp-url <url>', description: 'SMTP server for alert email: smtp://[user:pass@]host:port or smtps://…' },
  { name: 'smtp-from', flags: '--smtp-from <addr>', description: 'sender address of alert email', default: 'telemetryd@localhost' },
  {
    name: 'durability',
    flags: '--durability <normal|full>',
    description: 'normal: survives a process crash; full: also power loss (slower)',
    default: 'normal',
  },
  { name: 'log-level', flags: '--log-level <level>', description: 'fatal, error, warn, info, debug, trace or silent', default: 'info' },
  {
    name: 'log-format',
    flags: '--log-format <pretty|json>',
    description: 'log lines: readable (pretty) or JSON; default pretty on a terminal, JSON otherwise',
  },
  {
    name: 'min-free-disk',
    flags: '--min-free-disk <MB>',
    description: 'refuse new readings and snapshots (503) while the data dir has less free disk space than this; 0: off',
    default: '64',
  },
  {
    name: 'trust-proxy',
    flags: '--trust-proxy [addresses]',
    description:
      'take the HTTP client address from X-Forwarded-For set by a proxy: alone (or "true"), a proxy at a loopback or private address; or a comma-separated list of proxy addresses/CIDRs',
  },
  {
    name: 'mqtt-proxy-protocol',
    flags: '--mqtt-proxy-protocol [on|off]',
    description: 'MQTT connections come through a proxy that sends the PROXY protocol (v1 or v2); connections without it are closed',
  },
];

/**
 * A configuration that cannot be used: one line naming the flag, variable or file key, and
 * the long name of the option whose value was refused, where one was (so the CLI can say
 * where that value came from).
 */
export class ConfigError extends Error {
  constructor(
    message: string,
    readonly option?: string,
  ) {
    super(message);
  }
}

/** A refused value of one option: `--name <why>`. */
const badValue = (name: string, why: string) => new ConfigError(`--${name} ${why}`, name);

/** Options whose flag takes a comma-separated list: a config file may give a JSON list. */
const LIST_OPTIONS = new Set(['trust-proxy']);

/** Reads a JSON config file; its keys are long option names (docs/operations.md, "Configuration"). */
export function loadConfigFile(file: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new ConfigError(`cannot read config file ${file}: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError(`config file ${file} must hold a JSON object`);
  }
  // Any command's file may hold serve's options too (one file for the server and its admin
  // commands); a key that is no option at all is a typo, which would silently leave its
  // option at the default.
  const names = [...STORAGE_OPTIONS, ...SERVE_OPTIONS].map((o) => o.name);
  for (const key of Object.keys(parsed)) {
    if (names.includes(key)) continue;
    const near = closestName(key, names);
    throw new ConfigError(`config file ${file}: unknown option "${key}"${near ? ` (did you mean "${near}"?)` : ''}`);
  }
  // A value takes the command line's forms: text, a number or true/false, and a list of text
  // where the flag takes a comma-separated list. `null` (a template or jq's output for a
  // missing value) is refused like an empty value, never read as "unset", which would turn
  // `mqtt-port` off or put `data-dir` in the working directory; any other list or an object
  // would be read as its text.
  for (const [key, value] of Object.entries(parsed)) {
    if (value === null) throw new ConfigError(`config file ${file}: "${key}" is null; leave it out for the default`);
    if (Array.isArray(value) && LIST_OPTIONS.has(key)) {
      if (value.every((v) => typeof v === 'string')) continue;
      throw new ConfigError(`config file ${file}: "${key}" must list strings`);
    }
    if (typeof value === 'object') {
      throw new ConfigError(
        `config file ${file}: "${key}" must be a string, a number or true/false, not ${Array.isArray(value) ? 'a list' : 'an object'}`,
      );
    }
  }
  return parsed as Record<string, unknown>;
}

/** The name within two edits (insert, delete, change, swap of neighbours) of `word`, if any. */
function closestName(word: string, names: string[]): string | null {
  let best: string | null = null;
  let bestDistance = 3;
  for (const name of names) {
    const d = editDistance(word, name);
    if (d < bestDistance) [best, bestDistance] = [name, d];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i]![j] = Math.min(d[i]![j]!, d[i - 2]![j - 2]! + 1);
    }
  }
  return d[a.length]![b.length]!;
}

function port(name: string, value: unknown, allowOff: boolean): number | null {
  if (value === undefined || value === null || value === '') return null;
  const text = String(value).trim();
  if (allowOff && text === 'off') return null;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0 || n > 65535) {
    throw badValue(name, `must be a port number 0-65535${allowOff ? ' or "off"' : ''}, got "${text}"`);
  }
  return n;
}

/** What setup links, snippets and the OpenAPI document are built from: an absolute http(s) URL. */
function isWebAddress(url: string): boolean {
  try {
    const parsed = new URL(url);
    return (parsed.protocol === 'http:' || parsed.protocol === 'https:') && parsed.hostname !== '';
  } catch {
    return false;
  }
}

/**
 * A configured certificate and key are checked when the configuration is resolved, so a
 * wrong path or file stops `serve` with a message naming the flag before anything listens.
 */
function checkTlsPair(certFile: string, keyFile: string): void {
  const unreadable = (name: string, file: string, what: string, err: unknown) => {
    // A system error (the file) has a syscall; OpenSSL's (the contents) have codes of their own.
    const { code, syscall } = err as NodeJS.ErrnoException;
    if (!syscall) return badValue(name, `${file}: not a PEM ${what}`);
    const why = { ENOENT: 'no such file', EACCES: 'permission denied' }[code ?? ''] ?? `cannot read it (${code})`;
    return badValue(name, `${file}: ${why}`);
  };
  let cert: X509Certificate;
  let key: KeyObject;
  try {
    cert = new X509Certificate(readFileSync(certFile));
  } catch (err) {
    throw unreadable('tls-cert', certFile, 'certificate', err);
  }
  try {
    key = createPrivateKey(readFileSync(keyFile));
  } catch (err) {
    throw unreadable('tls-key', keyFile, 'private key', err);
  }
  if (!cert.checkPrivateKey(key)) throw badValue('tls-key', `${keyFile} is not the private key of --tls-cert ${certFile}`);
}

function str(value: unknown): string | null {
  if (value === undefined || value === null || value === '') return null;
  return String(value);
}

const MB = 1_048_576;

const ON_WORDS = ['true', 'on', 'yes', '1'];
const OFF_WORDS = ['false', 'off', 'no', '0'];

/**
 * A switch given as a bare flag (commander: true), from the environment or a config file:
 * true/on/yes/1 and false/off/no/0. Unset: `fallback`.
 */
function onOff(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined || value === null || value === '') return fallback;
  if (typeof value === 'boolean') return value;
  const text = String(value).trim().toLowerCase();
  if (ON_WORDS.includes(text)) return true;
  if (OFF_WORDS.includes(text)) return false;
  throw badValue(name, `must be on or off, got "${String(value)}"`);
}

/**
 * --trust-proxy: bare flag/true/on → 'private'; false/off or unset → false; otherwise proxy
 * addresses or CIDR ranges, comma-separated (a config file may also give a JSON array).
 */
function trustProxyOf(value: unknown): ServerConfig['trustProxy'] {
  if (Array.isArray(value)) return proxyList(value.map(String));
  if (value === undefined || value === null || value === '' || typeof value === 'boolean') return value === true ? 'private' : false;
  const text = String(value).trim();
  const word = text.toLowerCase();
  if (ON_WORDS.includes(word)) return 'private';
  if (OFF_WORDS.includes(word)) return false;
  return proxyList(text.split(','));
}

function proxyList(entries: string[]): string[] {
  const list = entries.map((e) => e.trim()).filter((e) => e !== '');
  if (list.length === 0) throw badValue('trust-proxy', 'needs at least one address');
  for (const entry of list) {
    const [address = '', prefix, ...rest] = entry.split('/');
    const family = isIP(address);
    const maxPrefix = family === 4 ? 32 : 128;
    const prefixOk = prefix === undefined || (/^\d{1,3}$/.test(prefix) && Number(prefix) <= maxPrefix);
    if (family === 0 || !prefixOk || rest.length > 0) {
      throw badValue('trust-proxy', `takes on/off or IP addresses and CIDR ranges (10.0.0.5, 10.0.0.0/8, fd00::/8), got "${entry}"`);
    }
  }
  return list;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * Turns resolved raw values (keyed by long option name) into the typed config. `stdoutIsTty`
 * decides the default log format: readable lines for a person, JSON for a log collector.
 */
export function buildServerConfig(values: Record<string, unknown>, env: { stdoutIsTty?: boolean } = {}): ServerConfig {
  const get = (name: string) => {
    const v = values[name];
    if (v !== undefined) return v;
    const spec = [...STORAGE_OPTIONS, ...SERVE_OPTIONS].find((o) => o.name === name);
    return spec?.default;
  };
  const host = str(get('host')) ?? '0.0.0.0';
  const httpPort = port('http-port', get('http-port'), false) ?? 8080;
  const durability = String(get('durability'));
  if (durability !== 'normal' && durability !== 'full') {
    throw badValue('durability', `must be "normal" or "full", got "${durability}"`);
  }
  const logLevel = String(get('log-level'));
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw badValue('log-level', `must be one of ${LOG_LEVELS.join(', ')}`);
  }
  const logFormat = str(get('log-format')) ?? (env.stdoutIsTty ? 'pretty' : 'json');
  if (logFormat !== 'pretty' && logFormat !== 'json') {
    throw badValue('log-format', `must be "pretty" or "json", got "${logFormat}"`);
  }
  const tlsCert = str(get('tls-cert'));
  const tlsKey = str(get('tls-key'));
  if ((tlsCert === null) !== (tlsKey === null)) {
    throw new ConfigError('--tls-cert and --tls-key go together');
  }
  if (tlsCert !== null && tlsKey !== null) checkTlsPair(tlsCert, tlsKey);
  const smtpUrl = str(get('smtp-url'));
  if (smtpUrl !== null && !/^smtps?:\/\//.test(smtpUrl)) {
    throw badValue('smtp-url', 'must start with smtp:// or smtps://');
  }
  const minFreeDisk = String(get('min-free-disk')).trim();
  const minFreeDiskMb = Number(minFreeDisk);
  if (minFreeDisk === '' || !Number.isFinite(minFreeDiskMb) || minFreeDiskMb < 0) {
    throw badValue('min-free-disk', `must be a number of MB, 0 or more, got "${minFreeDisk}"`);
  }
  const publicHost = host === '0.0.0.0' || host === '::' ? 'localhost' : host;
  const publicUrl = (str(get('public-url')) ?? `http://${publicHost}:${httpPort}`).replace(/\/+$/, '');
  if (!isWebAddress(publicUrl)) {
    throw badValue('public-url', `must be an http:// or https:// address, got "${publicUrl}"`);
  }
  return {
    ...buildStorageConfig(values),
    host,
    httpPort,
    mqttPort: port('mqtt-port', get('mqtt-port'), true),
    mqttPlainPort: port('mqtt-plain-port', get('mqtt-plain-port'), true),
    publicUrl,
    tlsCert,
    tlsKey,
    smtpUrl,
    smtpFrom: str(get('smtp-from')) ?? 'telemetryd@localhost',
    durability,
    logLevel: logLevel as ServerConfig['logLevel'],
    logFormat,
    minFreeDiskBytes: Math.round(minFreeDiskMb * MB),
    trustProxy: trustProxyOf(get('trust-proxy')),
    mqttProxyProtocol: onOff('mqtt-proxy-protocol', get('mqtt-proxy-protocol'), false),
  };
}

/** Environment variable of an option: `http-port` → `TELEMETRYD_HTTP_PORT`. */
export function envName(optionName: string): string {
  return `TELEMETRYD_${optionName.toUpperCase().replace(/-/g, '_')}`;
}
