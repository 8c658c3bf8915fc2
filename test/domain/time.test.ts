import { describe, expect, it } from 'vitest';
import { iso } from '../../src/time.js';

describe('iso', () => {
  it('writes exactly what Date#toISOString writes', () => {
    const samples = [
      0,
      1,
      999,
      1000,
      59_999,
      86_399_999,
      86_400_000,
      -1,
      -86_400_001,
      Date.UTC(2026, 10, 21, 15, 37, 12, 345),
      Date.UTC(2024, 1, 29, 23, 59, 59, 999),
      Date.UTC(2000, 0, 1),
      Date.UTC(9999, 11, 31, 23, 59, 59, 999),
      Date.UTC(10000, 0, 1, 0, 0, 0, 7),
      Date.UTC(-1, 5, 6, 7, 8, 9, 10),
      8.64e15,
      -8.64e15,
    ];
    // And a spread of random instants over ±300 years.
    for (let i = 0; i < 2000; i++) samples.push(Math.round((Math.random() - 0.5) * 2 * 300 * 365.25 * 86_400_000));
    for (const ms of samples) expect(iso(ms)).toBe(new Date(ms).toISOString());
    expect(iso(1.5)).toBe(new Date(1.5).toISOString());
    expect(iso(null)).toBeNull();
    expect(iso(undefined)).toBeNull();
  });
});
