import type { Repositories } from '../storage/repositories.js';
import { type Clock, DAY_MS, HOUR_MS } from '../time.js';
import type { Account, Device } from './types.js';

/** Range values of the telemetry history, shortest first (docs/api.md, "Telemetry ranges and retention"). */
const RANGES = [
  ['1h', HOUR_MS],
  ['6h', 6 * HOUR_MS],
  ['24h', 24 * HOUR_MS],
  ['7d', 7 * DAY_MS],
  ['30d', 30 * DAY_MS],
] as const;
export type RangeName = (typeof RANGES)[number][0];
export const RANGE_NAMES = RANGES.map(([name]) => name) as RangeName[];

export const rangeMs = (range: RangeName): number => RANGES.find(([name]) => name === range)![1];

/**
 * A range longer than the plan's retention becomes the longest range that fits in it; a
 * range equal to the retention is unchanged: 3 days of retention turns 7d into 24h
 * (docs/api.md, "Telemetry ranges and retention").
 */
export function capRangeToRetention(requested: RangeName, retentionDays: number): RangeName {
  const retentionMs = retentionDays * DAY_MS;
  if (rangeMs(requested) <= retentionMs) return requested;
  let best: RangeName | null = null;
  for (const [name, ms] of RANGES) if (ms <= retentionMs) best = name;
  // Under an hour of retention no range fits: the answer says what was asked, and holds
  // nothing, since nothing is kept.
  return best ?? requested;
}

export function telemetryService(repos: Repositories, clock: Clock) {
  /** Oldest instant still inside the plan retention: older readings are never returned. */
  const retentionStart = (account: Account) => clock.now() - account.limits.retentionDays * DAY_MS;

  return {
    async latest(account: Account, device: Device) {
      const reading = await repos.readings.latest(device.seq);
      return reading && reading.time >= retentionStart(account) ? reading : null;
    },

    async history(account: Account, device: Device, requested: RangeName, limit: number) {
      const range = capRangeToRetention(requested, account.limits.retentionDays);
      const since = Math.max(clock.now() - rangeMs(range), retentionStart(account));
      return { range, readings: await repos.readings.history(device.seq, since, limit) };
    },

    /** Readings of [since, until) oldest first, streamed for exports: iterate with `for await`. */
    iterateRange(account: Account, device: Device, since: number, until: number) {
      return repos.readings.iterateRange(device.seq, Math.max(since, retentionStart(account)), until);
    },
  };
}
