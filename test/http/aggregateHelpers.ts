import { expect } from 'vitest';
import type { RunningServer } from '../../src/server.js';

export interface Reading {
  time: number;
  data: Record<string, unknown>;
}

interface Figures {
  count: number;
  min: number;
  max: number;
  avg: number;
}

export interface Bucket {
  time: string;
  values: Record<string, Figures>;
}

const RANGE_MS: Record<string, number> = { '1h': 3_600_000, '6h': 21_600_000, '24h': 86_400_000, '7d': 604_800_000, '30d': 2_592_000_000 };
const INTERVAL_MS: Record<string, number> = {
  '1m': 60_000,
  '5m': 300_000,
  '15m': 900_000,
  '1h': 3_600_000,
  '6h': 21_600_000,
  '1d': 86_400_000,
};

/** A small deterministic PRNG (mulberry32), so failures reproduce. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Commits readings with the given (past) times through the reading writer, as ingest would
 * (on either backend), a thousand at a time; resolves once all are committed.
 */
export async function insertReadings(server: RunningServer, deviceSeq: number, readings: Reading[]): Promise<void> {
  for (let i = 0; i < readings.length; i += 1000) {
    await Promise.all(
      readings.slice(i, i + 1000).map((r) => server.storage.writer.append({ deviceSeq, time: r.time, data: JSON.stringify(r.data) })),
    );
  }
}

/** Every reading of a range from the Public API's history (the test keeps ranges under its 1,000 limit). */
export async function telemetryAll(
  server: { request(path: string, init?: RequestInit & { key?: string }): Promise<Response> },
  key: string,
  deviceId: string,
  range: string,
): Promise<Reading[]> {
  const res = await server.request(`/v1/devices/${deviceId}/telemetry?range=${range}&limit=1000`, { key });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { data: { time: string; data: Record<string, unknown> }[] };
  expect(body.data.length).toBeLessThan(1000);
  return body.data.map((r) => ({ time: Date.parse(r.time), data: r.data })).reverse();
}

/** The numbers of a reading reached through object keys only, by dotted path: the reference the tests hold the service to. */
function numbersOf(data: Record<string, unknown>, prefix = '', out: [string, number][] = []): [string, number][] {
  for (const [k, v] of Object.entries(data)) {
    if (typeof v === 'number') out.push([prefix + k, v]);
    else if (v && typeof v === 'object' && !Array.isArray(v)) numbersOf(v as Record<string, unknown>, `${prefix}${k}.`, out);
  }
  return out;
}

/** Buckets computed from raw readings (oldest first), summed in time order. */
export function expectedBuckets(readings: Reading[], now: number, range: string, interval: string, fields: string[] | null) {
  const since = now - RANGE_MS[range]!;
  const size = INTERVAL_MS[interval]!;
  const acc = new Map<number, Map<string, { count: number; min: number; max: number; sum: number }>>();
  const seen = new Set<string>();
  for (const r of [...readings].sort((x, y) => x.time - y.time)) {
    if (r.time < since) continue;
    const b = Math.floor(r.time / size) * size;
    for (const [path, v] of numbersOf(r.data)) {
      if (fields && !fields.includes(path)) continue;
      seen.add(path);
      let m = acc.get(b);
      if (!m) {
        m = new Map();
        acc.set(b, m);
      }
      const a = m.get(path);
      if (!a) m.set(path, { count: 1, min: v, max: v, sum: v });
      else {
        a.count++;
        a.min = Math.min(a.min, v);
        a.max = Math.max(a.max, v);
        a.sum += v;
      }
    }
  }
  const order = fields ?? [...seen].sort();
  const buckets: Bucket[] = [...acc.keys()]
    .sort((x, y) => x - y)
    .map((b) => {
      const values: Record<string, Figures> = {};
      for (const path of order) {
        const a = acc.get(b)!.get(path);
        if (a) values[path] = { count: a.count, min: a.min, max: a.max, avg: a.sum / a.count };
      }
      return { time: new Date(b).toISOString(), values };
    });
  return { fields: order, buckets };
}

/**
 * Count, min and max must be equal; avg may differ from the reference in its last bits only,
 * because the service adds per-minute and per-hour sums in another order than one pass over
 * the readings does (docs/api.md, "Aggregate precision").
 */
export function expectSameBuckets(actual: Bucket[], expected: Bucket[]): void {
  expect(actual.map((b) => b.time)).toEqual(expected.map((b) => b.time));
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    expect(Object.keys(a.values), a.time).toEqual(Object.keys(e.values));
    for (const [path, f] of Object.entries(e.values)) {
      const g = a.values[path]!;
      expect({ count: g.count, min: g.min, max: g.max }, `${a.time} ${path}`).toEqual({ count: f.count, min: f.min, max: f.max });
      expect(Math.abs(g.avg - f.avg), `${a.time} ${path} avg ${g.avg} vs ${f.avg}`).toBeLessThanOrEqual(Math.abs(f.avg) * 1e-12);
    }
  }
}
