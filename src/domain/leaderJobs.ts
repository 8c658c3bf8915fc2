import type { Leadership } from '../storage/repositories.js';

/** A background job that starts on its own schedule and stops, waiting for a pass in progress. */
export interface BackgroundJob {
  start(): void;
  stop(): Promise<void>;
}

export interface LeaderJobsLog {
  /** This process leads (took over, or the first to start): its jobs start. */
  leading(): void;
  /** This process no longer leads (its connection was lost, not a stop): its jobs stop. */
  lost(): void;
  /** The database could not be reached while following the lead; tried again. */
  error(err: unknown): void;
}

/**
 * Runs the jobs that must run once per database on the process that leads
 * (repositories.ts, Leadership): started when it takes the lead, stopped when it loses it.
 * Changes apply one after the other, so a lead lost while the jobs start stops them after.
 */
export function leaderJobs(leadership: Leadership, jobs: readonly BackgroundJob[], log: Partial<LeaderJobsLog> = {}) {
  let unfollow: (() => Promise<void>) | null = null;
  let changing: Promise<void> = Promise.resolve();
  let running = false;
  let leading = false;
  let stopping = false;

  const apply = (lead: boolean) => {
    changing = changing
      .then(async () => {
        if (lead === running) return;
        running = lead;
        if (lead) for (const job of jobs) job.start();
        else for (const job of jobs) await job.stop();
      })
      // A job that fails to stop must not keep the next change from applying.
      .catch((err: unknown) => log.error?.(err));
  };

  return {
    /** Whether this process leads now. */
    get leading(): boolean {
      return leading;
    },
    /** Starts following the lead: on SQLite the jobs start at once. */
    start(): void {
      if (unfollow) return;
      stopping = false;
      unfollow = leadership.follow(
        (lead) => {
          // A lead taken while stopping is given up with the follow: starting the jobs now
          // would leave them running after stop() returned.
          if (lead && stopping) return;
          leading = lead;
          if (lead) log.leading?.();
          else if (!stopping) log.lost?.();
          apply(lead);
        },
        (err) => log.error?.(err),
      );
    },
    /** Stops every job and gives the lead up (another node takes it). */
    async stop(): Promise<void> {
      const stopFollowing = unfollow;
      unfollow = null;
      stopping = true;
      apply(false);
      await changing;
      await stopFollowing?.();
      await changing;
    },
  };
}
