import { unauthorized } from '../errors.js';
import type { ReadingsRepo } from './repos/readings.js';
import type { PendingReading } from './repositories.js';

/**
 * Readings appended to the inbox between two merges into the clustered table (migration 5).
 * Larger merges write each device's page fewer times per reading but hold the event loop
 * longer and leave more for queries to scan; 32,768 is the balance measured over 1,000
 * devices at 10 M rows (BENCHMARKS.md, "Design decisions").
 */
export const INBOX_MERGE_ROWS = 32_768;
/** A quiet spell after which whatever is in the inbox is merged anyway. */
const INBOX_IDLE_MERGE_MS = 1_000;
/**
 * After a failed merge, the next one waits this long: a merge on a full disk writes most of
 * the inbox again before it fails, and the rows are safe in the inbox meanwhile.
 */
const INBOX_MERGE_RETRY_MS = 10_000;

/** Told how commits go (the storage status service: 503 and /healthz "degraded" on a full disk). */
export interface CommitObserver {
  /** Non-null while the last write to the database failed; the next commit is reported then. */
  readonly commitFailure: unknown;
  /** A batch of `readings` failed to commit: returns the error each of them is rejected with. */
  commitFailed(err: unknown, readings: number): unknown;
  commitSucceeded(): void;
}

const NO_OBSERVER: CommitObserver = { commitFailure: null, commitFailed: (err) => err, commitSucceeded: () => {} };

interface Waiting extends PendingReading {
  resolve: (seq: number) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit (docs/operations.md, "Durability"): readings that arrive during one pass
 * of the event loop are written in a single transaction, flushed from setImmediate, and each
 * caller's promise settles only after that transaction has committed. Nothing is
 * acknowledged before its commit; one fsync-bound commit serves many requests.
 *
 * Batches land in the readings inbox; every INBOX_MERGE_ROWS readings, and after a quiet
 * second, the inbox is merged into the clustered table in a transaction of its own, after
 * the batch's callers were answered (readings repository).
 */
export class ReadingWriter {
  private queue: Waiting[] = [];
  private scheduled = false;
  private closed = false;
  /** Largest batch seen, for /metrics and the benchmark report. */
  maxBatch = 0;
  /** Readings committed by this writer: background jobs back off while it climbs fast. */
  committed = 0;
  /** Group commits so far: with `committed`, the readings per commit (/metrics). */
  commits = 0;
  private mergeScheduled = false;
  private writtenSinceTick = false;
  private mergeRetryAt = 0;
  private readonly idleTimer: NodeJS.Timeout;
  private observer: CommitObserver = NO_OBSERVER;
  /** A merge that failed (busy database, I/O error): the rows stay in the inbox, retried later. */
  private onMergeError: (err: unknown) => void = () => {};

  constructor(
    private readonly readings: ReadingsRepo,
    private readonly maxBatchSize = 5_000,
  ) {
    this.idleTimer = setInterval(() => {
      if (!this.writtenSinceTick && this.readings.inboxRows() > 0) this.merge();
      this.writtenSinceTick = false;
    }, INBOX_IDLE_MERGE_MS);
    this.idleTimer.unref();
  }

  /**
   * Where commit outcomes and failed merges go: set once, right after construction, by the
   * composition (the storage status it reports to also reads this writer's queue).
   */
  reportTo(observer: CommitObserver, onMergeError: (err: unknown) => void): void {
    this.observer = observer;
    this.onMergeError = onMergeError;
  }

  get depth(): number {
    return this.queue.length;
  }

  append(reading: PendingReading): Promise<number> {
    if (this.closed) return Promise.reject(new Error('writer is closed'));
    return new Promise<number>((resolve, reject) => {
      // Explicit fields, not a spread: a spread showed in the MQTT ingest profile.
      this.queue.push({
        deviceSeq: reading.deviceSeq,
        accountSeq: reading.accountSeq,
        time: reading.time,
        data: reading.data,
        parsed: reading.parsed,
        resolve,
        reject,
      });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Writes everything queued; a failed transaction rejects every reading in it (none stored). */
  flush(): void {
    this.scheduled = false;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatchSize);
      this.maxBatch = Math.max(this.maxBatch, batch.length);
      let seqs: (number | null)[];
      try {
        seqs = this.readings.insertBatch(batch);
      } catch (err) {
        const refusal = this.observer.commitFailed(err, batch.length);
        for (const w of batch) w.reject(refusal);
        continue;
      }
      // One field read per batch; the observer hears of a success only after a failure.
      if (this.observer.commitFailure !== null) this.observer.commitSucceeded();
      this.commits++;
      this.writtenSinceTick = true;
      for (let i = 0; i < batch.length; i++) {
        const seq = seqs[i]!;
        // Its device was deleted after the reading was accepted: not stored (insertBatch), so
        // refused as a reading of a device that is gone is refused before the writer.
        if (seq === null) batch[i]!.reject(unauthorized('device no longer exists'));
        else {
          this.committed++;
          batch[i]!.resolve(seq);
        }
      }
    }
    if (this.readings.inboxRows() >= INBOX_MERGE_ROWS && !this.mergeScheduled) {
      // Its own event-loop step: the batch's answers go out first.
      this.mergeScheduled = true;
      setImmediate(() => this.merge());
    }
  }

  /** Moves the inbox into the clustered table now. */
  merge(): void {
    this.mergeScheduled = false;
    if (this.closed || performance.now() < this.mergeRetryAt) return;
    try {
      this.readings.mergeInbox();
    } catch (err) {
      this.mergeRetryAt = performance.now() + INBOX_MERGE_RETRY_MS;
      this.onMergeError(err);
    }
  }

  /** Commits what is queued, merges the inbox and refuses anything new (clean shutdown). */
  close(): void {
    this.flush();
    clearInterval(this.idleTimer);
    this.mergeRetryAt = 0;
    if (this.readings.inboxRows() > 0) this.merge();
    this.closed = true;
    this.mergeScheduled = false;
  }
}
