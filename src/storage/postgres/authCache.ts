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

  /** Forgets every cached entry; a look-up in flight when this runs is not remembered. */
  invalidate(): void {
    this.generation++;
  }

  /** A lookup by key cached until the next `invalidate()`; misses (null) are not cached. */
  cached<K, V>(lookup: (key: K) => Promise<V | null>, maxEntries = 50_000): (key: K) => Awaitable<V | null> {
    const cache = new Map<K, V>();
    let seen = this.generation;
    return (key: K) => {
      if (this.generation !== seen) {
        cache.clear();
        seen = this.generation;
      }
      const hit = cache.get(key);
      if (hit !== undefined) return hit;
      const started = this.generation;
      return lookup(key).then((value) => {
        // A write that ended while this look-up was running may have changed what it read.
        if (value !== null && this.generation === started) {
          if (cache.size >= maxEntries) cache.clear();
          cache.set(key, value);
        }
        return value;
      });
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
