import type { FastifyInstance } from 'fastify';
import type { AddressInfo } from 'node:net';
import { randomBase62 } from './ids.js';
import type { ServerConfig } from './config.js';
import { openDatabase, type Db } from './storage/db.js';
import { createRepositories } from './storage/index.js';
import { ChangeWatcher } from './storage/changeWatcher.js';
import { createServices, type Services } from './domain/services.js';
import { buildApp } from './http/app.js';
import { VERSION } from './version.js';
import { startMqtt, type RunningMqtt } from './mqtt/broker.js';
import type { Clock } from './time.js';

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
  close(): Promise<void>;
}

export interface StartOptions {
  clock?: Clock;
  /** Prints the start-up lines (listeners, setup URL); the CLI passes console.log. */
  print?: (line: string) => void;
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
  });

  // The first-run setup URL: valid while no account exists (decisions.md §1).
  const setupToken = services.accounts.count() === 0 ? randomBase62(32) : null;

  app = await buildApp({ services, config, logger, version: VERSION, setupToken });
  const watcher = new ChangeWatcher(db, () => services.events.emit('external.change', {}));
  watcher.start();
  // Snapshot retention (decisions.md §4): shortly after start, then hourly.
  const stopSnapshotRetention = services.snapshots.scheduleRetention({ onError: (err) => app?.log.error({ err }, 'snapshot retention failed') });

  await app.listen({ host: config.host, port: config.httpPort });
  const address = app.server.address() as AddressInfo;
  const shownHost = config.host === '0.0.0.0' || config.host === '::' ? 'localhost' : config.host;
  const httpUrl = `http://${shownHost}:${address.port}`;
  // With an ephemeral port (0) the default public URL can only be known once bound.
  if (config.httpPort === 0 && config.publicUrl.endsWith(':0')) config.publicUrl = config.publicUrl.replace(/:0$/, `:${address.port}`);
  print(`telemetryd ${VERSION}: HTTP listening on ${config.host}:${address.port} (dashboard ${config.publicUrl}/, Public API ${config.publicUrl}/v1)`);
  let mqtt: RunningMqtt | null = null;
  try {
    mqtt = await startMqtt(config, services, app.log, print);
  } catch (err) {
    await app.close();
    watcher.stop();
    db.close();
    throw err;
  }
  const setupUrl = setupToken ? `${config.publicUrl}/setup?token=${setupToken}` : null;
  if (setupUrl) print(`First run: open ${setupUrl} to create the first account (or: telemetryd accounts create --email you@example.com)`);

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
    async close() {
      if (closed) return;
      closed = true;
      watcher.stop();
      stopSnapshotRetention();
      // MQTT first: no new readings arrive while the HTTP side drains; what is queued commits below.
      await mqtt?.close();
      // Stop accepting, let in-flight requests finish (their writes commit), then close the db.
      await app!.close();
      services.writer.close();
      db.close();
    },
  };
}
