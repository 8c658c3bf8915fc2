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

/**
 * The domain layer, assembled once per process over one set of repositories. Transports
 * (HTTP routes, MQTT hooks, CLI commands) call these services and nothing below them.
 */
export function createServices(repos: Repositories, options: { clock?: Clock; onListenerError?: (err: unknown, event: string) => void } = {}) {
  const clock = options.clock ?? systemClock;
  const events = new DomainEvents(options.onListenerError);
  const devices = deviceService(repos, events, clock);
  const writer = new ReadingWriter(repos.readings);
  const accounts = accountService(repos, events, clock);
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
  };
}

export type Services = ReturnType<typeof createServices>;
