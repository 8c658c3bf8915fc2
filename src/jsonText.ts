import sjson from 'secure-json-parse';

/** The nesting depth of a JSON text, counted without recursion (strings skipped). */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) max = Math.max(max, ++depth);
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return max;
}

/**
 * JSON.parse that refuses `__proto__` and `constructor.prototype` keys (prototype poisoning,
 * as fastify's own parser does), throwing like JSON.parse. secure-json-parse scans every text
 * with two regular expressions after parsing (a third of the parse cost of a reading);
 * a key can only spell `__proto__` or `prototype` with the letters
 * "proto" or with \u escapes, so a text holding neither is parsed by JSON.parse alone.
 */
export function parseJsonRefusingProto(text: string): unknown {
  if (text.includes('proto') || text.includes('\\u'))
    return sjson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' });
  return JSON.parse(text);
}
