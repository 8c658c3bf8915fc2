import type { Db } from './db.js';

/**
 * Knows when rows of some tables may have changed, so hot lookups (device authentication on
 * every ingest, the account behind it) can be served from memory (benchmarks, issue 8:
 * two SELECTs and two JSON.parse per reading were half the ingest CPU).
 *
 * Two sources of change, both checked on every lookup, so a change is seen at once
 * (decisions.md §2: the server sees the CLI's effect without a restart):
 * - this connection: TEMP triggers on the watched tables call back into JS, whichever code
 *   wrote (any repository, raw SQL, a rolled-back transaction counts too);
 * - other connections (the admin CLI, another process): PRAGMA data_version, which changes
 *   exactly when another connection has committed.
 */
export class TableChanges {
  private generation = 0;
  private lastDataVersion: number;
  private checkedInThisJob = false;
  private readonly dataVersion;

  constructor(private readonly db: Db, tables: string[]) {
    this.dataVersion = db.prepare('PRAGMA data_version').pluck();
    this.lastDataVersion = this.dataVersion.get() as number;
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
   * A number that differs from any earlier one once a watched table may have changed.
   * data_version is read once per synchronous job (it starts a read transaction: profiled
   * at a quarter of ingest CPU when read per lookup); the next request, in its own job,
   * reads it again, so another process's commit is still seen by the next request.
   */
  current(): number {
    if (!this.checkedInThisJob) {
      this.checkedInThisJob = true;
      queueMicrotask(() => (this.checkedInThisJob = false));
      const v = this.dataVersion.get() as number;
      if (v !== this.lastDataVersion) {
        this.lastDataVersion = v;
        this.generation++;
      }
    }
    return this.generation;
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
