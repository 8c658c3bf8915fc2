import { describe, expect, it } from 'vitest';
import { hashSecret, sameText } from '../../src/ids.js';

describe('secret hashes', () => {
  it('compares digests exactly: equal, one character off anywhere, or another length', () => {
    const digest = hashSecret('tok_example');
    expect(sameText(digest, hashSecret('tok_example'))).toBe(true);
    expect(sameText(digest, hashSecret('tok_examplf'))).toBe(false);
    for (const i of [0, 31, 63]) {
      const off = digest.slice(0, i) + (digest[i] === 'a' ? 'b' : 'a') + digest.slice(i + 1);
      expect(sameText(digest, off)).toBe(false);
    }
    expect(sameText(digest, digest.slice(0, 63))).toBe(false);
    expect(sameText('', '')).toBe(true);
  });
});
