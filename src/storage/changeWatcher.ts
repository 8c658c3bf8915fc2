import type { Db } from './db.js';

/**
 * Notices commits made by other connections (the admin CLI) through PRAGMA data_version,
 * which changes only when another connection commits. Cheap enough to poll often; lets the
 * server close MQTT sessions of a device paused from the CLI without a restart.
 */
export class ChangeWatcher {
  private timer: NodeJS.Timeout | null = null;
  private last: number;

  constructor(
    private readonly db: Db,
    private readonly onChange: () => void,
    private readonly intervalMs = 250,
  ) {
    this.last = this.version();
  }

  private version(): number {
    return this.db.pragma('data_version', { simple: true }) as number;
  }

  start(): void {
    this.timer = setInterval(() => this.check(), this.intervalMs);
    this.timer.unref();
  }

  check(): void {
    const v = this.version();
    if (v !== this.last) {
      this.last = v;
      this.onChange();
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
