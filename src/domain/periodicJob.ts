export interface PeriodicTiming {
  /** Wait between the end of one pass and the start of the next: passes never overlap. */
  intervalMs: number;
  /** Wait from start() to the first pass. */
  firstRunDelayMs: number;
}

/**
 * The schedule of a background job (retention, rollups): passes on an unref'd timer, so the
 * job never keeps the process alive, each scheduled when the previous one ends. runOnce()
 * runs a pass now or joins the one in progress; stop() ends the schedule and waits for the
 * pass in progress, which the job ends early by checking `stopped` between its steps. Only
 * start() clears `stopped`: a runOnce() during shutdown cannot undo a stop().
 */
export function periodicJob<T>(pass: () => Promise<T>, onError: (err: unknown) => void = () => {}) {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<T> | null = null;
  let stopped = false;

  const runOnce = (): Promise<T> => {
    running ??= pass().finally(() => (running = null));
    return running;
  };

  return {
    /** True from stop() until the next start(): a pass in progress ends at its next step. */
    get stopped(): boolean {
      return stopped;
    },
    start({ intervalMs, firstRunDelayMs }: PeriodicTiming): void {
      if (timer) clearTimeout(timer);
      stopped = false;
      const schedule = (delay: number) => {
        timer = setTimeout(() => {
          void runOnce()
            .catch(onError)
            .finally(() => {
              if (!stopped) schedule(intervalMs);
            });
        }, delay);
        timer.unref();
      };
      schedule(firstRunDelayMs);
    },
    runOnce,
    async stop(): Promise<void> {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = null;
      await running?.catch(() => undefined);
    },
  };
}
