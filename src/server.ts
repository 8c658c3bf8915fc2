import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { ServerConfig } from './config.js';
import { RetentionJob, type RetentionOptions } from './domain/retention.js';
import { createServices, type Services } from './domain/services.js';
import { buildApp, type HttpTimeouts } from './http/app.js';
import { randomBase62 } from './ids.js';
import { type RunningMqtt, startMqtt } from './mqtt/broker.js';
import { ChangeWatcher } from './storage/changeWatcher.js';
import { type Db, openDatabase } from './storage/db.js';
import { createRepositories } from './storage/index.js';
import type { Clock } from './time.js';
import { VERSION } from './version.js';

/** How long close() waits for in-flight HTTP requests before cutting their connections. */
const HTTP_DRAIN_MS = 5_000;

export interface RunningServer {
  config: ServerConfig;
  db: Db;
  services: Services;
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
  /** Telemetry retention (decisions.md §4), periodic; tests drive it with runOnce(). */
  retention: RetentionJob;
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
}

/**
 * Opens the database, migrates, builds the app and listens. The order matters: migrations
 * run before any listener accepts a connection; shutdown runs the other way round.
 */
export async function startServer(config: ServerConfig, options: StartOptions = {}): Promise<RunningServer> {
  const print = options.print ?? (() => {});
  const db = openDatabase(config.dataDir, { durability: config.durability });
  const logger = {
    level: config.logLevel,
    // Secrets never reach a log line: bearer keys, device tokens, cookies.
    redact: ['req.headers.authorization', 'req.headers.cookie', 'access_token', 'password', 'token'],
  };
  let app: FastifyInstance | null = null;
  const services = createServices(createRepositories(db), {
    clock: options.clock,
    dataDir: config.dataDir,
    onListenerError: (err, event) => app?.log.error({ err, event }, 'event listener failed'),
    notify: { smtpUrl: config.smtpUrl, smtpFrom: config.smtpFrom, webhookRetryDelaysMs: options.webhookRetryDelaysMs },
    logAlert: (message, details) => app?.log.warn(details, message),
    onInboxMergeError: (err) => app?.log.error({ err }, 'merging the readings inbox failed; retried later'),
    onRollupError: (err) => app?.log.error({ err }, 'rolling up readings failed; retried at the next pass'),
  });

  // The first-run setup URL: valid while no account exists (decisions.md §1).
  const setupToken = services.accounts.count() === 0 ? randomBase62(32) : null;

  app = await buildApp({ services, config, logger, version: VERSION, setupToken, httpTimeouts: options.httpTimeouts });
  const watcher = new ChangeWatcher(
    db,
    () => services.events.emit('external.change', {}),
    250,
    (err) => app?.log.error({ err }, 'database change check failed'),
  );
  watcher.start();
  // Telemetry retention (decisions.md §4): batched, shortly after start, then hourly.
  const retention = new RetentionJob(services.repos, services.clock, {
    onError: (err) => app?.log.error({ err }, 'retention job failed'),
    ...options.retention,
  });
  retention.start();
  // Rollups of numeric paths for aggregates: shortly after start, then every minute.
  services.rollups.start();
  // Snapshot retention (decisions.md §4): shortly after start, then hourly.
  const stopSnapshotRetention = services.snapshots.scheduleRetention({
    onError: (err) => app?.log.error({ err }, 'snapshot retention failed'),
  });

  await app.listen({ host: config.host, port: config.httpPort });
  const address = app.server.address() as AddressInfo;
  const shownHost = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host;
  const httpUrl = `http://${shownHost}:${address.port}`;
  // With an ephemeral port (0) the default public URL can only be known once bound.
  if (config.httpPort === 0 && config.publicUrl.endsWith(':0')) config.publicUrl = config.publicUrl.replace(/:0$/, `:${address.port}`);
  print(
    `telemetryd ${VERSION}: HTTP listening on ${config.host}:${address.port} (dashboard ${config.publicUrl}/, Public API ${config.publicUrl}/v1)`,
  );
  let mqtt: RunningMqtt | null = null;
  try {
    mqtt = await startMqtt(config, services, app.log, print);
  } catch (err) {
    await app.close();
    watcher.stop();
    // The background jobs must not wake up later on a closed database.
    stopSnapshotRetention();
    await retention.stop();
    await services.rollups.stop();
    db.close();
    throw err;
  }
  if (mqtt) app.metrics.sources.mqttConnections = () => mqtt!.sessions.size;
  const setupUrl = setupToken ? `${config.publicUrl}/setup?token=${setupToken}` : null;
  if (setupUrl)
    print(
      `First run: open ${setupUrl} to create the first account (or: echo 'a password' | telemetryd accounts create --email you@example.com --password-stdin)`,
    );

  let closed = false;
  return {
    config,
    db,
    services,
    app,
    httpUrl,
    httpPort: address.port,
    mqttPort: mqtt?.tlsPort ?? null,
    mqttPlainPort: mqtt?.plainPort ?? null,
    mqttFingerprint: mqtt?.tls?.fingerprint ?? null,
    setupUrl,
    retention,
    async close() {
      if (closed) return;
      closed = true;
      watcher.stop();
      stopSnapshotRetention();
      await retention.stop();
      await services.rollups.stop();
      // MQTT first: no new readings arrive while the HTTP side drains; what is queued commits below.
      await mqtt?.close();
      // Stop accepting, let in-flight requests finish (their writes commit), then close the db.
      // A client that stalls mid-request (a body never finished) would hold the drain until
      // its request timeout, past the 10 s bound of decisions.md §2: after HTTP_DRAIN_MS its
      // connection is cut. Nothing of it was acknowledged; committed writes resolve in
      // milliseconds, so no acknowledged reading is cut off.
      const forceClose = setTimeout(() => app!.server.closeAllConnections(), HTTP_DRAIN_MS);
      forceClose.unref();
      await app!.close();
      clearTimeout(forceClose);
      services.writer.close();
      // Stops webhook retries; outcomes of deliveries still running are recorded as failed.
      await services.alertEvaluation.close();
      db.close();
    },
  };
}
