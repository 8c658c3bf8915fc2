import { describe, expect, it } from 'vitest';
import { AuthCache } from '../../src/storage/postgres/authCache.js';

/** A look-up whose answers the test releases, counting the calls. */
function controlledLookup() {
  const calls: { key: string; answer: (v: string | null) => void }[] = [];
  const lookup = (key: string) => new Promise<string | null>((answer) => calls.push({ key, answer }));
  return { calls, lookup };
}

describe('the PostgreSQL authentication cache', () => {
  it('misses of one key while its look-up runs share it, and go on in the order they came', async () => {
    const cache = new AuthCache();
    const { calls, lookup } = controlledLookup();
    const find = cache.cached(lookup);
    const order: number[] = [];
    const waits = [1, 2, 3, 4].map((n) => Promise.resolve(find('dev_a')).then((v) => order.push(n) && v));
    expect(calls).toHaveLength(1);
    calls[0]!.answer('device a');
    expect(await Promise.all(waits)).toEqual(['device a', 'device a', 'device a', 'device a']);
    expect(order).toEqual([1, 2, 3, 4]);
    // Cached now: answered at once, no promise.
    expect(find('dev_a')).toBe('device a');
    expect(calls).toHaveLength(1);
  });

  it('a miss after an invalidate does not share a look-up started before it', async () => {
    const cache = new AuthCache();
    const { calls, lookup } = controlledLookup();
    const find = cache.cached(lookup);
    const before = find('dev_a');
    cache.invalidate();
    const after = find('dev_a');
    expect(calls).toHaveLength(2);
    calls[0]!.answer('old');
    calls[1]!.answer('new');
    expect(await before).toBe('old');
    expect(await after).toBe('new');
    // The look-up that started before the change is not remembered; the one after it is.
    expect(find('dev_a')).toBe('new');
  });

  it('a failed look-up is not shared with the next miss', async () => {
    const cache = new AuthCache();
    let n = 0;
    const find = cache.cached(async (key: string) => {
      n++;
      if (n === 1) throw new Error('connection lost');
      return `${key} found`;
    });
    await expect(find('dev_a')).rejects.toThrow('connection lost');
    expect(await find('dev_a')).toBe('dev_a found');
    expect(n).toBe(2);
  });
});
