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
    private readonly onError: (err: unknown) => void = () => {},
  ) {
    this.last = this.version();
  }

  private version(): number {
    return this.db.pragma('data_version', { simple: true }) as number;
  }

  start(): void {
    // A throw from a timer callback is an uncaught exception that ends the process: a
    // database that fails to answer (I/O error, closed) must show in /healthz, not kill us.
    // Reported once per failing spell, not every 250 ms.
    let failing = false;
    this.timer = setInterval(() => {
      try {
        this.check();
        failing = false;
      } catch (err) {
        if (!failing) this.onError(err);
        failing = true;
      }
    }, this.intervalMs);
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
