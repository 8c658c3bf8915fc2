import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { hasDatabase, newerSchemaWarning, openStorage, type Services, type Storage } from './composition.js';
import type { ServerConfig } from './config.js';
import { SHARED_VALUES } from './domain/cluster.js';
import type { RetentionJob, RetentionOptions } from './domain/retention.js';
import { ThrottledLog } from './domain/throttledLog.js';
import { buildApp, type HttpTimeouts, type MqttCertificate } from './http/app.js';
import { randomBase62 } from './ids.js';
import { readableLogStream } from './logFormat.js';
import { type RunningMqtt, startMqtt } from './mqtt/broker.js';
import { DB_FILE } from './storage/db.js';
import { describeDatabase } from './storage/postgres/connect.js';
import { holdServeLock } from './storage/serveLock.js';
import { type Clock, MINUTE_MS } from './time.js';
import { VERSION } from './version.js';

/** How long close() waits for in-flight HTTP requests before cutting their connections. */
const HTTP_DRAIN_MS = 5_000;

export interface RunningServer {
  config: ServerConfig;
  services: Services;
  /** The storage below the services, for tests that seed or inspect it directly. */
  storage: Storage;
  app: FastifyInstance;
  /** http://host:port actually bound (port 0 resolves to the ephemeral port). */
  httpUrl: string;
  httpPort: number;
  /** Bound MQTT ports (port 0 resolved); null when that listener is off. */
  mqttPort: number | null;
  mqttPlainPort: number | null;
  /** SHA-256 fingerprint of the MQTT TLS certificate; null when TLS MQTT is off. */
  mqttFingerprint: string | null;
  /** One-time setup URL while the database has no account; null otherwise. */
  setupUrl: string | null;
  /** Retention of readings and snapshots (docs/operations.md, "Retention"), periodic; tests drive it with runOnce(). */
  retention: RetentionJob;
  /** Whether this process runs the background jobs now (always on SQLite; on PostgreSQL, the node holding the lead). */
  leadsJobs(): boolean;
  close(): Promise<void>;
}

export interface StartOptions {
  clock?: Clock;
  /** Prints the start-up lines (listeners, setup URL); the CLI passes console.log. */
  print?: (line: string) => void;
  retention?: RetentionOptions;
  httpTimeouts?: HttpTimeouts;
  /** Webhook retry schedule (ms between attempts); tests shorten the default minute. */
  webhookRetryDelaysMs?: readonly number[];
  /** How often silent devices are checked for no_data alerts (default: evaluator.ts). */
  silenceCheckMs?: number;
}

/**
 * Opens the database (SQLite in the data dir, or PostgreSQL with a database URL), migrates,
 * builds the app and listens. The order matters: migrations
 * run before any listener accepts a connection; shutdown runs the other way round.
 */
