import { describe, expect, it } from 'vitest';
import { composeServices } from '../../src/composition.js';
import { ReadingWriter } from '../../src/storage/readingWriter.js';
import { onPostgres } from '../helpers/backend.js';
import { useTempDatabases } from '../helpers/db.js';

/** One turn of the event loop: a flush the writer scheduled before it has run. */
const nextPass = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * When the SQLite writer commits: at the end of the pass that queued readings, except that
 * under steady load a small batch waits a little for more (src/storage/readingWriter.ts).
 * The waits are made long here so that what the test sees does not hang on the machine's speed.
 */
describe.skipIf(onPostgres)('group commit of small batches', () => {
  const temp = useTempDatabases();

  async function setup(options: { waitMs: number }) {
    const composed = composeServices(temp.open(temp.dir()));
    const account = await composed.services.accounts.create({ email: 'w@example.com', plan: 'business' });
    const { device } = await composed.services.devices.create(account, { name: 'w' });
    // A second writer over the same repository, with the waits under the test's control.
    const writer = new ReadingWriter(composed.storage.repos.readings, { ...options, busyGapMs: 60_000 });
    let n = 0;
    const append = (count: number) =>
      Array.from({ length: count }, () => writer.append({ deviceSeq: device.seq, time: 1_000 + n, data: `{"n":${n++}}` }));
    return { writer, append, stored: () => composed.storage.repos.readings.history(device.seq, 0, 10_000).length };
  }

  it('commits at the end of the pass when the writer was idle, small as the batch is', async () => {
    const { writer, append, stored } = await setup({ waitMs: 60_000 });
    const pending = append(3);
    await nextPass();
    expect(writer.commits).toBe(1);
    expect(await Promise.all(pending)).toHaveLength(3);
    expect(stored()).toBe(3);
  });

  it('under steady load lets a small batch wait for the readings that follow, and commits them together', async () => {
    const { writer, append, stored } = await setup({ waitMs: 60_000 });
    await Promise.all(append(8));
    expect(writer.commits).toBe(1);
    // Right after a commit of 8: the next small batch waits, pass after pass.
    const first = append(3);
    for (let i = 0; i < 5; i++) await nextPass();
    expect(writer.commits).toBe(1);
    expect(writer.depth).toBe(3);
    // Enough to make a full commit: no more waiting.
    const more = append(29);
    await Promise.all([...first, ...more]);
    expect(writer.commits).toBe(2);
    expect(writer.maxBatch).toBe(32);
    expect(stored()).toBe(40);
  });

  it('stops waiting when the waits bring nothing, as with a few clients that each wait for their answer', async () => {
    const { writer, append, stored } = await setup({ waitMs: 2 });
    await Promise.all(append(8));
    // Each batch waits 2 ms and nobody else sends meanwhile.
    let waited = 0;
    for (;;) {
      const batch = append(8);
      await nextPass();
      if (writer.depth === 0) break;
      waited++;
      await Promise.all(batch);
      expect(waited).toBeLessThan(10);
    }
    // The mean gain falls below one reading after a few fruitless waits; the commits after
    // that do not wait (this one just committed in its own pass).
    expect(waited).toBeGreaterThanOrEqual(3);
    for (let i = 0; i < 5; i++) {
      append(8);
      await nextPass();
      expect(writer.depth).toBe(0);
    }
    await nextPass();
    expect(stored()).toBe(8 * (waited + 7));
  });

  it('commits what waits when closed', async () => {
    const { writer, append, stored } = await setup({ waitMs: 60_000 });
    await Promise.all(append(8));
    const waiting = append(2);
    await nextPass();
    expect(writer.depth).toBe(2);
    writer.close();
    expect(await Promise.all(waiting)).toHaveLength(2);
    expect(stored()).toBe(10);
    await expect(writer.append({ deviceSeq: 1, time: 1, data: '{}' })).rejects.toThrow('writer is closed');
  });
});
