import { describe, expect, it } from 'vitest';
import { hashSecret, sameHash } from '../../src/ids.js';

describe('secret hashes', () => {
  it('compares digests exactly: equal, one character off anywhere, or another length', () => {
    const digest = hashSecret('tok_example');
    expect(sameHash(digest, hashSecret('tok_example'))).toBe(true);
    expect(sameHash(digest, hashSecret('tok_examplf'))).toBe(false);
    for (const i of [0, 31, 63]) {
      const off = digest.slice(0, i) + (digest[i] === 'a' ? 'b' : 'a') + digest.slice(i + 1);
      expect(sameHash(digest, off)).toBe(false);
    }
    expect(sameHash(digest, digest.slice(0, 63))).toBe(false);
    expect(sameHash('', '')).toBe(true);
  });
});
