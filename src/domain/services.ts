import type { Repositories } from '../storage/index.js';
import { ReadingWriter } from '../storage/readingWriter.js';
import { systemClock, type Clock } from '../time.js';
import { accountService } from './accounts.js';
import { alertService } from './alerts.js';
import { deviceService } from './devices.js';
import { DomainEvents } from './events.js';
import { ingestPipeline } from './ingest/pipeline.js';
import { keyService } from './keys.js';
import { RateLimiter } from './rateLimit.js';
import { sessionService } from './sessions.js';
import { telemetryService } from './telemetry.js';
import { usageService } from './usage.js';
import { snapshotService } from './snapshots.js';
import { snapshotFiles } from '../storage/snapshotFiles.js';
import path from 'node:path';

/**
 * The domain layer, assembled once per process over one set of repositories. Transports
 * (HTTP routes, MQTT hooks, CLI commands) call these services and nothing below them.
 */
export function createServices(
  repos: Repositories,
  options: { clock?: Clock; onListenerError?: (err: unknown, event: string) => void; dataDir?: string } = {},
) {
  const clock = options.clock ?? systemClock;
  const events = new DomainEvents(options.onListenerError);
  const devices = deviceService(repos, events, clock);
  const writer = new ReadingWriter(repos.readings);
  const accounts = accountService(repos, events, clock);
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
    usage: usageService(repos, clock),
    alerts: alertService(repos, clock),
    rateLimiter: new RateLimiter(clock),
    ingest: ingestPipeline({ devices, sink: writer, events, clock }),
    snapshots,
  };
}

export type Services = ReturnType<typeof createServices>;
