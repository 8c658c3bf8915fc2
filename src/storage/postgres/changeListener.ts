import type { Client, Notification, Pool } from 'pg';
import type { ExternalChanges } from '../repositories.js';
import { connectLike } from './connect.js';
import { CHANGES_CHANNEL, MQTT_CLIENTS_CHANNEL, READINGS_CHANNEL } from './migrations.js';

/** The channels other nodes send on, besides the change notifications (migrations.ts). */
export const PEER_CHANNELS = [MQTT_CLIENTS_CHANNEL, READINGS_CHANNEL] as const;

/** Waits between attempts to listen again after the connection was lost: doubling up to the last. */
const RECONNECT_DELAYS_MS = [250, 500, 1_000, 2_000, 5_000];

interface Watcher {
  onChange: () => void;
  onError: (err: unknown) => void;
}

/**
 * Commits by other processes (the admin CLI, another node) on PostgreSQL, which SQLite sees
 * through PRAGMA data_version (src/storage/readCache.ts). A statement-level trigger on the
 * tables that matter (migration 3) sends `pg_notify('telemetryd_changes', '<table> <node>')`
 * at commit; this process holds one connection outside the pool that LISTENs there. A
 * notification from another node bumps `current()`, calls `onExternalChange` (the auth
 * cache's invalidation) and then every watcher, once per burst.
 *
 * The same connection LISTENs to the channels nodes of a cluster talk on (an MQTT client id
 * taken over, a batch of readings committed: migrations.ts), whose payloads start with the
 * sending node's name: onPeer() hears them, told whether this process sent it. One listening connection per
 * process, whatever the number of channels. The readings channel is listened only while
 * something here follows it (a live view is open): every node's every batch sends one
 * notification there, and each listening connection costs PostgreSQL a wake-up and a
 * delivery per batch, the sender's own included (BENCHMARKS.md, PostgreSQL).
 *
 * Notifications sent while the connection is down are lost, so a reconnect counts as
 * "everything changed". The connection is opened by the first watch() (the server); the admin
 * commands, which never watch, never open it.
 */
export class ChangeListener implements ExternalChanges {
  private generation = 0;
  private readonly watchers = new Set<Watcher>();
  private client: Client | null = null;
  private connecting = false;
  private closed = false;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private notifyScheduled = false;
  private readonly peerHandlers = new Map<string, Set<(payload: string, own: boolean) => void>>();
  /** Whether the current connection LISTENs on READINGS_CHANNEL. */
  private readingsListened = false;

  constructor(
    private readonly pool: Pool,
    /** This process's node name (connect.ts): its own changes are not external. */
    private readonly node: string,
    private readonly onExternalChange: () => void,
  ) {}

  current(): number {
    return this.generation;
  }

  /**
   * Calls `onChange` once another process has committed to a watched table (at once, not on
   * a timer: `intervalMs` is the SQLite watch's), and after the listening connection was
   * lost and is back. A lost connection is reported to `onError` once per spell.
   */
  watch(onChange: () => void, _intervalMs: number, onError: (err: unknown) => void = () => {}): () => void {
    const watcher = { onChange, onError };
    this.watchers.add(watcher);
    if (!this.client && !this.connecting) void this.listen();
    return () => {
      this.watchers.delete(watcher);
      if (this.watchers.size === 0) void this.close();
    };
  }

  /**
   * Calls `handler` with what follows the node name in each notification sent on `channel`
   * (one of PEER_CHANNELS), and whether this process sent it: PostgreSQL delivers them in
   * commit order, so a process's own notification places it among the others'. Returns the
   * function that stops it.
   */
  onPeer(channel: (typeof PEER_CHANNELS)[number], handler: (payload: string, own: boolean) => void): () => void {
    let set = this.peerHandlers.get(channel);
    if (!set) {
      set = new Set();
      this.peerHandlers.set(channel, set);
    }
    set.add(handler);
    if (channel === READINGS_CHANNEL) this.followReadings();
    return () => {
      set.delete(handler);
      if (channel === READINGS_CHANNEL) this.followReadings();
    };
  }

