import { describe, expect, it } from 'vitest';
import { leaderJobs } from '../../src/domain/leaderJobs.js';
import type { Leadership } from '../../src/storage/repositories.js';

/** A job that records whether it runs. */
function recordingJob() {
  const job = { running: false, starts: 0, start: () => {}, stop: async () => {} };
  job.start = () => {
    job.running = true;
    job.starts++;
  };
  job.stop = async () => {
    job.running = false;
  };
  return job;
}

describe('leaderJobs', () => {
  it('starts the jobs when this process leads and stops them with stop()', async () => {
    let tell: (leading: boolean) => void = () => {};
    const leadership: Leadership = {
      soleWriter: false,
      follow: (onChange) => {
        tell = onChange;
        return async () => {};
      },
    };
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
    let tell: (leading: boolean) => void = () => {};
    const leadership: Leadership = {
      soleWriter: false,
      follow: (onChange) => {
        tell = onChange;
        return async () => {
          tell(true);
          await new Promise((resolve) => setImmediate(resolve));
        };
      },
    };
    const job = recordingJob();
    const jobs = leaderJobs(leadership, [job]);
    jobs.start();
    await jobs.stop();
    await new Promise((resolve) => setImmediate(resolve));
    expect([job.running, job.starts, jobs.leading]).toEqual([false, 0, false]);
  });
});
