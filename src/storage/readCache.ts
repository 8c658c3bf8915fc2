import type { Db } from './db.js';

/**
 * Knows when rows of some tables may have changed, so hot lookups (device authentication on
 * every ingest, the account behind it) can be served from memory: two SELECTs and two
 * JSON.parse per reading would be a large share of ingest CPU (BENCHMARKS.md, "Design decisions").
 *
 * Two sources of change, both checked on every lookup, so the server sees the CLI's effect
 * without a restart (docs/architecture.md, Caches):
 * - this connection: TEMP triggers on the watched tables call back into JS, whichever code
 *   wrote (any repository, raw SQL, a rolled-back transaction counts too): seen at once;
 * - other connections (the admin CLI, another process): ExternalCommits above.
 */
/**
 * Commits made by other connections (the admin CLI, another process), seen through
 * PRAGMA data_version, which changes exactly when another connection has committed.
 *
 * Read at most once per EXTERNAL_CHECK_MS, not per lookup: the pragma starts a read
 * transaction (shared-memory locks): read once per request it was a measurable share of HTTP
 * ingest CPU. So a commit by another process is seen by every lookup that
 * starts more than EXTERNAL_CHECK_MS after it: an admin command's effect is visible before
 * the command has even exited.
 */
export const EXTERNAL_CHECK_MS = 1;

/**
 * How long after a change to the devices or accounts tables every batch of readings checks
 * that its devices still exist (both backends' writers). A reading is authenticated at most
 * one event-loop pass (or one commit) before its batch, from a cache that sees other
 * processes' commits within EXTERNAL_CHECK_MS on SQLite, or when their notification arrives
 * on PostgreSQL, so a reading of a device deleted longer ago was refused before it was queued.
 */
const DEVICE_CHECK_MS = 1_000;

/**
 * A writer's answer to "must this batch check that its devices still exist?": given the
 * current generation of the devices and accounts tables, yes within DEVICE_CHECK_MS of the
 * last time it changed.
 */
export function deviceCheckWindow(): (generation: number) => boolean {
  let seen = -1;
  let until = 0;
  return (generation) => {
    const now = performance.now();
    if (generation !== seen) {
      seen = generation;
      until = now + DEVICE_CHECK_MS;
    }
    return now < until;
  };
}

export class ExternalCommits {
  private generation = 0;
  private lastDataVersion: number;
  private checkedAt = -Infinity;
  private readonly dataVersion;

  constructor(db: Db) {
    this.dataVersion = db.prepare('PRAGMA data_version').pluck();
    this.lastDataVersion = this.dataVersion.get() as number;
  }

  /**
   * A number that differs from any earlier one once another connection may have committed;
   * with `now`, read from the database whatever the time since the last read.
   */
  current(now = false): number {
    const t = performance.now();
    if (now || t - this.checkedAt >= EXTERNAL_CHECK_MS) {
      this.checkedAt = t;
      const v = this.dataVersion.get() as number;
      if (v !== this.lastDataVersion) {
        this.lastDataVersion = v;
        this.generation++;
      }
    }
    return this.generation;
  }

  /**
   * Calls `onChange` (from an unref'd timer, every `intervalMs`) once another connection has
   * committed since the last call: how the server hears of admin commands that no lookup
   * would otherwise ask about (an MQTT session of a device paused from the CLI). A database
   * that fails to answer is reported once per failing spell, never thrown from the timer
   * (that would end the process). Returns the function that stops watching.
   */
  watch(onChange: () => void, intervalMs: number, onError: (err: unknown) => void = () => {}): () => void {
    let seen = this.generation;
    let failing = false;
    const timer = setInterval(() => {
      try {
        const generation = this.current();
        failing = false;
        if (generation !== seen) {
          seen = generation;
          onChange();
        }
      } catch (err) {
        if (!failing) onError(err);
        failing = true;
      }
    }, intervalMs);
    timer.unref();
    return () => clearInterval(timer);
  }
}

export class TableChanges {
  private generation = 0;

  constructor(
    private readonly db: Db,
    private readonly external: ExternalCommits,
    tables: string[],
  ) {
    db.function('telemetryd_tables_changed', { deterministic: false, varargs: false }, () => {
      this.generation++;
      return null;
    });
    for (const table of tables) {
      for (const op of ['INSERT', 'UPDATE', 'DELETE']) {
        db.exec(`CREATE TEMP TRIGGER IF NOT EXISTS telemetryd_watch_${table}_${op.toLowerCase()} AFTER ${op} ON main.${table}
          BEGIN SELECT telemetryd_tables_changed(); END`);
      }
    }
  }

  /**
   * A number that differs from any earlier one once a watched table may have changed; with
   * `now`, other connections' commits are looked for now, not up to EXTERNAL_CHECK_MS late.
   */
  current(now = false): number {
    // Both counters only grow, so their sum changes whenever either does.
    return this.generation + this.external.current(now);
  }

  /** A lookup by key cached until the watched tables change; misses (null) are not cached. */
  cached<K, V>(lookup: (key: K) => V | null, maxEntries = 50_000): (key: K) => V | null {
    const cache = new Map<K, V>();
    let seen = -1;
    return (key: K) => {
      const gen = this.current();
      if (gen !== seen) {
        cache.clear();
        seen = gen;
      }
      const hit = cache.get(key);
      if (hit !== undefined) return hit;
      const value = lookup(key);
      // Inside a transaction a row may yet be rolled back: never remember it.
      if (value !== null && !this.db.inTransaction) {
        if (cache.size >= maxEntries) cache.clear();
        cache.set(key, value);
      }
      return value;
    };
  }
}
