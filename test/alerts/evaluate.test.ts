import { describe, expect, it } from 'vitest';
import { clears, compare, conditionValue, fieldPath, inCooldown, numericValueAt, silenceStart } from '../../src/domain/alerts/evaluate.js';
import { headerText } from '../../src/domain/alerts/messages.js';

describe('alert rules (pure)', () => {
  it('reads numbers at top-level names and dotted paths only', () => {
    const data = { temp: 21.5, env: { temp: -3, deep: { x: 0 } }, list: [7], s: '21.5', b: true, n: null, 'a.b': 5 };
    expect(numericValueAt(data, fieldPath('temp'))).toBe(21.5);
    expect(numericValueAt(data, fieldPath('env.temp'))).toBe(-3);
    expect(numericValueAt(data, fieldPath('env.deep.x'))).toBe(0);
    expect(numericValueAt(data, fieldPath('list.0'))).toBe(7);
    // A key holding dots is read as the path it spells, as charts and aggregates read it; the
    // nested spelling first.
    expect(numericValueAt(data, fieldPath('a.b'))).toBe(5);
    const spelled = {
      env: { 'deep.x': 4, deep: { y: 1 } },
      'env.deep': { z: 6 },
      'p.q': { r: 'x' },
      p: { 'q.r': 8 },
      s: { t: 1 },
      's.t': 2,
    };
    expect(numericValueAt(spelled, fieldPath('env.deep.x'))).toBe(4);
    expect(numericValueAt(spelled, fieldPath('env.deep.y'))).toBe(1);
    expect(numericValueAt(spelled, fieldPath('env.deep.z'))).toBe(6);
    expect(numericValueAt(spelled, fieldPath('p.q.r'))).toBe(8);
    expect(numericValueAt(spelled, fieldPath('s.t'))).toBe(1);
    for (const f of [
      's',
      'b',
      'n',
      'env',
      'missing',
      'env.missing',
      'temp.x',
      'a.b.c',
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

describe('resolution and silence rules (pure)', () => {
  it('resolves once the value no longer meets the condition, past clear_value when set', () => {
    expect(clears(30, { operator: '>', value: 30, clearValue: null })).toBe(true);
    expect(clears(30.5, { operator: '>', value: 30, clearValue: null })).toBe(false);
    // > 30 with clear 25: 28 keeps firing, 25 itself too (below, not at), 24.9 resolves.
    expect(clears(28, { operator: '>', value: 30, clearValue: 25 })).toBe(false);
    expect(clears(25, { operator: '>', value: 30, clearValue: 25 })).toBe(false);
    expect(clears(24.9, { operator: '>', value: 30, clearValue: 25 })).toBe(true);
    expect(clears(29, { operator: '>=', value: 30, clearValue: 29.5 })).toBe(true);
    // < 5 with clear 8: above 8 resolves.
    expect(clears(6, { operator: '<', value: 5, clearValue: 8 })).toBe(false);
    expect(clears(8.1, { operator: '<=', value: 5, clearValue: 8 })).toBe(true);
    expect(clears(2, { operator: '!=', value: 1, clearValue: null })).toBe(false);
    expect(clears(1, { operator: '!=', value: 1, clearValue: null })).toBe(true);
  });

  it('counts a silence from the latest of the last match, the enabling and the resume', () => {
    expect(silenceStart(null, 1_000, null)).toBe(1_000);
    expect(silenceStart(5_000, 1_000, null)).toBe(5_000);
    expect(silenceStart(5_000, 1_000, 9_000)).toBe(9_000);
    expect(silenceStart(5_000, 7_000, 6_000)).toBe(7_000);
  });

  it('puts non-ASCII header text in an RFC 2047 encoded word and keeps ASCII as is', () => {
    expect(headerText('[warning] Door: sensor (dev_1)')).toBe('[warning] Door: sensor (dev_1)');
    const encoded = headerText('Kühlraum\nzwei');
    expect(encoded).toMatch(/^=\?UTF-8\?B\?[A-Za-z0-9+/=]+\?=$/);
    expect(Buffer.from(encoded.slice(10, -2), 'base64').toString('utf8')).toBe('Kühlraum zwei');
  });
});
