import type { Repositories } from '../storage/repositories.js';
import { type Clock, DAY_MS, iso, startOfNextUtcMonth, startOfUtcMonth } from '../time.js';
import type { Account } from './types.js';

/** Account usage (docs/api.md, "Account usage"). */
export function usageService(repos: Repositories, clock: Clock) {
  return {
    async usage(account: Account) {
      const now = clock.now();
      const total = await repos.devices.count(account.seq);
      const active = await repos.devices.count(account.seq, 'active');
      const dataPoints = await repos.readings.countSinceForAccount(account.seq, now - DAY_MS);
      const alerts = { total: await repos.alerts.count(account.seq), active: await repos.alerts.countEnabled(account.seq) };
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
        telemetry: { data_points_24h: dataPoints },
        alerts,
      };
    },
  };
}
