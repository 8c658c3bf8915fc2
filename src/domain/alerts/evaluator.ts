/**
 * Alert evaluation on every committed reading (HTTP and MQTT alike: both go through the one
 * ingest pipeline, which calls `evaluate` after the reading's commit), then the actions.
 *
 * - Fast path: the device's enabled alerts come from an in-memory map, filled by a prepared
 *   statement on `alerts_by_device` and dropped whenever an alert changes here
 *   ('alert.changed') or another process (the admin CLI) commits. The change watcher reports
 *   such commits only every 250 ms, so the evaluator also asks the repositories'
 *   `externalCommits.current()` (PRAGMA data_version, read at most once a millisecond): an alert
 *   created or disabled with the CLI applies to the next reading (docs/cli.md, "alerts"). A device
 *   without alerts costs one Map lookup per reading.
 * - Race-free cooldown: the cooldown check and the cached `last_triggered` update happen in
 *   one synchronous step, so readings of one device committed in the same batch are seen
 *   one after the other and at most one of them passes a cooldown.
 * - Recording: the triggers of one group-commit batch are written (events + last_triggered)
 *   in one short transaction, from a microtask queued by the first of them: after the
 *   readings' commit, before any of their HTTP answers is written. One transaction per
 *   trigger would cost a WAL commit each, which slows ingest badly when every reading
 *   triggers.
 * - Actions (email, webhook) run afterwards, asynchronously; their outcome is written back
 *   into the event's `deliveries` and never reaches the ingest caller.
 */
import { newId } from '../../ids.js';
import type { AlertNotifier } from '../../notify/index.js';
import type { Repositories } from '../../storage/index.js';
import { iso } from '../../time.js';
import type { AccountService } from '../accounts.js';
import type { DomainEvents } from '../events.js';
import { presentAlertEvent, presentReading } from '../presenters.js';
import type { Account, ActionDelivery, Alert, AlertAction, AlertEvent, Device, StoredReading } from '../types.js';
import { conditionValue, fieldPath, inCooldown } from './evaluate.js';

export interface AlertEvaluatorDeps {
  repos: Repositories;
  events: DomainEvents;
  accounts: AccountService;
  notifier: AlertNotifier;
  /** Where failed deliveries and unexpected errors are reported (the server's logger). */
  log?: (message: string, details: Record<string, unknown>) => void;
}

/** The body of a webhook POST (docs/alerts.md, "webhook"). */
function webhookBody(alert: Alert, event: AlertEvent, reading: StoredReading): string {
  return JSON.stringify({
    event: presentAlertEvent(event),
    alert: { id: alert.id, name: alert.name, device_id: alert.deviceId },
    reading: presentReading(reading),
  });
}

function alertEmail(alert: Alert, device: Device, event: AlertEvent) {
  return {
    subject: `[telemetryd] ${event.severity}: alert "${alert.name}" on ${device.name} (${alert.field} = ${event.conditionValue})`,
    text: [
      `Alert "${alert.name}" (${alert.id}) was triggered on device "${device.name}" (${device.id}).`,
      '',
      `Condition: ${alert.field} ${alert.operator} ${alert.value}`,
      `Value: ${event.conditionValue}`,
      `Severity: ${event.severity}`,
      `Triggered at: ${iso(event.triggeredAt)}`,
      `Event: ${event.id}`,
      '',
      alert.cooldown > 0
        ? `Further matches within ${alert.cooldown} s of this trigger record nothing.`
        : 'Every matching reading triggers this alert (cooldown 0).',
    ].join('\n'),
  };
}

