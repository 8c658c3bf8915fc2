import { describe, expect, it } from 'vitest';
import { LiveMinutes } from '../../src/domain/liveMinutes.js';

const MIN = 60_000;
const T0 = Date.UTC(2026, 0, 5, 10, 0, 30);
const reading = (deviceSeq: number, time: number, parsed?: Record<string, unknown>) => ({
  deviceSeq,
  time,
  data: JSON.stringify(parsed ?? { v: 1 }),
  parsed,
});
const figures = (held: ReturnType<LiveMinutes['take']>) =>
  held && Object.fromEntries([...held.minutes].map(([m, stats]) => [(m - T0 + 30_000) / MIN, Object.fromEntries(stats)]));

describe('live minute figures', () => {
  it('are complete from the minute after they start, late readings and those before left to the database', () => {
    const live = new LiveMinutes(T0);
    expect(live.since).toBe(T0 - 30_000 + MIN);
    live.addCommitted([reading(1, T0 + 10_000), reading(1, T0 + MIN), reading(1, T0 + 2 * MIN + 1, { v: 5, env: { rh: 40 } })], 0, T0);
    // lateBefore past the second minute: that reading marks its hour dirty instead.
    live.addCommitted([reading(1, T0 + MIN + 5, { v: 3 })], T0 + 2 * MIN, T0);
    expect(figures(live.take(1, 0, Number.MAX_SAFE_INTEGER))).toEqual({
      1: { v: { count: 1, min: 1, max: 1, sum: 1 } },
      2: { v: { count: 1, min: 5, max: 5, sum: 5 }, 'env.rh': { count: 1, min: 40, max: 40, sum: 40 } },
    });
    expect(live.take(1, 0, Number.MAX_SAFE_INTEGER)).toBeNull();
  });

  it('parse the stored text when the writer had no parsed values, and count readings per span', () => {
    const live = new LiveMinutes(T0);
    live.addCommitted([reading(7, T0 + MIN), { deviceSeq: 7, time: T0 + MIN + 1, data: '{"v":4,"s":"x","a":[1]}' }], 0, T0);
    const held = live.take(7, T0, T0 + 2 * MIN);
    expect(held?.readings).toBe(2);
    expect(figures(held)).toEqual({ 1: { v: { count: 2, min: 1, max: 4, sum: 5 } } });
  });

  it('hand out only the span asked for, and forget what a pass left behind', () => {
    const live = new LiveMinutes(T0);
    live.addCommitted([reading(1, T0 + MIN), reading(1, T0 + 3 * MIN), reading(2, T0 + MIN)], 0, T0);
    expect(Object.keys(figures(live.take(1, T0, T0 + 2 * MIN))!)).toEqual(['1']);
    live.dropBefore(T0 + 2 * MIN);
    expect(live.take(2, 0, Number.MAX_SAFE_INTEGER)).toBeNull();
    expect(Object.keys(figures(live.take(1, 0, Number.MAX_SAFE_INTEGER))!)).toEqual(['3']);
  });

  it('drop everything past their size, and are complete again only after the newest minute they dropped', () => {
    const live = new LiveMinutes(T0, 3);
    live.addCommitted([reading(1, T0 + MIN), reading(2, T0 + MIN), reading(3, T0 + 5 * MIN)], 0, T0 + MIN);
    expect(live.since).toBe(T0 - 30_000 + MIN);
    live.addCommitted([reading(4, T0 + MIN)], 0, T0 + MIN);
    // Four figures held: all dropped; the dropped minutes are the database's to read now.
    for (const seq of [1, 2, 3, 4]) expect(live.take(seq, 0, Number.MAX_SAFE_INTEGER)).toBeNull();
    expect(live.since).toBe(T0 - 30_000 + 6 * MIN);
    live.addCommitted([reading(1, T0 + 5 * MIN), reading(1, T0 + 6 * MIN)], 0, T0 + MIN);
    expect(Object.keys(figures(live.take(1, 0, Number.MAX_SAFE_INTEGER))!)).toEqual(['6']);
  });
});
