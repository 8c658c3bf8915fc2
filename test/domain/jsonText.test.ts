import { describe, expect, it } from 'vitest';
import { scanJson } from '../../src/jsonText.js';

/**
 * scanJson finds where the top-level `data` member's value is spelled, so HTTP ingest can
 * store it as sent. Whenever it answers, the text must parse to exactly the value JSON.parse
 * gives the member; when it cannot be sure, it must not answer.
 */
describe('scanJson', () => {
  it('counts nesting depth, skipping brackets inside strings', () => {
    expect(scanJson('{}').depth).toBe(1);
    expect(scanJson('{"a":[{"b":[1]}]}').depth).toBe(4);
    expect(scanJson('{"a":"[[[{{{"}').depth).toBe(1);
    expect(scanJson('{"a":"\\"[[["}').depth).toBe(1);
    expect(scanJson('5').depth).toBe(0);
  });

  it('gives the member text wherever the key stands, with the whitespace inside it kept', () => {
    const cases: [string, string][] = [
      ['{"data":{"t":1}}', '{"t":1}'],
      ['{"device_id":"d","data":{"t":1.50},"access_token":"x"}', '{"t":1.50}'],
      ['{ "device_id" : "d" , "data" : { "t" : 1 , "s" : "a,b}c" } }', '{ "t" : 1 , "s" : "a,b}c" }'],
      ['{\n\t"data":\n[1, {"x": [2, 3]}]\n,"b":{}}', '[1, {"x": [2, 3]}]'],
      ['{"data":"text","z":1}', '"text"'],
      ['{"data":null}', 'null'],
      ['{"other":{"data":{"nested":1}},"data":{"top":2}}', '{"top":2}'],
      ['{"a":"data","data":{"b":1}}', '{"b":1}'],
    ];
    for (const [text, member] of cases) {
      expect(scanJson(text, 'data').memberText, text).toBe(member);
      expect(JSON.parse(member)).toEqual(JSON.parse(text).data);
    }
  });

  it('gives nothing where the text could hold another data than the one spelled first', () => {
    for (const text of [
      '{"t":1}',
      '{"other":{"data":{"nested":1}}}',
      '{"data":{"t":1},"data":{"t":2}}',
      '{"data":{"t":1},"d\\u0061ta":{"t":2}}',
      '{"data":{"s":"a\\"b"}}',
      '{"a":"data"}',
      '["data"]',
    ]) {
      expect(scanJson(text, 'data').memberText, text).toBeUndefined();
    }
  });

  it('agrees with JSON.parse on generated bodies whenever it answers', () => {
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const pick = <T>(xs: T[]) => xs[Math.floor(random() * xs.length)]!;
    const space = () => pick(['', ' ', '\n', '\t ', '  ']);
    const value = (depth: number): string => {
      const r = random();
      if (depth > 3 || r < 0.4) return pick(['1', '-2.50', '1e3', 'true', 'null', '"s"', '"data"', '"a,b}]"', '"{\\"x\\":1}"']);
      if (r < 0.7)
        return `[${space()}${Array.from({ length: Math.floor(random() * 3) }, () => value(depth + 1)).join(`${space()},${space()}`)}${space()}]`;
      return object(depth + 1);
    };
    const object = (depth: number): string => {
      const keys = Array.from({ length: Math.floor(random() * 4) }, () => pick(['data', 'a', 'b', 'device_id', 'd\\u0061ta']));
      return `{${space()}${keys.map((k) => `"${k}"${space()}:${space()}${value(depth)}`).join(`${space()},${space()}`)}${space()}}`;
    };
    let answered = 0;
    for (let i = 0; i < 3000; i++) {
      const text = object(0);
      const parsed = JSON.parse(text);
      const { memberText } = scanJson(text, 'data');
      if (memberText === undefined) continue;
      answered++;
      expect(JSON.parse(memberText), text).toEqual(parsed.data);
    }
    expect(answered).toBeGreaterThan(300);
  });
});
