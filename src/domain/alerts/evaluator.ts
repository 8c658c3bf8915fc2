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
 *   trigger would cost a WAL commit each (about twice as slow when every reading
 *   triggers).
 * - State (docs/alerts.md): a trigger moves an alert to `firing`; a threshold reading that
 *   no longer meets the condition (past `clear_value` when set) moves it back to `ok` and
 *   sets `resolved_at` on the firing's event, in the same batched transaction as triggers.
 * - no_data alerts: a reading only stamps the alert's entry in `lastMatch` (an in-memory map,
 *   touched only for devices that have such an alert, found in the cached list above) and
 *   resolves it if firing. A timer (`startSilenceChecks`) walks the enabled no_data alerts of
 *   active devices and fires those silent for their SECONDS. After a restart the latest
 *   matching reading is read back from the readings once per alert (a bounded number of rows
 *   per check, a long search going on at the next ones), so ingest never writes anything for
 *   this bookkeeping.
 * - Actions (email, webhook, slack, discord, ntfy) run afterwards, asynchronously; their
 *   outcome is written back into the event's `deliveries` (`resolution_deliveries` for a
 *   resolution notice) and never reaches the ingest caller.
 */
import { newId } from '../../ids.js';
import type { AlertNotifier } from '../../notify/index.js';
import {
  type AlertOutcome,
  type Awaitable,
  isPromise,
  type NoDataWatch,
  type RecordedOutcome,
  type Repositories,
} from '../../storage/repositories.js';
import { type Clock, END_OF_TIME, systemClock } from '../../time.js';
import type { AccountService } from '../accounts.js';
import type { DomainEvents } from '../events.js';
import type { Account, ActionDelivery, Alert, AlertAction, AlertEvent, AlertOperator, Device, StoredReading } from '../types.js';
import { clears, compare, fieldPath, inCooldown, numericValueAt, silenceStart } from './evaluate.js';
import { alertEmail, discordBody, type Notice, type NoticeType, ntfyRequest, slackBody, webhookBody } from './messages.js';

export interface AlertEvaluatorDeps {
  repos: Repositories;
  events: DomainEvents;
  accounts: AccountService;
  notifier: AlertNotifier;
  clock?: Clock;
  /** The server's `--public-url`, read when a message is built (it is known once bound). */
  publicUrl?: () => string;
  /** Where failed deliveries and unexpected errors are reported (the server's logger). */
  log?: (message: string, details: Record<string, unknown>) => void;
}

/** How often silences are checked unless the server says otherwise: well inside the 5 s bound. */
const DEFAULT_SILENCE_CHECK_MS = 1_000;
/**
 * Readings a silence check parses at most (about, see readings.newestMatchingTime) while it
 * looks for path alerts' latest matches after a start: a few milliseconds of the event loop
 * per check, however long the history. A longer search goes on at the next check.
 */
export const SEARCH_ROWS_PER_CHECK = 5_000;
/**
 * Deliveries another process claimed less than this long ago are not adopted, whatever its
 * lock says: the lock is taken just after a node connects, and a node's first deliveries may
 * come before.
 */
const ADOPT_GRACE_MS = 5_000;