export function alertEvaluator(deps: AlertEvaluatorDeps) {
  const { repos, events, accounts, notifier } = deps;
  const log = deps.log ?? (() => {});
  /** An enabled alert with its field path split once, when the cache is filled. */
  interface CachedAlert {
    alert: Alert;
    path: readonly string[];
  }
  const enabledByDevice = new Map<number, CachedAlert[]>();
  const inFlight = new Set<Promise<void>>();
  let closed = false;

  interface QueuedTrigger {
    alert: Alert;
    account: Account;
    device: Device;
    reading: StoredReading;
    event: Omit<AlertEvent, 'seq'>;
  }
  let queued: QueuedTrigger[] = [];

  // Queued triggers are written first: the reloaded cache must see their last_triggered.
  const dropCache = () => {
    flushTriggers();
    enabledByDevice.clear();
  };
  let seenExternal = repos.externalCommits.current();
  function dropCacheIfChangedElsewhere() {
    const external = repos.externalCommits.current();
    if (external !== seenExternal) {
      seenExternal = external;
      dropCache();
    }
  }
  events.on('alert.changed', dropCache);
  events.on('external.change', dropCache);
  events.on('device.changed', dropCache);

  function enabledAlerts(deviceSeq: number): CachedAlert[] {
    let list = enabledByDevice.get(deviceSeq);
    if (!list) {
      list = repos.alerts.enabledOfDevice(deviceSeq).map((alert) => ({ alert, path: fieldPath(alert.field) }));
      enabledByDevice.set(deviceSeq, list);
    }
    return list;
  }

  function initialDelivery(action: AlertAction, at: number): ActionDelivery {
    if (action === 'email' && !notifier.sendEmail) {
      return { action, status: 'not_configured', detail: 'no SMTP server configured (--smtp-url)', at };
    }
    return { action, status: 'pending', at };
  }

  function newEvent(alert: Alert, value: number, reading: StoredReading): Omit<AlertEvent, 'seq'> {
    return {
      id: newId('evt'),
      alertSeq: alert.seq,
      deviceId: alert.deviceId,
      conditionValue: value,
      severity: alert.severity,
      acknowledged: false,
      acknowledgedAt: null,
      // The reading's server-assigned time is when the condition was met.
      triggeredAt: reading.time,
      readingSeq: reading.seq,
      deliveries: alert.actions.map((a) => initialDelivery(a, reading.time)),
    };
  }

  /** Records every queued trigger (events + last_triggered) in one transaction, then acts. */
  function flushTriggers(): void {
    if (queued.length === 0) return;
    const batch = queued;
    queued = [];
    let seqs: (number | null)[];
    try {
      seqs = repos.transaction(() =>
        batch.map((t) => {
          // One failed insert (the alert was deleted after this reading was evaluated: the
          // foreign key refuses it) is rolled back alone and must not take the batch with it.
          try {
            const seq = repos.alerts.insertEvent(t.event);
            repos.alerts.setLastTriggered(t.alert.seq, t.event.triggeredAt);
            return seq;
          } catch (err) {
            log('could not record an alert trigger', { err, alert: t.alert.id });
            return null;
          }
        }),
      );
    } catch (err) {
      log('could not record alert triggers', { err, alerts: batch.map((t) => t.alert.id) });
      // The cached last_triggered values were not stored: reload them from the database.
      enabledByDevice.clear();
      return;
    }
    batch.forEach((t, i) => {
      const seq = seqs[i];
      if (seq == null) return;
      const event: AlertEvent = { seq, ...t.event };
      events.emit('alert.triggered', { alert: t.alert, event, reading: t.reading });
      runActions(t.alert, t.account, t.device, event, t.reading);
    });
  }

  /** Read-modify-write of one action's outcome; synchronous, so two actions cannot interleave. */
  function settle(event: AlertEvent, action: AlertAction, outcome: Omit<ActionDelivery, 'action' | 'at'>, at: number) {
    if (closed) return;
    try {
      const current = repos.alerts.findEventById(event.id);
      if (!current) return; // the alert (and its history) was deleted meanwhile
      const deliveries = current.deliveries.map((d) => (d.action === action ? { action, at, ...outcome } : d));
      repos.alerts.setDeliveries(current.seq, deliveries);
      events.emit('alert.delivery', { event: { ...current, deliveries }, action, status: outcome.status });
    } catch (err) {
      log('could not record an alert delivery', { err, event: event.id, action });
    }
  }

  function track(task: Promise<void>) {
    inFlight.add(task);
    void task.finally(() => inFlight.delete(task));
  }

  function runActions(alert: Alert, account: Account, device: Device, event: AlertEvent, reading: StoredReading) {
    for (const delivery of event.deliveries) {
      if (delivery.status !== 'pending') continue;
      if (delivery.action === 'email' && notifier.sendEmail) {
        const send = notifier.sendEmail;
        track(
          (async () => {
            try {
              await send({ to: account.email, ...alertEmail(alert, device, event) });
              settle(event, 'email', { status: 'sent' }, Date.now());
            } catch (err) {
              const reason = (err as Error).message || String(err);
              log('alert email not delivered', { alert: alert.id, event: event.id, reason });
              settle(event, 'email', { status: 'failed', detail: reason }, Date.now());
            }
          })(),
        );
      } else if (delivery.action === 'webhook') {
        track(
          (async () => {
            try {
              if (!alert.webhookUrl) throw new Error('the alert has no webhook URL');
              // Read at send time, so a rotated secret signs the next delivery.
              const { secret } = accounts.webhookSecret(account.id);
              const result = await notifier.postWebhook(alert.webhookUrl, webhookBody(alert, event, reading), secret);
              if (result.ok) {
                settle(event, 'webhook', { status: 'sent', attempts: result.attempts }, Date.now());
              } else {
                log('alert webhook not delivered', { alert: alert.id, event: event.id, reason: result.reason, attempts: result.attempts });
                settle(event, 'webhook', { status: 'failed', detail: result.reason, attempts: result.attempts }, Date.now());
              }
            } catch (err) {
              settle(event, 'webhook', { status: 'failed', detail: (err as Error).message }, Date.now());
            }
          })(),
        );
      }
    }
  }

  return {
    /** The pipeline's AlertEvaluator: called once per committed reading. */
    evaluate(device: Device, account: Account, reading: StoredReading, data: Record<string, unknown>): void {
      if (closed) return;
      dropCacheIfChangedElsewhere();
      const alerts = enabledAlerts(device.seq);
      for (let i = 0; i < alerts.length; i++) {
        const { alert, path } = alerts[i]!;
        const value = conditionValue(data, path, alert);
        if (value === null || inCooldown(alert.lastTriggered, alert.cooldown, reading.time)) continue;
        // The cached copy is what the next reading of this device is checked against.
        alert.lastTriggered = reading.time;
        queued.push({ alert, account, device, reading, event: newEvent(alert, value, reading) });
        if (queued.length === 1) queueMicrotask(flushTriggers);
      }
    },

    /** Deliveries still running (tests and shutdown wait on them). */
    get pending(): number {
      return inFlight.size;
    },

    /** Stops retries, waits briefly for running deliveries, then stops recording outcomes. */
    async close(graceMs = 2_000): Promise<void> {
      flushTriggers();
      notifier.close();
      const grace = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
      await Promise.race([Promise.allSettled([...inFlight]), grace]);
      closed = true;
    },
  };
}
