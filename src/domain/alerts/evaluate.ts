/**
 * Pure alert logic: reading a (dotted) field out of a reading, comparing it, and the
 * cooldown rule. No I/O here, so every rule of docs/alerts.md ("Evaluation") is testable on its own.
 */
import type { AlertOperator } from '../types.js';

/** "env.temp" → ["env", "temp"]; split once per alert, not once per reading. */
export const fieldPath = (field: string): readonly string[] => field.split('.');

/**
 * The numeric value at `path` (["temp"], ["env", "temp"]) in a reading, or null when the
 * reading does not have it or it is not a finite JSON number: such a reading does not meet
 * the condition, whatever the operator. A numeric string such as "21.5" is a string, not a number, so it does not count
 * (docs/alerts.md); neither do booleans or null. Only own properties are walked, never the
 * prototype chain.
 *
 * A key that itself holds dots is read as the path it spells (`{"env.temp": 21}` for
 * `env.temp`), as charts, aggregates, exports and a strict device's declared names read it,
 * so an alert sees what the dashboard shows; the nested spelling is tried first.
 */
export function numericValueAt(data: unknown, path: readonly string[]): number | null {
  let node: unknown = data;
  for (let i = 0; i < path.length; i++) {
    const segment = path[i]!;
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, segment)) {
      return path.length > 1 ? numberSpelledAt(data, path, 0) : null;
    }
    // In a JSON array only element indexes are data (its own `length` is not).
    if (Array.isArray(node) && !ARRAY_INDEX.test(segment)) return null;
    node = (node as Record<string, unknown>)[segment];
  }
  if (typeof node === 'number' && Number.isFinite(node)) return node;
  return path.length > 1 ? numberSpelledAt(data, path, 0) : null;
}

const ARRAY_INDEX = /^(0|[1-9]\d*)$/;

/**
 * The first finite number at path[from..] below `node`, each step taking one segment as a key
 * or several joined by dots: the slow way, for a reading whose nested walk found no number.
 */
function numberSpelledAt(node: unknown, path: readonly string[], from: number): number | null {
  if (from === path.length) return typeof node === 'number' && Number.isFinite(node) ? node : null;
  if (node === null || typeof node !== 'object') return null;
  let key = '';
  for (let end = from; end < path.length; end++) {
    key = end === from ? path[from]! : `${key}.${path[end]}`;
    if (!Object.hasOwn(node, key) || (Array.isArray(node) && !ARRAY_INDEX.test(key))) continue;
    const found = numberSpelledAt((node as Record<string, unknown>)[key], path, end + 1);
    if (found !== null) return found;
  }
  return null;
}

/** `actual <operator> threshold`; `==` and `!=` compare the numbers exactly. */
export function compare(actual: number, operator: AlertOperator, threshold: number): boolean {
  switch (operator) {
    case '>':
      return actual > threshold;
    case '>=':
      return actual >= threshold;
    case '<':
      return actual < threshold;
    case '<=':
      return actual <= threshold;
    case '==':
      return actual === threshold;
    case '!=':
      return actual !== threshold;
  }
}

/** The value that met the condition, or null when the reading does not meet it. */
export function conditionValue(
  data: unknown,
  path: readonly string[],
  condition: { operator: AlertOperator; value: number },
): number | null {
  const actual = numericValueAt(data, path);
  return actual !== null && compare(actual, condition.operator, condition.value) ? actual : null;
}

/**
 * After a trigger at T, readings that meet the condition before T + cooldown seconds record
 * nothing; cooldown 0 lets every matching reading trigger, also one stamped before the last
 * trigger (a late reading, or batches committed out of arrival order on PostgreSQL).
 */
export function inCooldown(lastTriggered: number | null, cooldownSeconds: number, at: number): boolean {
  return cooldownSeconds > 0 && lastTriggered !== null && at < lastTriggered + cooldownSeconds * 1000;
}

/**
 * Whether `actual` resolves a firing threshold alert (docs/alerts.md "State and resolution"): it no longer meets
 * the condition and, with a clear value, has crossed back over it: below it for `>`/`>=`,
 * above it for `<`/`<=`. A value between the two keeps the alert firing (hysteresis).
 */
export function clears(actual: number, condition: { operator: AlertOperator; value: number; clearValue: number | null }): boolean {
  if (compare(actual, condition.operator, condition.value)) return false;
  const clear = condition.clearValue;
  if (clear === null) return true;
  switch (condition.operator) {
    case '>':
    case '>=':
      return actual < clear;
    case '<':
    case '<=':
      return actual > clear;
    default:
      return true;
  }
}

/**
 * Where a no_data silence starts: the latest matching reading, or the alert's creation or
 * enabling, or the device's resume, whichever is latest (docs/alerts.md "no_data alerts").
 */
export function silenceStart(lastMatch: number | null, enabledAt: number, resumedAt: number | null): number {
  return Math.max(lastMatch ?? enabledAt, enabledAt, resumedAt ?? enabledAt);
}
