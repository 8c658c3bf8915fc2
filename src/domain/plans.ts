/** Plan defaults (docs/api.md, "Plans"). Limits are always integers; `accounts set-plan` overrides them. */
export const PLAN_NAMES = ['free', 'starter', 'business', 'scale', 'enterprise'] as const;
export type PlanName = (typeof PLAN_NAMES)[number];

export interface PlanLimits {
  ratePerMinute: number;
  ratePerDay: number;
  deviceLimit: number;
  retentionDays: number;
  snapshotsPerDay: number;
  snapshotRetentionDays: number;
  fieldLimit: number;
}

export const PLAN_DEFAULTS: Record<PlanName, PlanLimits> = {
  free: { ratePerMinute: 0, ratePerDay: 0, deviceLimit: 3, retentionDays: 7, snapshotsPerDay: 10, snapshotRetentionDays: 7, fieldLimit: 5 },
  starter: {
    ratePerMinute: 60,
    ratePerDay: 10_000,
    deviceLimit: 10,
    retentionDays: 30,
    snapshotsPerDay: 50,
    snapshotRetentionDays: 30,
    fieldLimit: 20,
  },
  business: {
    ratePerMinute: 300,
    ratePerDay: 50_000,
    deviceLimit: 100,
    retentionDays: 90,
    snapshotsPerDay: 200,
    snapshotRetentionDays: 365,
    fieldLimit: 50,
  },
  scale: {
    ratePerMinute: 600,
    ratePerDay: 100_000,
    deviceLimit: 1_000,
    retentionDays: 365,
    snapshotsPerDay: 1_000,
    snapshotRetentionDays: 365,
    fieldLimit: 100,
  },
  enterprise: {
    ratePerMinute: 1_200,
    ratePerDay: 1_000_000,
    deviceLimit: 100_000,
    retentionDays: 365,
    snapshotsPerDay: 5_000,
    snapshotRetentionDays: 365,
    fieldLimit: 200,
  },
};

export function isPlanName(value: string): value is PlanName {
  return (PLAN_NAMES as readonly string[]).includes(value);
}

/** The free plan has no Public API (docs/api.md, "Plans"). */
export function planHasApiAccess(plan: string): boolean {
  return plan !== 'free';
}