  /**
   * LISTENs on READINGS_CHANNEL while it has handlers and UNLISTENs once it has none, on the
   * current connection (listen() does the same for the next one). Queued on the connection
   * without waiting: a batch committed within about a round trip after the first handler
   * came is not heard.
   */
  private followReadings(): void {
    const client = this.client;
    if (!client) return;
    const wanted = (this.peerHandlers.get(READINGS_CHANNEL)?.size ?? 0) > 0;
    if (wanted === this.readingsListened) return;
    this.readingsListened = wanted;
    // CHANGES_CHANNEL again (a no-op), so the connection still shows as `LISTEN telemetryd_changes`.
    for (const sql of [`${wanted ? 'LISTEN' : 'UNLISTEN'} ${READINGS_CHANNEL}`, `LISTEN ${CHANGES_CHANNEL}`]) {
      client.query(sql).catch((err: unknown) => this.lost(client, err));
    }
  }

  /** Whether the listening connection is up (false before the first watch). */
  get listening(): boolean {
    return this.client !== null;
  }

  private async listen(): Promise<void> {
    if (this.closed) return;
    this.connecting = true;
    let client: Client | null = null;
    try {
      client = await connectLike(this.pool);
      client.on('notification', (n) => this.notified(n));
      const lost = (err?: unknown) => this.lost(client!, err ?? new Error('change notifications: connection ended'));
      client.on('error', lost);
      client.on('end', () => lost());
      await client.query(`LISTEN ${MQTT_CLIENTS_CHANNEL}`);
      // Last, so the connection shows as `LISTEN telemetryd_changes` in pg_stat_activity (an operator's query finds it).
      await client.query(`LISTEN ${CHANGES_CHANNEL}`);
    } catch (err) {
      this.connecting = false;
      client?.end().catch(() => {});
      this.retry(err);
      return;
    }
    this.connecting = false;
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.readingsListened = false;
    this.followReadings();
    this.failures = 0;
    // Whatever was committed before the LISTEN (or while the connection was down) was not heard.
    this.changed();
  }

  private lost(client: Client, err: unknown): void {
    if (this.client !== client) return;
    this.client = null;
    client.end().catch(() => {});
    if (!this.closed) this.retry(err);
  }

  private retry(err: unknown): void {
    if (this.closed) return;
    if (this.failures === 0) for (const w of this.watchers) w.onError(err);
    const delay = RECONNECT_DELAYS_MS[Math.min(this.failures, RECONNECT_DELAYS_MS.length - 1)]!;
    this.failures++;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.listen();
    }, delay);
    this.retryTimer.unref();
  }

  private notified(n: Notification): void {
    const payload = n.payload ?? '';
    if (n.channel === CHANGES_CHANNEL) {
      const node = payload.slice(payload.indexOf(' ') + 1);
      if (node === this.node) return;
      this.changed();
      return;
    }
    const handlers = this.peerHandlers.get(n.channel);
    if (!handlers || handlers.size === 0) return;
    const space = payload.indexOf(' ');
    if (space < 0) return;
    const own = payload.slice(0, space) === this.node;
    const rest = payload.slice(space + 1);
    for (const handler of handlers) {
      try {
        handler(rest, own);
      } catch {
        // One handler's bug must not keep the others, or the change notifications, from running.
      }
    }
  }

  /** Caches first (a watcher's re-check must read fresh rows), then the watchers, once per event-loop pass. */
  private changed(): void {
    this.generation++;
    this.onExternalChange();
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    setImmediate(() => {
      this.notifyScheduled = false;
      for (const w of this.watchers) w.onChange();
    });
  }

  /** Stops listening and ends the connection. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => {});
  }
}
