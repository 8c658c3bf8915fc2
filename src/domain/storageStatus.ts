/** What storage can tell about itself, from the composition root (the domain never sees SQLite). */
export interface StorageProbe {
  /** Bytes of the database in use (pages in use times page size; the WAL is not counted). */
  databaseBytes(): number;
  /** Readings waiting for the next group commit. */
  writerQueueDepth(): number;
  /** Largest group commit so far (readings in one transaction). */
  writerMaxBatch(): number;
  /** Throws when the database cannot be read. */
  checkReadable(): void;
}

/** The state of storage, for /healthz and /metrics. */
export function storageStatusService(probe: StorageProbe) {
  return {
    ...probe,
    /** `null` when the database answers, else why not. */
    databaseProblem(): string | null {
      try {
        probe.checkReadable();
        return null;
      } catch (err) {
        return err instanceof Error ? err.message : String(err);
      }
    },
  };
}
