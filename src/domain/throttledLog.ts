/**
 * Log lines that could repeat once per request (a refused write on a full disk) go through
 * this: the first occurrence of a key is written at once; later ones within the window are
 * only counted, and the count goes out with the next line of that key, at most one line per
 * key per window. flush() (called from a timer) writes counts held back once their window has
 * passed, so the last burst is not lost.
 */
export type LogLine = (details: Record<string, unknown>, message: string) => void;

interface KeyState {
  lastLineAt: number;
  /** Occurrences since the last line written for the key. */
  pending: number;
  message: string;
  details: Record<string, unknown>;
  write: LogLine;
}

export class ThrottledLog {
  private readonly keys = new Map<string, KeyState>();

  constructor(
    readonly windowMs = 10_000,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** `count` occurrences under `key`; the line carries them as `count`. */
  report(write: LogLine, key: string, message: string, details: Record<string, unknown>, count = 1): void {
    const t = this.now();
    const state = this.keys.get(key);
    if (state === undefined || t - state.lastLineAt >= this.windowMs) {
      write({ ...details, count: (state?.pending ?? 0) + count }, message);
      this.keys.set(key, { lastLineAt: t, pending: 0, message, details, write });
      return;
    }
    state.pending += count;
    state.message = message;
    state.details = details;
    state.write = write;
  }

  /**
   * Flushes once a window on an unref'd timer, for keys whose burst may simply end (nothing
   * else flushes them). Returns the stop, which writes every count still held back.
   */
  flushEveryWindow(): () => void {
    const timer = setInterval(() => this.flush(), this.windowMs);
    timer.unref();
    return () => {
      clearInterval(timer);
      this.flush(true);
    };
  }

  /** Writes held-back counts whose window has passed; all of them with `all` (shutdown). */
  flush(all = false): void {
    const t = this.now();
    for (const [key, state] of this.keys) {
      if (!all && t - state.lastLineAt < this.windowMs) continue;
      if (state.pending === 0) {
        this.keys.delete(key);
        continue;
      }
      state.write({ ...state.details, count: state.pending }, state.message);
      state.lastLineAt = t;
      state.pending = 0;
    }
  }
}
