import type { Repositories } from '../storage/repositories.js';
import { type Clock, DAY_MS, HOUR_MS, MINUTE_MS } from '../time.js';
import { periodicJob } from './periodicJob.js';
import { LEVELS } from './rollups.js';
import type { SnapshotService } from './snapshots.js';

export interface RetentionOptions {
  /** Readings deleted per transaction: short transactions keep the write lock free for ingest. */
  batchSize?: number;
  /** How often the job runs (default hourly) and how long after start the first run waits. */
  intervalMs?: number;
  firstRunDelayMs?: number;
  onError?: (err: unknown) => void;
  /** Test hook: called after each committed batch with the number of rows it deleted. */
  onBatch?: (deleted: number) => void;
}

export interface RetentionRun {
  /** Devices that had readings deleted, readings deleted, and the transactions that took. */
  devices: number;
  deleted: number;
  batches: number;
  /** Snapshots deleted (files and rows). */
  snapshots: number;
  /** Whole partitions of readings dropped (PostgreSQL); 0 where storage has none. */
  partitions: number;
  /** Readings committed after their device's deletion, deleted now (PostgreSQL); 0 where none can be. */
  readingsOfRemovedDevices: number;
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Retention, the one background job that forgets data: readings older than the account's
 * plan retention, then snapshots older than its snapshot retention (docs/operations.md, "Retention").
 * Readings go in small batches,
 * one short IMMEDIATE transaction each, and yields to the event loop between batches, so
 * ingest (group commit on the same connection) and admin commands never wait behind it.
 * Before a device's readings go, its newest reading time is archived in devices.last_seen,
 * so `last_seen` survives even when every reading is past retention.
 */
export class RetentionJob {
  private readonly job = periodicJob(
    () => this.pass(),
    (err) => this.options.onError?.(err),
  );
  private readonly batchSize: number;

  /** The first pass after start also clears temporary snapshot files a crash left mid-write. */
  private sweepTemps = true;

  constructor(
    private readonly repos: Repositories,
    private readonly clock: Clock,
    private readonly snapshots: SnapshotService,
    private options: RetentionOptions = {},
  ) {
    this.batchSize = options.batchSize ?? 1_000;
  }

  /** Periodic runs on an unref'd timer: the job never keeps the process alive. */
  start(options: Pick<RetentionOptions, 'intervalMs' | 'firstRunDelayMs'> = {}): void {
    this.options = { ...this.options, ...options };
    this.job.start({ intervalMs: this.options.intervalMs ?? HOUR_MS, firstRunDelayMs: this.options.firstRunDelayMs ?? MINUTE_MS });
  }

  /** Runs one pass now (or joins the pass in progress). */
  runOnce(): Promise<RetentionRun> {
    return this.job.runOnce();
  }

  /** Stops the timer and waits for a pass in progress to end at its next batch boundary. */
  stop(): Promise<void> {
    return this.job.stop();
  }

  private async pass(): Promise<RetentionRun> {
    const run: RetentionRun = { devices: 0, deleted: 0, batches: 0, snapshots: 0, partitions: 0, readingsOfRemovedDevices: 0 };
    const retentionByAccount = new Map((await this.repos.accounts.list()).map((a) => [a.seq, a.limits.retentionDays]));
    const now = this.clock.now();
    // Whole partitions past every account's retention first (where storage has them): one
    // DROP instead of their rows' deletes; expireBatch below deletes the rest per account.
    if (this.repos.readings.dropExpiredPartitions) {
      run.partitions = (await this.repos.readings.dropExpiredPartitions(now, LEVELS.length)).length;
    }
    if (this.repos.readings.sweepRemovedDevices) run.readingsOfRemovedDevices = await this.repos.readings.sweepRemovedDevices();
    for (const device of await this.repos.devices.allSeqs()) {
      const days = retentionByAccount.get(device.accountSeq);
      if (days === undefined) continue;
      const cutoff = now - days * DAY_MS;
      let touched = false;
      for (;;) {
        if (this.job.stopped) return run;
        // last_seen archived, one batch deleted and the rollups of the deleted readings
        // dropped, in one transaction (repositories.ts, readings.expireBatch).
        const deleted = await this.repos.readings.expireBatch(device.seq, cutoff, this.batchSize, LEVELS.length);
        if (deleted === 0) break;
        touched = true;
        run.deleted += deleted;
        run.batches++;
        this.options.onBatch?.(deleted);
        await yieldToEventLoop();
      }
      if (touched) run.devices++;
    }
    if (this.sweepTemps) {
      this.sweepTemps = false;
      await this.snapshots.removeStaleTempFiles(HOUR_MS);
    }
    run.snapshots = await this.snapshots.purgeExpiredSnapshots(now);
    return run;
  }
}
