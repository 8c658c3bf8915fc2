import sjson from 'secure-json-parse';

export interface JsonScan {
  /** Deepest nesting of objects and arrays. */
  depth: number;
  /**
   * The source text of the top-level object's `member` value, when the text spells that key
   * exactly once and holds no backslash; undefined otherwise. Meaningful only for a text that
   * parses.
   */
  memberText?: string;
}

const isWhitespace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/**
 * One pass over a JSON text, without recursion: its nesting depth and, when asked, where
 * the value of one top-level member is spelled, so that value can be stored as it was sent
 * instead of serialized again from the parsed object.
 *
 * A key spelled with an escape (`"d\u0061ta"`) parses to the same name as the plain one and
 * JSON.parse keeps the last of duplicate keys, so the member's text is trusted only when the
 * whole text holds no backslash (every key is spelled plainly) and the key appears once.
 */
export function scanJson(text: string, member?: string): JsonScan {
  // Without a backslash a string ends at the next quote: found natively, not char by char.
  const plain = !text.includes('\\');
  const quotedMember = member === undefined || !plain ? undefined : `"${member}"`;
  let depth = 0;
  let max = 0;
  // After a top-level string spelling `member`: the next significant character decides
  // whether it was the key (a colon) or a value.
  let keyCandidate = false;
  let valueStart = -1;
  let valueEnd = -1;
  let found = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (isWhitespace(c)) continue;
    if (keyCandidate) {
      keyCandidate = false;
      if (c === 0x3a) {
        found++;
        valueStart = i + 1;
        continue;
      }
    }
    if (c === 0x22) {
      const end = plain ? text.indexOf('"', i + 1) : closingQuote(text, i + 1);
      if (end < 0) break; // unterminated: JSON.parse refuses the text
      if (depth === 1 && quotedMember !== undefined && end + 1 - i === quotedMember.length) keyCandidate = text.startsWith(quotedMember, i);
      i = end;
    } else if (c === 0x7b || c === 0x5b) max = Math.max(max, ++depth);
    else if (c === 0x7d || c === 0x5d) {
      if (depth === 1 && valueStart >= 0 && valueEnd < 0) valueEnd = i;
      depth--;
    } else if (c === 0x2c && depth === 1 && valueStart >= 0 && valueEnd < 0) valueEnd = i;
  }
  if (found !== 1 || valueEnd < 0) return { depth: max };
  return { depth: max, memberText: text.slice(valueStart, valueEnd).trim() };
}

/** The index of the quote closing a string whose text starts at `from`, escapes skipped; -1 if none. */
function closingQuote(text: string, from: number): number {
  for (let i = from; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x5c) i++;
    else if (c === 0x22) return i;
  }
  return -1;
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
