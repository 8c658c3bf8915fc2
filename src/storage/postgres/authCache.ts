import type { Awaitable } from '../repositories.js';

/**
 * Device authentication (on every reading) and the account behind it, served from memory on
 * PostgreSQL as on SQLite (src/storage/readCache.ts): a hit is synchronous, so ingest pays no
 * round trip; a miss returns the promise of the look-up.
 *
 * SQLite learns of every change to the watched tables from its connection's triggers and from
 * PRAGMA data_version. On PostgreSQL this process's own writes call `invalidate()`: every
 * repository method that changes a devices or accounts row does once its statement or
 * transaction has ended (committed or not). Changes by another process (the admin CLI,
 * another node) arrive as notifications (changeListener.ts), whose handler calls
 * `invalidate()` too, and once more after the listening connection was lost and is back.
 */
export class AuthCache {
  private generation = 0;

  /** A number that changes with every invalidate(): the reading writer checks its devices after one. */
  current(): number {
    return this.generation;
  }

  /** Forgets every cached entry; a look-up in flight when this runs is not remembered. */
  invalidate(): void {
    this.generation++;
  }

  /**
   * A lookup by key cached until the next `invalidate()`; misses (null) are not cached. Misses
   * of one key while its look-up runs share it: a burst of readings from a device not cached
   * yet costs one query, and they go on in the order they came.
   */
  cached<K, V>(lookup: (key: K) => Promise<V | null>, maxEntries = 50_000): (key: K) => Awaitable<V | null> {
    const cache = new Map<K, V>();
    const running = new Map<K, Promise<V | null>>();
    let seen = this.generation;
    return (key: K) => {
      if (this.generation !== seen) {
        cache.clear();
        // Look-ups started before the change may read what it changed: not shared any more.
        running.clear();
        seen = this.generation;
      }
      const hit = cache.get(key);
      if (hit !== undefined) return hit;
      const shared = running.get(key);
      if (shared) return shared;
      const started = this.generation;
      const look = lookup(key).then(
        (value) => {
          if (running.get(key) === look) running.delete(key);
          // A write that ended while this look-up was running may have changed what it read.
          if (value !== null && this.generation === started) {
            if (cache.size >= maxEntries) cache.clear();
            cache.set(key, value);
          }
          return value;
        },
        (err: unknown) => {
          if (running.get(key) === look) running.delete(key);
          throw err;
        },
      );
      running.set(key, look);
      return look;
    };
  }

  /** Runs a write to devices or accounts, then invalidates, whether it committed or not. */
  async writing<T>(write: Promise<T>): Promise<T> {
    try {
      return await write;
    } finally {
      this.invalidate();
    }
  }
}
