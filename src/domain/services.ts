import path from 'node:path';
import { createNotifier, type NotifySettings } from '../notify/index.js';
import type { Repositories } from '../storage/index.js';
import { ReadingWriter } from '../storage/readingWriter.js';
import { snapshotFiles } from '../storage/snapshotFiles.js';
import { type Clock, systemClock } from '../time.js';
import { accountService } from './accounts.js';
import { aggregateService } from './aggregates.js';
import { alertEvaluator } from './alerts/evaluator.js';
import { alertService } from './alerts.js';
import { deviceService } from './devices.js';
import { DomainEvents } from './events.js';
import { ingestPipeline } from './ingest/pipeline.js';
import { keyService } from './keys.js';
import { RateLimiter } from './rateLimit.js';
import { rollupService } from './rollups.js';
import { sessionService } from './sessions.js';
import { snapshotService } from './snapshots.js';
import { telemetryService } from './telemetry.js';
import { usageService } from './usage.js';

/**
 * The domain layer, assembled once per process over one set of repositories. Transports
 * (HTTP routes, MQTT hooks, CLI commands) call these services and nothing below them.
 */
export interface ServiceOptions {
  clock?: Clock;
  onListenerError?: (err: unknown, event: string) => void;
  dataDir?: string;
  /** Alert action settings (the server passes --smtp-url/--smtp-from); the CLI sends nothing. */
  notify?: NotifySettings;
  /** Where failed alert deliveries are reported. */
  logAlert?: (message: string, details: Record<string, unknown>) => void;
  /** Where a failed merge of the readings inbox is reported (the rows stay, retried later). */
  onInboxMergeError?: (err: unknown) => void;
  /** Where a failed pass of the rollup job is reported (the next pass redoes it). */
  onRollupError?: (err: unknown) => void;
}

export function createServices(repos: Repositories, options: ServiceOptions = {}) {
  const clock = options.clock ?? systemClock;
  const events = new DomainEvents(options.onListenerError);
  const devices = deviceService(repos, events, clock);
  const writer = new ReadingWriter(repos.readings, undefined, options.onInboxMergeError);
  const accounts = accountService(repos, events, clock);
  // Started by the server only (like retention); the CLI and bulk loads use rebuild().
  const rollups = rollupService(repos, clock, { onError: options.onRollupError, committedReadings: () => writer.committed });
  const alertEvaluation = alertEvaluator({
    repos,
    events,
    accounts,
    notifier: createNotifier(options.notify ?? { smtpUrl: null, smtpFrom: 'telemetryd@localhost' }),
    log: options.logAlert,
  });
  // Snapshot files live beside the database unless told otherwise (decisions.md §1 data dir).
  const snapshots = snapshotService(repos, devices, snapshotFiles(options.dataDir ?? path.dirname(repos.db.name)), clock);
  // Deleting a device deletes its snapshot files, in whichever process deletes it (server or
  // admin CLI); the rows go by ON DELETE CASCADE.
  events.on('device.changed', ({ deviceId, change }) => {
    if (change === 'deleted') snapshots.removeDeviceFiles(deviceId);
  });
  return {
    clock,
    events,
    repos,
    writer,
    accounts,
    sessions: sessionService(repos, accounts, clock),
    keys: keyService(repos, clock),
    devices,
    telemetry: telemetryService(repos, clock),
    rollups,
    aggregates: aggregateService(repos, clock, rollups),
    usage: usageService(repos, clock),
    alerts: alertService(repos, clock, events),
    alertEvaluation,
    rateLimiter: new RateLimiter(clock),
    ingest: ingestPipeline({ devices, sink: writer, events, clock, evaluateAlerts: alertEvaluation.evaluate }),
    snapshots,
  };
}

export type Services = ReturnType<typeof createServices>;
