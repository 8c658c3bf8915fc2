import { describe, expect, it } from 'vitest';
import { compare, conditionValue, fieldPath, inCooldown, numericValueAt } from '../../src/domain/alerts/evaluate.js';

describe('alert rules (pure)', () => {
  it('reads numbers at top-level names and dotted paths only', () => {
    const data = { temp: 21.5, env: { temp: -3, deep: { x: 0 } }, list: [7], s: '21.5', b: true, n: null, 'a.b': 5 };
    expect(numericValueAt(data, fieldPath('temp'))).toBe(21.5);
    expect(numericValueAt(data, fieldPath('env.temp'))).toBe(-3);
    expect(numericValueAt(data, fieldPath('env.deep.x'))).toBe(0);
    expect(numericValueAt(data, fieldPath('list.0'))).toBe(7);
    for (const f of [
      's',
      'b',
      'n',
      'env',
      'missing',
      'env.missing',
      'temp.x',
      'a.b',
      'constructor',
      'toString',
      '__proto__',
      'env.constructor',
      'list.length',
    ]) {
      expect(numericValueAt(data, fieldPath(f)), f).toBeNull();
    }
  });

  it('compares with each operator', () => {
    const cases: [Parameters<typeof compare>[1], number, boolean][] = [
      ['>', 21, true],
      ['>', 20, false],
      ['>=', 20, true],
      ['>=', 19.99, false],
      ['<', 19, true],
      ['<', 20, false],
      ['<=', 20, true],
      ['<=', 20.01, false],
      ['==', 20, true],
      ['==', 20.5, false],
      ['!=', 21, true],
      ['!=', 20, false],
    ];
    for (const [op, actual, expected] of cases) expect(compare(actual, op, 20), `${actual} ${op} 20`).toBe(expected);
  });

  it('a missing or non-numeric field never meets a condition, != included', () => {
    for (const data of [{}, { t: '1' }, { t: null }, { t: false }, { t: {} }]) {
      expect(conditionValue(data, ['t'], { operator: '!=', value: 0 })).toBeNull();
    }
    expect(conditionValue({ t: 1 }, ['t'], { operator: '!=', value: 0 })).toBe(1);
  });

  it('cooldown: before T + cooldown suppressed, at T + cooldown free, 0 never suppresses', () => {
    expect(inCooldown(null, 300, 0)).toBe(false);
    expect(inCooldown(1_000, 300, 1_000 + 299_999)).toBe(true);
    expect(inCooldown(1_000, 300, 1_000 + 300_000)).toBe(false);
    expect(inCooldown(1_000, 0, 1_000)).toBe(false);
  });
});
