import { describe, expect, it } from 'vitest';
import { ThrottledLog } from '../../src/domain/throttledLog.js';

/** One line per key per window, with the count of what was held back (storage refusals use it). */
describe('ThrottledLog', () => {
  it('writes the first occurrence at once, counts the rest, and writes the count once the window has passed', () => {
    let now = 0;
    const lines: { details: Record<string, unknown>; message: string }[] = [];
    const write = (details: Record<string, unknown>, message: string) => lines.push({ details, message });
    const log = new ThrottledLog(10_000, () => now);

    log.report(write, 'refused:low_disk', 'writes refused', { reason: 'a' });
    for (let i = 0; i < 499; i++) log.report(write, 'refused:low_disk', 'writes refused', { reason: 'b' });
    log.report(write, 'refused:disk_full', 'writes refused', { reason: 'disk full' }, 7);
    expect(lines).toEqual([
      { details: { reason: 'a', count: 1 }, message: 'writes refused' },
      { details: { reason: 'disk full', count: 7 }, message: 'writes refused' },
    ]);

    now = 9_999;
    log.flush();
    expect(lines).toHaveLength(2);
    now = 10_000;
    log.flush();
    // The held-back 499, with the latest details; the other key had nothing more to say.
    expect(lines[2]).toEqual({ details: { reason: 'b', count: 499 }, message: 'writes refused' });
    expect(lines).toHaveLength(3);

    // A new occurrence within the window of that flushed line waits for the next window.
    now = 12_000;
    log.report(write, 'refused:low_disk', 'writes refused', { reason: 'c' });
    expect(lines).toHaveLength(3);
    now = 20_000;
    log.report(write, 'refused:low_disk', 'writes refused', { reason: 'd' });
    expect(lines[3]).toEqual({ details: { reason: 'd', count: 2 }, message: 'writes refused' });

    // Shutdown: what is held back goes out even inside its window.
    log.report(write, 'refused:low_disk', 'writes refused', { reason: 'e' }, 3);
    log.flush(true);
    expect(lines[4]).toEqual({ details: { reason: 'e', count: 3 }, message: 'writes refused' });
    expect(lines).toHaveLength(5);
  });

  it('writes a burst that ended on its own timer, and what is left when stopped', async () => {
    const lines: Record<string, unknown>[] = [];
    const write = (details: Record<string, unknown>) => lines.push(details);
    const log = new ThrottledLog(40);
    const stop = log.flushEveryWindow();
    try {
      for (let i = 0; i < 5; i++) log.report(write, 'not-tls', 'closed', { i });
      expect(lines).toEqual([{ i: 0, count: 1 }]);
      // Nothing more comes under the key: the timer writes the 4 held back.
      for (let t = 0; t < 100 && lines.length < 2; t++) await new Promise((r) => setTimeout(r, 10));
      expect(lines[1]).toEqual({ i: 4, count: 4 });
      log.report(write, 'not-tls', 'closed', { i: 5 });
      log.report(write, 'not-tls', 'closed', { i: 6 });
    } finally {
      stop();
    }
    expect(lines.at(-1)).toEqual({ i: 6, count: lines.length === 3 ? 2 : 1 });
  });
});