export function alertEvaluator(deps: AlertEvaluatorDeps) {
  const { repos, events, accounts, notifier } = deps;
  const clock = deps.clock ?? systemClock;
  const publicUrl = deps.publicUrl ?? (() => 'http://localhost:8080');
  const log = deps.log ?? (() => {});
  /** An enabled alert with its field path split once (null: any reading), when the cache is filled. */
  interface CachedAlert {
    alert: Alert;
    path: readonly string[] | null;
  }
  const enabledByDevice = new Map<number, CachedAlert[]>();
  /**
   * Lists still being read (an asynchronous backend's cache miss), by device: readings of
   * the device evaluated meanwhile wait on the same read, in their order, so the cooldown
   * check still sees them one after the other.
   */
  const loading = new Map<number, Promise<CachedAlert[]>>();
  /**
   * Counts the drops of the whole cache: a list read before one (an asynchronous backend's
   * read, whose snapshot may predate the change that caused the drop) is used by the readings
   * waiting on it but not cached, or it would stand until the next change anywhere.
   */
  let cacheDrops = 0;
  /** no_data alerts: the time of the latest matching reading known, by alert id. */
  const lastMatch = new Map<string, number>();
  /**
   * Path no_data alerts whose latest match is still being looked for in the readings, by
   * alert id: the search window's start, and the start of the part already searched.
   */
  const searches = new Map<string, { window: number; before: number }>();
  /**
   * Where a check before firing stopped searching the database for a newer match (another
   * node's readings; PostgreSQL), per alert: the next check goes on below `before`.
   */
  const storedSearches = new Map<string, { after: number; before: number }>();
  /** The silence checker's list; null when it must be read again. */
  let watches: NoDataWatch[] | null = null;
  /**
   * Counts the times the list was forgotten: a list read before one (an asynchronous
   * backend's read, whose snapshot may predate the change) serves the check that read it but
   * is not kept, or it would stand until the next change anywhere.
   */
  let watchesForgotten = 0;
  const forgetWatches = () => {
    watches = null;
    watchesForgotten++;
  };
  let silenceTimer: NodeJS.Timeout | null = null;
  /**
   * Set by close() where other processes share the database: deliveries still running are
   * left pending (but those delivered during the shutdown), for the leading node to adopt
   * once this one's lock is gone.
   */
  let handingOver = false;
  /** Deliveries running, with what each would record: close() records those it abandons. */
  const inFlight = new Map<Promise<void>, { type: NoticeType; event: AlertEvent; action: AlertAction }>();
  let closed = false;

  type Queued =
    | { type: 'triggered'; alert: Alert; account: Account; device: Device; reading: StoredReading | null; event: Omit<AlertEvent, 'seq'> }
    | { type: 'resolved'; alert: Alert; account: Account; device: Device; reading: StoredReading; value: number | null; at: number };
  let queued: Queued[] = [];

  // Queued changes are written first: the reloaded cache must see their state.
  const dropCache = () => {
    flushQueued();
    enabledByDevice.clear();
    loading.clear();
    cacheDrops++;
    forgetWatches();
  };
  let seenExternal = repos.externalCommits.current();
  function dropCacheIfChangedElsewhere() {
    const external = repos.externalCommits.current();
    if (external !== seenExternal) {
      seenExternal = external;
      dropCache();
    }
  }
  events.on('alert.changed', ({ alertId, change }) => {
    // A changed condition's matches so far belong to the old condition.
    if (change === 'updated' || change === 'deleted') {
      lastMatch.delete(alertId);
      searches.delete(alertId);
    }
    dropCache();
  });
  events.on('external.change', dropCache);
  events.on('device.changed', dropCache);
  // A suspended account's devices cannot send: their silences are not watched.
  events.on('account.changed', dropCache);

  const toCached = (alerts: Alert[]): CachedAlert[] =>
    alerts.map((alert) => ({ alert, path: alert.kind === 'no_data' && alert.field === '*' ? null : fieldPath(alert.field) }));

  /** The device's enabled alerts: from the cache, else read (a value when the repository answers synchronously). */
  function enabledAlerts(deviceSeq: number): Awaitable<CachedAlert[]> {
    const cached = enabledByDevice.get(deviceSeq);
    if (cached) return cached;
    const pending = loading.get(deviceSeq);
    if (pending) return pending;
    const read = repos.alerts.enabledOfDevice(deviceSeq);
    const drops = cacheDrops;
    if (!isPromise(read)) {
      const list = toCached(read);
      enabledByDevice.set(deviceSeq, list);
      return list;
    }
    const load = read.then(
      (alerts) => {
        if (loading.get(deviceSeq) === load) loading.delete(deviceSeq);
        // A cache dropped while reading may hold a newer list already.
        let list = enabledByDevice.get(deviceSeq);
        if (!list) {
          list = toCached(alerts);
          if (drops === cacheDrops) enabledByDevice.set(deviceSeq, list);
        }
        return list;
      },
      (err: unknown) => {
        if (loading.get(deviceSeq) === load) loading.delete(deviceSeq);
        throw err;
      },
    );
    loading.set(deviceSeq, load);
    return load;
  }

  function initialDelivery(action: AlertAction, at: number): ActionDelivery {
    if (action === 'email' && !notifier.sendEmail) {
      return { action, status: 'not_configured', detail: 'no SMTP server configured (--smtp-url)', at };
    }
    return { action, status: 'pending', at };
  }

  function queue(item: Queued) {
    queued.push(item);
    if (queued.length === 1) queueMicrotask(flushQueued);
  }

  /** Callers waiting for the outcomes queued so far to be recorded (or to fail), told by flushQueued. */
  let recordedWaiters: (() => void)[] = [];
  /**
   * Settles once what is queued now is recorded, so the reading that caused it is answered
   * after its trigger or resolution is stored, as it is on a synchronous backend. Only asked
   * for when a reading changed an alert: other readings make no promise here.
   */
  const queuedRecorded = (): Promise<void> => new Promise<void>((resolve) => recordedWaiters.push(resolve));

  function trigger(alert: Alert, account: Account, device: Device, value: number, at: number, reading: StoredReading | null) {
    // The latest trigger, as the database keeps it: a reading stamped earlier may trigger
    // (cooldown 0) after a later one did.
    alert.lastTriggered = alert.lastTriggered === null ? at : Math.max(alert.lastTriggered, at);
    alert.state = 'firing';
    queue({
      type: 'triggered',
      alert,
      account,
      device,
      reading,
      event: {
        id: newId('evt'),
        alertSeq: alert.seq,
        deviceId: alert.deviceId,
        conditionValue: value,
        severity: alert.severity,
        acknowledged: false,
        acknowledgedAt: null,
        triggeredAt: at,
        resolvedAt: null,
        readingSeq: reading?.seq ?? null,
        deliveries: alert.actions.map((a) => initialDelivery(a, at)),
        resolutionDeliveries: [],
      },
    });
  }

  function resolve(alert: Alert, account: Account, device: Device, reading: StoredReading, value: number | null) {
    alert.state = 'ok';
    queue({ type: 'resolved', alert, account, device, reading, value, at: reading.time });
  }

  /**
   * Records every queued trigger and resolution in one transaction (alerts.recordOutcomes),
   * then notifies. Synchronous when the repository answers synchronously (SQLite).
   */
  function flushQueued(): void {
    if (queued.length === 0) return;
    const batch = queued;
    queued = [];
    const waiters = recordedWaiters;
    recordedWaiters = [];
    const done = () => {
      for (const w of waiters) w();
    };
    const outcomes = batch.map(
      (q): AlertOutcome =>
        q.type === 'triggered'
          ? {
              type: 'triggered',
              alertSeq: q.alert.seq,
              event: q.event,
              condition: { kind: q.alert.kind, field: q.alert.field, operator: q.alert.operator, value: q.alert.value },
            }
          : {
              type: 'resolved',
              alertSeq: q.alert.seq,
              at: q.at,
              notices: q.alert.notifyResolved ? q.alert.actions.map((a) => initialDelivery(a, q.at)) : [],
            },
    );
    const failed = (err: unknown) => {
      log('could not record alert changes', { err, alerts: batch.map((q) => q.alert.id) });
      // The cached last_triggered and state values were not stored: reload them from the database.
      enabledByDevice.clear();
      forgetWatches();
    };
    let recorded: Awaitable<RecordedOutcome[]>;
    try {
      recorded = repos.alerts.recordOutcomes(outcomes);
    } catch (err) {
      failed(err);
      done();
      return;
    }
    if (isPromise(recorded)) recorded.then((results) => announce(batch, results), failed).finally(done);
    else {
      announce(batch, recorded);
      done();
    }
  }

  function announce(batch: Queued[], recorded: RecordedOutcome[]): void {
    batch.forEach((q, i) => {
      const { event, error } = recorded[i]!;
      // One failed item (the alert was deleted after this reading was evaluated: the foreign
      // key refuses it) was rolled back alone; the others were recorded.
      if (error !== undefined) log('could not record an alert change', { err: error, alert: q.alert.id, type: q.type });
      if (!event) {
        // Another process recorded this alert's change first (a trigger within its cooldown, a
        // resolution already made): the cached state is not the stored one.
        if (error === undefined) enabledByDevice.delete(q.alert.deviceSeq);
        return;
      }
      if (q.type === 'triggered') {
        events.emit('alert.triggered', { alert: q.alert, event, reading: q.reading });
        notify({ type: 'triggered', alert: q.alert, device: q.device, event, reading: q.reading, publicUrl: publicUrl() }, q.account);
      } else {
        events.emit('alert.resolved', { alert: q.alert, event, reading: q.reading });
        notify(
          { type: 'resolved', alert: q.alert, device: q.device, event, reading: q.reading, resolvedValue: q.value, publicUrl: publicUrl() },
          q.account,
        );
      }
    });
  }

  /** Outcomes being recorded, one after the other. */
  let settling: Promise<void> = Promise.resolve();

  /**
   * Read-modify-write of one action's outcome. Outcomes are recorded one at a time (a
   * chain), so two actions of one event cannot interleave across the reads and writes.
   */
  function settle(type: NoticeType, event: AlertEvent, action: AlertAction, outcome: Omit<ActionDelivery, 'action' | 'at'>, at: number) {
    // A delivery cut short by the shutdown (or failing while it goes on) stays pending for
    // the node that adopts it; one delivered meanwhile is recorded, so it is not sent again.
    if (closed || (handingOver && outcome.status !== 'sent')) return settling;
    settling = settling.then(() => settleNow(type, event, action, outcome, at));
    return settling;
  }

  async function settleNow(
    type: NoticeType,
    event: AlertEvent,
    action: AlertAction,
    outcome: Omit<ActionDelivery, 'action' | 'at'>,
    at: number,
  ): Promise<void> {
    try {
      const current = await repos.alerts.findEventById(event.id);
      if (!current) return; // the alert (and its history) was deleted meanwhile
      const list = type === 'triggered' ? current.deliveries : current.resolutionDeliveries;
      const updated = list.map((d) => (d.action === action ? { action, at, ...outcome } : d));
      if (type === 'triggered') await repos.alerts.setDeliveries(current.seq, updated);
      else await repos.alerts.setResolutionDeliveries(current.seq, updated);
      const shown = type === 'triggered' ? { ...current, deliveries: updated } : { ...current, resolutionDeliveries: updated };
      events.emit('alert.delivery', { event: shown, action, status: outcome.status });
    } catch (err) {
      log('could not record an alert delivery', { err, event: event.id, action });
    }
  }

  function track(task: Promise<void>, type: NoticeType, event: AlertEvent, action: AlertAction) {
    inFlight.set(task, { type, event, action });
    void task.finally(() => inFlight.delete(task));
  }

  /** The POST each HTTP action makes; the webhook's is signed at send time. */
  async function request(action: Exclude<AlertAction, 'email'>, n: Notice, account: Account) {
    const { alert } = n;
    // An alert deleted while its notice is retried stops paging its owner.
    const stopReason = async () => ((await repos.alerts.findBySeq(alert.seq)) ? null : 'the alert was deleted');
    switch (action) {
      case 'webhook': {
        if (!alert.webhookUrl) throw new Error('the alert has no webhook URL');
        // Read at send time, so a rotated secret signs the next delivery.
        const { secret } = await accounts.webhookSecret(account.id);
        return notifier.postWebhook(alert.webhookUrl, webhookBody(n), secret, stopReason);
      }
      case 'slack':
        if (!alert.slackUrl) throw new Error('the alert has no slack URL');
        return notifier.post(alert.slackUrl, slackBody(n), { 'content-type': 'application/json' }, stopReason);
      case 'discord':
        if (!alert.discordUrl) throw new Error('the alert has no discord URL');
        return notifier.post(alert.discordUrl, discordBody(n), { 'content-type': 'application/json' }, stopReason);
      case 'ntfy': {
        if (!alert.ntfyUrl) throw new Error('the alert has no ntfy URL');
        const { body, headers } = ntfyRequest(n);
        return notifier.post(alert.ntfyUrl, body, headers, stopReason);
      }
    }
  }

  function notify(n: Notice, account: Account) {
    const { alert, event, type } = n;
    const deliveries = type === 'triggered' ? event.deliveries : event.resolutionDeliveries;
    for (const delivery of deliveries) {
      if (delivery.status !== 'pending') continue;
      const action = delivery.action;
      if (action === 'email') {
        const send = notifier.sendEmail;
        if (!send) continue;
        track(
          (async () => {
            try {
              await send({ to: account.email, ...alertEmail(n) });
              await settle(type, event, 'email', { status: 'sent' }, Date.now());
            } catch (err) {
              const reason = (err as Error).message || String(err);
              log('alert email not delivered', { alert: alert.id, event: event.id, type, reason });
              await settle(type, event, 'email', { status: 'failed', detail: reason }, Date.now());
            }
          })(),
          type,
          event,
          action,
        );
        continue;
      }
      track(
        (async () => {
          try {
            const result = await request(action, n, account);
            if (result.ok) {
              await settle(type, event, action, { status: 'sent', attempts: result.attempts }, Date.now());
            } else {
              log(`alert ${action} not delivered`, {
                alert: alert.id,
                event: event.id,
                type,
                reason: result.reason,
                attempts: result.attempts,
              });
              await settle(type, event, action, { status: 'failed', detail: result.reason, attempts: result.attempts }, Date.now());
            }
          } catch (err) {
            await settle(type, event, action, { status: 'failed', detail: (err as Error).message }, Date.now());
          }
        })(),
        type,
        event,
        action,
      );
    }
  }

  /**
   * The latest reading a no_data alert counts, read back from the database on its first
   * check in this process (start-up, a new or changed alert): the device's last seen for `*`;
   * for a path, the newest reading with a number there, searched back to the alert's
   * enabling or the device's resume (with no match since, that moment stands in), so a
   * silence longer than SECONDS across a restart is reported whole. The path search reads
   * at most `budget.rows` rows per check; undefined: not known yet, the search goes on at
   * the next check (unless a matching reading arrives meanwhile: newer than anything
   * searched, it ends the search).
   */
  async function lastMatchFromReadings(watch: NoDataWatch, budget: { rows: number }): Promise<number | undefined> {
    const { alert } = watch;
    if (alert.field === '*') return (await repos.devices.findBySeq(alert.deviceSeq))?.lastSeen ?? alert.enabledAt;
    if (budget.rows <= 0) return undefined;
    let search = searches.get(alert.id);
    if (!search) {
      search = { window: silenceStart(null, alert.enabledAt, watch.deviceResumedAt), before: END_OF_TIME };
      searches.set(alert.id, search);
    }
    const path = fieldPath(alert.field);
    const found = await repos.readings.newestMatchingTime(
      alert.deviceSeq,
      search.window,
      search.before,
      (text) => numericValueAt(JSON.parse(text), path) !== null,
      budget.rows,
    );
    budget.rows -= found.scanned;
    if (found.time === null && found.before !== null) {
      search.before = found.before;
      return undefined;
    }
    searches.delete(alert.id);
    return found.time ?? search.window;
  }

  /**
   * The newest stored reading a no_data alert counts, from `after` on: the device's last seen
   * for `*`, else the newest with a number at the path (at most `budget.rows` rows read;
   * undefined when that was not enough to tell, for the next check).
   */
  async function newestStoredMatch(
    watch: NoDataWatch,
    device: Device,
    after: number,
    budget: { rows: number },
  ): Promise<number | undefined> {
    const { alert } = watch;
    if (alert.field === '*') return Math.max(after, device.lastSeen ?? after);
    if (budget.rows <= 0) return undefined;
    const path = fieldPath(alert.field);
    // A search longer than one check's budget goes on where the last check stopped, or a
    // device sending many readings without the path would be searched from the top forever.
    const resume = storedSearches.get(alert.id);
    const found = await repos.readings.newestMatchingTime(
      alert.deviceSeq,
      after + 1,
      resume !== undefined && resume.after === after ? resume.before : END_OF_TIME,
      (text) => numericValueAt(JSON.parse(text), path) !== null,
      budget.rows,
    );
    budget.rows -= found.scanned;
    if (found.time === null && found.before !== null) {
      storedSearches.set(alert.id, { after, before: found.before });
      return undefined;
    }
    storedSearches.delete(alert.id);
    return found.time ?? after;
  }

  /**
   * Sends what another process left pending when it ended (repositories.ts,
   * alerts.adoptAbandonedDeliveries): each action still `pending` of each adopted event, with
   * its whole retry schedule. The reading is read back by its time (the trigger's, or the
   * resolution's).
   */
  async function adoptAbandoned(): Promise<void> {
    if (closed || handingOver) return;
    for (const { eventId, type } of await repos.alerts.adoptAbandonedDeliveries(clock.now(), ADOPT_GRACE_MS)) {
      const event = await repos.alerts.findEventById(eventId);
      const alert = event && (await repos.alerts.findBySeq(event.alertSeq));
      const device = alert && (await repos.devices.findBySeq(alert.deviceSeq));
      const account = device && (await repos.accounts.findBySeq(device.accountSeq));
      if (!event || !alert || !device || !account) continue;
      const at = type === 'triggered' ? event.triggeredAt : event.resolvedAt;
      let reading: StoredReading | null = null;
      if (at !== null && (type === 'resolved' || event.readingSeq !== null)) {
        for await (const r of repos.readings.iterateRange(device.seq, at, at + 1)) {
          if (type === 'resolved' || r.seq === event.readingSeq) {
            reading = r;
            break;
          }
        }
      }
      log('sending alert deliveries left pending by a stopped node', { alert: alert.id, event: event.id, type });
      const resolvedValue =
        type === 'resolved' && reading && alert.kind !== 'no_data'
          ? numericValueAt(JSON.parse(reading.data), fieldPath(alert.field))
          : null;
      notify({ type, alert, device, event, reading, resolvedValue, publicUrl: publicUrl() }, account);
    }
  }

  /** The check running on the timer, if any. */
  let checking: Promise<void> | null = null;

  /** Stops the timer; resolves once a check in progress has ended. */
  function stopSilenceChecks(): Promise<void> {
    if (silenceTimer) clearInterval(silenceTimer);
    silenceTimer = null;
    return checking ?? Promise.resolve();
  }

  /** Fires every enabled no_data alert of an active device that has been silent long enough. */
  async function checkSilences(): Promise<void> {
    if (closed) return;
    dropCacheIfChangedElsewhere();
    flushQueued();
    let list = watches;
    if (list === null) {
      const forgotten = watchesForgotten;
      list = await repos.alerts.noDataWatches();
      if (forgotten === watchesForgotten) watches = list;
      // Entries of alerts no longer watched go with them (deleted or disabled by the CLI, gone
      // with their device, a paused device's): if watched again, the first check reads it back.
      if (lastMatch.size > 0 || searches.size > 0) {
        const watched = new Set(list.map((w) => w.alert.id));
        for (const id of lastMatch.keys()) if (!watched.has(id)) lastMatch.delete(id);
        for (const id of searches.keys()) if (!watched.has(id)) searches.delete(id);
        for (const id of storedSearches.keys()) if (!watched.has(id)) storedSearches.delete(id);
      }
    }
    const now = clock.now();
    const budget = { rows: SEARCH_ROWS_PER_CHECK };
    for (const watch of list) {
      const { alert } = watch;
      if (alert.state !== 'ok') continue;
      let last = lastMatch.get(alert.id);
      if (last === undefined) {
        last = await lastMatchFromReadings(watch, budget);
        if (last === undefined) continue;
        lastMatch.set(alert.id, last);
      } else if (searches.size > 0) searches.delete(alert.id);
      let start = silenceStart(last, alert.enabledAt, watch.deviceResumedAt);
      if (now - start < alert.value * 1000) continue;
      const device = await repos.devices.findBySeq(alert.deviceSeq);
      const account = device && (await repos.accounts.findBySeq(device.accountSeq));
      if (!device || !account) continue;
      if (!repos.leadership.soleWriter) {
        // Other nodes ingest too: their readings never passed through this process, so the
        // database has the last word before the alert fires.
        const stored = await newestStoredMatch(watch, device, last, budget);
        if (stored === undefined) continue;
        if (stored > last) {
          lastMatch.set(alert.id, stored);
          start = silenceStart(stored, alert.enabledAt, watch.deviceResumedAt);
          if (now - start < alert.value * 1000) continue;
        }
      }
      const silentMs = now - start;
      trigger(alert, account, device, Math.floor(silentMs / 1000), now, null);
      // The next reading of this device must see the alert firing.
      enabledByDevice.delete(alert.deviceSeq);
    }
    // A check ends once what it fired is recorded, on an asynchronous backend too.
    const recorded = queued.length > 0 ? queuedRecorded() : null;
    flushQueued();
    if (recorded) await recorded;
  }

  /** evaluateWith, then, when the reading changed an alert, a promise of that change being recorded. */
  function evaluateAndRecord(
    alerts: CachedAlert[],
    device: Device,
    account: Account,
    reading: StoredReading,
    data: Record<string, unknown>,
  ): void | Promise<void> {
    const before = queued.length;
    evaluateWith(alerts, device, account, reading, data);
    if (queued.length > before) return queuedRecorded();
  }

  /** Checks one committed reading against the device's enabled alerts; synchronous (see the cooldown above). */
  function evaluateWith(alerts: CachedAlert[], device: Device, account: Account, reading: StoredReading, data: Record<string, unknown>) {
    if (closed) return;
    for (let i = 0; i < alerts.length; i++) {
      const { alert, path } = alerts[i]!;
      if (alert.kind === 'no_data') {
        if (path !== null && numericValueAt(data, path) === null) continue;
        const seen = lastMatch.get(alert.id);
        if (seen === undefined || reading.time > seen) lastMatch.set(alert.id, reading.time);
        if (alert.state === 'firing') {
          resolve(alert, account, device, reading, null);
          forgetWatches();
        }
        continue;
      }
      const actual = numericValueAt(data, path!);
      if (actual === null) continue;
      const operator = alert.operator as AlertOperator;
      if (compare(actual, operator, alert.value)) {
        // The cached copy is what the next reading of this device is checked against.
        if (!inCooldown(alert.lastTriggered, alert.cooldown, reading.time)) trigger(alert, account, device, actual, reading.time, reading);
      } else if (alert.state === 'firing' && clears(actual, { operator, value: alert.value, clearValue: alert.clearValue })) {
        resolve(alert, account, device, reading, actual);
      }
    }
  }

  return {
    /**
     * The pipeline's AlertEvaluator: called once per committed reading. Synchronous when the
     * device's alerts are cached or the repository answers synchronously; a promise only
     * while an asynchronous backend reads them.
     */
    evaluate(device: Device, account: Account, reading: StoredReading, data: Record<string, unknown>): void | Promise<void> {
      if (closed) return;
      dropCacheIfChangedElsewhere();
      const alerts = enabledAlerts(device.seq);
      if (isPromise(alerts)) return alerts.then((list) => evaluateAndRecord(list, device, account, reading, data));
      return evaluateAndRecord(alerts, device, account, reading, data);
    },

    /** Checks silences every `periodMs` until close() (the server starts it; the CLI does not). */
    startSilenceChecks(periodMs = DEFAULT_SILENCE_CHECK_MS): void {
      if (silenceTimer || closed) return;
      silenceTimer = setInterval(() => {
        // A check still reading (an asynchronous backend) is not overlapped by the next.
        if (checking) return;
        checking = checkSilences()
          .catch((err: unknown) => log('checking silent devices failed', { err }))
          .finally(() => {
            checking = null;
          });
      }, periodMs);
      silenceTimer.unref();
    },

    /** Stops the silence checks (close() does too). */
    stopSilenceChecks,

    /** One pass of adopting deliveries left pending by a stopped process (the leading node runs it). */
    adoptAbandoned,

    /** One pass of the silence check (tests). */
    checkSilences,

    /** no_data alerts whose latest matching reading is held in memory (tests). */
    get trackedSilences(): number {
      return lastMatch.size;
    },

    /** Deliveries still running (tests and shutdown wait on them). */
    get pending(): number {
      return inFlight.size;
    },

    /**
     * Stops retries, waits briefly for running deliveries, records the rest as failed (where
     * other processes share the database: leaves them pending, for the leading node to send),
     * then stops recording outcomes.
     */
    async close(graceMs = 2_000): Promise<void> {
      await stopSilenceChecks();
      flushQueued();
      // Other nodes go on: what is still being sent (a webhook waiting to retry) stays pending
      // and is sent by the leading node once this one's connection has ended.
      if (!repos.leadership.soleWriter) {
        await settling;
        handingOver = true;
      }
      notifier.close();
      const grace = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
      await Promise.race([Promise.allSettled([...inFlight.keys()]), grace]);
      // Deliveries still running are abandoned (an SMTP server that does not answer): recorded
      // as failed, not left pending forever. Their own outcome, if it ever comes, is ignored.
      const at = Date.now();
      if (!handingOver)
        for (const { type, event, action } of inFlight.values())
          void settle(type, event, action, { status: 'failed', detail: 'server shut down' }, at);
      inFlight.clear();
      await settling;
      closed = true;
    },
  };
}
