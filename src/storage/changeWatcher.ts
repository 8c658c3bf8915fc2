/**
 * Notices changes to accounts, devices and alerts made by other connections (the admin CLI)
 * through the config_changes counter (migration 6, readCache.ts), which triggers bump on
 * every such change. Cheap enough to poll often; lets the server close MQTT sessions of a
 * device paused from the CLI without a restart. (PRAGMA data_version would also change on
 * every batch the writer thread commits.)
 */
export class ChangeWatcher {
  private timer: NodeJS.Timeout | null = null;
  private last: number;

  constructor(
    private readonly version: () => number,
    private readonly onChange: () => void,
    private readonly intervalMs = 250,
    private readonly onError: (err: unknown) => void = () => {},
  ) {
    this.last = this.version();
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
