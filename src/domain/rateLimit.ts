import { rateLimited } from '../errors.js';
import type { SharedRateCounts } from '../storage/repositories.js';
import { type Clock, DAY_MS, MINUTE_MS } from '../time.js';
import type { Account } from './types.js';

export interface RateLimitState {
  limit: number;
  remaining: number;
  dailyLimit: number;
  dailyRemaining: number;
}

interface Counter {
  minute: number;
  minuteCount: number;
  day: number;
  dayCount: number;
}

/**
 * Per-account Public API limits: fixed windows of the current UTC minute and UTC day
 * (docs/api.md, "Rate limits"). Every request with a valid key counts, 4xx included; a request refused
 * with 429 does not. Counts live in memory (SQLite: one process): a restart forgives the
 * current windows.
 */
export class RateLimiter {
  private counters = new Map<number, Counter>();

  constructor(private readonly clock: Clock) {}

  /** Counts one request, or throws 429 (with the state to put in headers) when over a limit. */
  consume(account: Account): RateLimitState {
    const now = this.clock.now();
    const minute = Math.floor(now / MINUTE_MS);
    const day = Math.floor(now / DAY_MS);
    let c = this.counters.get(account.seq);
    if (!c) {
      c = { minute, minuteCount: 0, day, dayCount: 0 };
      this.counters.set(account.seq, c);
    }
    if (c.minute !== minute) {
      c.minute = minute;
      c.minuteCount = 0;
    }
    if (c.day !== day) {
      c.day = day;
      c.dayCount = 0;
    }
    const { ratePerMinute, ratePerDay } = account.limits;
    const state = (): RateLimitState => ({
      limit: ratePerMinute,
      remaining: Math.max(0, ratePerMinute - c.minuteCount),
      dailyLimit: ratePerDay,
      dailyRemaining: Math.max(0, ratePerDay - c.dayCount),
    });
    if (c.dayCount >= ratePerDay) {
      throw Object.assign(rateLimited('rate limit exceeded', Math.ceil(((day + 1) * DAY_MS - now) / 1000)), { rateLimit: state() });
    }
    if (c.minuteCount >= ratePerMinute) {
      throw Object.assign(rateLimited('rate limit exceeded', Math.ceil(((minute + 1) * MINUTE_MS - now) / 1000)), { rateLimit: state() });
    }
    c.minuteCount++;
    c.dayCount++;
    return state();
  }
}

/**
 * The same limits counted in the database (PostgreSQL), so every node of a cluster counts
 * against the same windows and N nodes together allow what one would (docs/cluster.md,
 * "What every node sees"): one round trip per request.
 */
export class SharedRateLimiter {
  constructor(
    private readonly clock: Clock,
    private readonly counts: SharedRateCounts,
  ) {}

  /** Counts one request, or rejects with 429 (with the state to put in headers) when over a limit. */
  async consume(account: Account): Promise<RateLimitState> {
    const now = this.clock.now();
    const minute = Math.floor(now / MINUTE_MS);
    const day = Math.floor(now / DAY_MS);
    const { ratePerMinute, ratePerDay } = account.limits;
    const { minuteCount, dayCount, allowed } = await this.counts.consume(account.seq, minute, day, ratePerMinute, ratePerDay);
    const state: RateLimitState = {
      limit: ratePerMinute,
      remaining: Math.max(0, ratePerMinute - minuteCount),
      dailyLimit: ratePerDay,
      dailyRemaining: Math.max(0, ratePerDay - dayCount),
    };
    if (allowed) return state;
    const retryAfterMs = dayCount >= ratePerDay ? (day + 1) * DAY_MS - now : (minute + 1) * MINUTE_MS - now;
    throw Object.assign(rateLimited('rate limit exceeded', Math.ceil(retryAfterMs / 1000)), { rateLimit: state });
  }
}
