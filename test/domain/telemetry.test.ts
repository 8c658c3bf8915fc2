import { describe, expect, it } from 'vitest';
import { validateFields } from '../../src/domain/devices.js';
import { PLAN_DEFAULTS } from '../../src/domain/plans.js';
import { RateLimiter } from '../../src/domain/rateLimit.js';
import { capRangeToRetention, RANGE_NAMES } from '../../src/domain/telemetry.js';
import type { Account } from '../../src/domain/types.js';

describe('capRangeToRetention (docs/api.md, Telemetry ranges and retention)', () => {
  it('keeps ranges that fit, including one equal to the retention', () => {
    expect(capRangeToRetention('30d', 30)).toBe('30d');
    expect(capRangeToRetention('7d', 7)).toBe('7d');
    expect(capRangeToRetention('1h', 1)).toBe('1h');
  });
  it('replaces a longer range by the longest that fits', () => {
    expect(capRangeToRetention('7d', 3)).toBe('24h');
    expect(capRangeToRetention('30d', 7)).toBe('7d');
    expect(capRangeToRetention('30d', 29)).toBe('7d');
    // Under an hour of retention nothing fits: the range stays as asked (and holds nothing).
    expect(capRangeToRetention('24h', 0)).toBe('24h');
    expect(capRangeToRetention('1h', 0)).toBe('1h');
  });
  it('knows the five documented ranges', () => {
    expect(RANGE_NAMES).toEqual(['1h', '6h', '24h', '7d', '30d']);
  });
});

describe('validateFields', () => {
  it('fills label and unit, refuses duplicates, bad names and too many', () => {
    expect(validateFields([{ name: 'temp' }], 5)).toEqual([{ name: 'temp', label: 'temp', unit: '' }]);
    expect(() => validateFields([{ name: 'a' }, { name: 'a' }], 5)).toThrow(/twice/);
    expect(() => validateFields([{ name: '1abc' }], 5)).toThrow(/name/);
    expect(() => validateFields([{ name: 'a', unit: 3 }], 5)).toThrow(/unit/);
    expect(() => validateFields({ name: 'a' }, 5)).toThrow(/array/);
    expect(() => validateFields([{ name: 'a' }, { name: 'b' }], 1)).toThrow(/allows 1/);
  });
});

describe('RateLimiter', () => {
  const account = { seq: 1, limits: { ...PLAN_DEFAULTS.starter, ratePerMinute: 2, ratePerDay: 3 } } as Account;

  it('counts per UTC minute and per UTC day, and a refused request does not count', () => {
    let now = Date.UTC(2026, 0, 1, 10, 0, 30);
    const limiter = new RateLimiter({ now: () => now });
    expect(limiter.consume(account)).toEqual({ limit: 2, remaining: 1, dailyLimit: 3, dailyRemaining: 2 });
    expect(limiter.consume(account).remaining).toBe(0);
    let err: any;
    try {
      limiter.consume(account);
    } catch (e) {
      err = e;
    }
    expect(err.status).toBe(429);
    expect(err.retryAfter).toBe(30);
    now += 30_000; // next minute
    expect(limiter.consume(account)).toEqual({ limit: 2, remaining: 1, dailyLimit: 3, dailyRemaining: 0 });
    now += 60_000;
    try {
      limiter.consume(account);
    } catch (e) {
      err = e;
    }
    // Daily window: wait until the next UTC midnight.
    expect(err.retryAfter).toBe((Date.UTC(2026, 0, 2) - now) / 1000);
    now = Date.UTC(2026, 0, 2, 0, 0, 1);
    expect(limiter.consume(account).dailyRemaining).toBe(2);
  });
});
