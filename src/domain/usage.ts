import type { Repositories } from '../storage/index.js';
import { type Clock, DAY_MS, iso, startOfNextUtcMonth, startOfUtcMonth } from '../time.js';
import type { Account } from './types.js';

/** Account usage (docs/api.md, "Account usage"). */
export function usageService(repos: Repositories, clock: Clock) {
  return {
    usage(account: Account) {
      const now = clock.now();
      const total = repos.devices.count(account.seq);
      const active = repos.devices.count(account.seq, 'active');
      return {
        plan: {
          plan: account.plan,
          status: account.status,
          device_limit: account.limits.deviceLimit,
          data_retention_days: account.limits.retentionDays,
          current_period_start: iso(startOfUtcMonth(now)),
          current_period_end: iso(startOfNextUtcMonth(now)),
        },
        devices: { total, active, paused: total - active, limit: account.limits.deviceLimit },
        telemetry: { data_points_24h: repos.readings.countSinceForAccount(account.seq, now - DAY_MS) },
        alerts: { total: repos.alerts.count(account.seq), active: repos.alerts.countEnabled(account.seq) },
      };
    },
  };
}