export async function startServer(config: ServerConfig, options: StartOptions = {}): Promise<RunningServer> {
  const print = options.print ?? (() => {});
  const logger = {
    level: config.logLevel,
    ...(config.logFormat === 'pretty' ? { stream: readableLogStream(process.stdout) } : {}),
    // Secrets never reach a log line: bearer keys, device tokens, cookies.
    redact: ['req.headers.authorization', 'req.headers.cookie', 'access_token', 'password', 'token'],
  };
  let app: FastifyInstance | null = null;
  const postgresErrors = new ThrottledLog(MINUTE_MS);
  // A SQLite data dir is served by one process at a time (storage/serveLock.ts); a cluster's
  // nodes share PostgreSQL instead, and lead its jobs one at a time.
  const serveLock = config.databaseUrl === null ? holdServeLock(config.dataDir) : null;
  const {
    services,
    storage,
    close: closeOpenedStorage,
  } = await openStorage(config, {
    clock: options.clock,
    onListenerError: (err, event) => app?.log.error({ err, event }, 'event listener failed'),
    notify: { smtpUrl: config.smtpUrl, smtpFrom: config.smtpFrom, webhookRetryDelaysMs: options.webhookRetryDelaysMs },
    logAlert: (message, details) => app?.log.warn(details, message),
    // Read when a message is built: with an ephemeral port it is only known once bound.
    publicUrl: () => config.publicUrl,
    onInboxMergeError: (err) => app?.log.error({ err }, 'merging the readings inbox failed; retried later'),
    retention: { onError: (err) => app?.log.error({ err }, 'retention job failed'), ...options.retention },
    minFreeDiskBytes: config.minFreeDiskBytes,
    storageLog: {
      warn: (details, message) => app?.log.warn(details, message),
      info: (details, message) => app?.log.info(details, message),
    },
    onRollupError: (err) => app?.log.error({ err }, 'rolling up readings failed; retried at the next pass'),
    // Once a minute per kind at most (with a count): a database that is down fails every second.
    onPostgresError: (err, what) =>
      app && postgresErrors.report((details, message) => app!.log.warn(details, message), what, `${what} failed`, { err }),
  }).catch((err: unknown) => {
    serveLock?.release();
    throw err;
  });
  const closeStorage = async () => {
    try {
      await closeOpenedStorage();
    } finally {
      serveLock?.release();
    }
  };
  const stopFlushingPostgresErrors = postgresErrors.flushEveryWindow();

  // The first-run setup URL: valid while no account exists (docs/operations.md, "First run"),
  // one per cluster on PostgreSQL, so every node prints and accepts the same link
  // (docs/cluster.md, "What every node sees").
  let setupToken: string | null;
  try {
    if ((await services.accounts.count()) === 0) {
      const create = async () => randomBase62(32);
      setupToken = (await services.cluster.sharedValue(SHARED_VALUES.setupToken, create)) ?? (await create());
    } else {
      setupToken = null;
      await services.cluster.forgetSharedValue(SHARED_VALUES.setupToken);
    }
  } catch (err) {
    stopFlushingPostgresErrors();
    await closeStorage();
    throw err;
  }

  const { retention } = services;
  // Retention, silence checks and rollups run on one node of a cluster at a time (docs/cluster.md).
  const backgroundJobs = services.backgroundJobs(options.silenceCheckMs, {
    leading: () => {
      if (storage.backend === 'postgres') app?.log.info('this node runs the background jobs (retention, silence checks, rollups)');
    },
    // Lost with the connection that held it (the database restarted or unreachable): whichever
    // node reaches the database first takes the lead, this one too when it is alone.
    lost: () => app?.log.warn('this node lost the lead of the background jobs; the first node to reach the database takes it again'),
    error: (err) => app?.log.error({ err }, 'following the lead of the background jobs failed; retrying'),
  });
  let stopWatching: (() => void) | null = null;
  /** Stops every background job (a failed start, close()); stopping one not started does nothing. */
  const stopJobs = async () => {
    stopWatching?.();
    stopWatching = null;
    services.storageStatus.stop();
    await backgroundJobs.stop();
    stopFlushingPostgresErrors();
  };
  /** Undoes a start that failed part way (port in use, MQTT listener refused), then rethrows. */
  const abortStart = async (err: unknown): Promise<never> => {
    await stopJobs();
    await app?.close();
    await services.alertEvaluation.close();
    await closeStorage();
    throw err;
  };

  let mqttCertificate: MqttCertificate | null = null;
  let address: AddressInfo;
  try {
    app = await buildApp({
      services,
      config,
      logger,
      version: VERSION,
      setupToken,
      httpTimeouts: options.httpTimeouts,
      mqttCertificate: () => mqttCertificate,
    });
    // Free space is known before the first request (a server started on a full disk refuses
    // writes from the start), and after the logger exists (that is logged).
    services.storageStatus.start();
    await app.listen({ host: config.host, port: config.httpPort });
    address = app.server.address() as AddressInfo;
  } catch (err) {
    return abortStart(err);
  }
  // The jobs start once the port is bound: a start refused before that leaves no job behind.
  stopWatching = services.watchExternalCommits(250, (err) => app?.log.error({ err }, 'database change check failed'));
  // Retention (hourly), the no_data silence checks (docs/alerts.md) on a timer, the rollups of
  // numeric paths for aggregates (shortly after start, then every minute): on SQLite at once,
  // on PostgreSQL once this node leads.
  backgroundJobs.start();

  const shownHost = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host;
  const httpUrl = `http://${shownHost}:${address.port}`;
  // With an ephemeral port (0) the default public URL can only be known once bound.
  if (config.httpPort === 0 && config.publicUrl.endsWith(':0')) config.publicUrl = config.publicUrl.replace(/:0$/, `:${address.port}`);
  // Held until every listener is bound: a start that fails on the MQTT port prints only why,
  // not a listening line for an HTTP port that closes again at once.
  const listening: string[] = [];
  const sayListening = (line: string) => listening.push(line);
  // Which database this process serves, so a node started without --database-url (on a
  // SQLite file of its own) is told apart from its cluster at a glance.
  sayListening(
    config.databaseUrl !== null
      ? `Storage: PostgreSQL ${describeDatabase(config.databaseUrl)}, snapshots in ${config.snapshotsDir}`
      : `Storage: SQLite ${path.join(config.dataDir, DB_FILE)}, snapshots in ${config.snapshotsDir}`,
  );
  const newerSchema = newerSchemaWarning(storage.schema);
  if (newerSchema) {
    sayListening(`warning: ${newerSchema}`);
    app.log.warn({ schema: storage.schema }, newerSchema);
  }
  if (config.databaseUrl !== null && hasDatabase(config.dataDir)) {
    // Left behind by a move to PostgreSQL: a start that forgets the URL would serve it, and
    // acknowledge readings the cluster never sees.
    const unused = path.join(config.dataDir, DB_FILE);
    sayListening(
      `warning: ${unused} is a SQLite database this server does not use; move it aside, or a start without --database-url serves it instead`,
    );
    app.log.warn({ file: unused }, 'a SQLite database this server does not use is in its data dir');
  }
  sayListening(
    `telemetryd ${VERSION}: HTTP listening on ${config.host}:${address.port} (dashboard ${config.publicUrl}/, Public API ${config.publicUrl}/v1)`,
  );
  if (config.trustProxy !== false) {
    const proxies =
      config.trustProxy === 'private' ? 'a proxy at a loopback or private address' : `proxies at ${config.trustProxy.join(', ')}`;
    sayListening(`HTTP client addresses come from X-Forwarded-For set by ${proxies} (--trust-proxy)`);
  }
  let mqtt: RunningMqtt | null = null;
  try {
    mqtt = await startMqtt(config, services, app.log, sayListening);
  } catch (err) {
    return abortStart(err);
  }
  for (const line of listening) print(line);
  if (mqtt) app.metrics.sources.mqttConnections = () => mqtt!.sessions.size;
  app.metrics.sources.leadsJobs = () => backgroundJobs.leading;
  if (mqtt?.tls && mqtt.tlsPort !== null)
    mqttCertificate = { port: mqtt.tlsPort, pem: mqtt.tls.cert, selfSigned: mqtt.tls.source !== 'configured' };
  const setupUrl = setupToken ? `${config.publicUrl}/setup?token=${setupToken}` : null;
  if (setupUrl) {
    // The command names this server's storage: pasted elsewhere without it, it would create
    // the account in a new database of its own working directory.
    const storageOption =
      config.databaseUrl !== null ? '--database-url "$TELEMETRYD_DATABASE_URL"' : `--data-dir ${shellQuoted(config.dataDir)}`;
    print(
      `First run: open ${setupUrl} to create the first account (or: echo 'a password' | telemetryd accounts create --email you@example.com --password-stdin ${storageOption})`,
    );
  }

  let closed = false;
  return {
    config,
    services,
    storage,
    app,
    httpUrl,
    httpPort: address.port,
    mqttPort: mqtt?.tlsPort ?? null,
    mqttPlainPort: mqtt?.plainPort ?? null,
    mqttFingerprint: mqtt?.tls?.fingerprint ?? null,
    setupUrl,
    retention,
    leadsJobs: () => backgroundJobs.leading,
    async close() {
      if (closed) return;
      closed = true;
      await stopJobs();
      // MQTT first: no new readings arrive while the HTTP side drains; what is queued commits below.
      await mqtt?.close();
      // Stop accepting, let in-flight requests finish (their writes commit), then close the db.
      // A client that stalls mid-request (a body never finished) would hold the drain until
      // its request timeout, past the 10 s bound (docs/operations.md, "Shutdown"): after HTTP_DRAIN_MS its
      // connection is cut. Nothing of it was acknowledged; committed writes resolve in
      // milliseconds, so no acknowledged reading is cut off.
      const forceClose = setTimeout(() => app!.server.closeAllConnections(), HTTP_DRAIN_MS);
      forceClose.unref();
      await app!.close();
      clearTimeout(forceClose);
      // The last readings commit (and their alerts are evaluated) before deliveries stop.
      await storage.writer.close();
      // Stops webhook retries; outcomes of deliveries still running are recorded as failed.
      await services.alertEvaluation.close();
      await closeStorage();
    },
  };
}

/** A path as a POSIX shell word: as it is when it needs no quoting, else in single quotes. */
function shellQuoted(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, "'\\''")}'`;
}
