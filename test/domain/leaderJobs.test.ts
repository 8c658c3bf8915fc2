import { describe, expect, it } from 'vitest';
import { leaderJobs } from '../../src/domain/leaderJobs.js';
import type { Leadership } from '../../src/storage/repositories.js';

/** A job that records whether it runs. */
function recordingJob() {
  const job = {
    running: false,
    starts: 0,
    start() {
      job.running = true;
      job.starts++;
    },
    async stop() {
      job.running = false;
    },
  };
  return job;
}

/**
 * A leadership the test grants by hand: `tell(true)` hands this process the lead. `unfollow`
 * runs when the process gives up following (its stop()).
 */
function handLeadership(unfollow: (tell: (leading: boolean) => void) => Promise<void> = async () => {}) {
  const hand = { tell: (_leading: boolean) => {} };
  const leadership: Leadership = {
    soleWriter: false,
    follow: (onChange) => {
      hand.tell = onChange;
      return () => unfollow(onChange);
    },
  };
  return { leadership, tell: (leading: boolean) => hand.tell(leading) };
}

describe('leaderJobs', () => {
  it('starts the jobs when this process leads and stops them with stop()', async () => {
    const { leadership, tell } = handLeadership();
    const job = recordingJob();
    const jobs = leaderJobs(leadership, [job]);
    jobs.start();
    expect(job.running).toBe(false);
    tell(true);
    await new Promise((resolve) => setImmediate(resolve));
    expect([jobs.leading, job.running]).toEqual([true, true]);
    await jobs.stop();
    expect(job.running).toBe(false);
  });

  it('a lead that arrives while stopping does not start the jobs again', async () => {
    // The lead is granted just as the process gives up following (the lock query answered
    // while stop() runs): the jobs must not be running once stop() has returned.
    const { leadership } = handLeadership(async (tell) => {
      tell(true);
      await new Promise((resolve) => setImmediate(resolve));
    });
    const job = recordingJob();
    const jobs = leaderJobs(leadership, [job]);
    jobs.start();
    await jobs.stop();
    await new Promise((resolve) => setImmediate(resolve));
    expect([job.running, job.starts, jobs.leading]).toEqual([false, 0, false]);
  });
});
