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
 */
export function numericValueAt(data: unknown, path: readonly string[]): number | null {
  let node: unknown = data;
  for (let i = 0; i < path.length; i++) {
    const segment = path[i]!;
    if (node === null || typeof node !== 'object' || !Object.hasOwn(node, segment)) return null;
    // In a JSON array only element indexes are data (its own `length` is not).
    if (Array.isArray(node) && !/^(0|[1-9]\d*)$/.test(segment)) return null;
    node = (node as Record<string, unknown>)[segment];
  }
  return typeof node === 'number' && Number.isFinite(node) ? node : null;
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
