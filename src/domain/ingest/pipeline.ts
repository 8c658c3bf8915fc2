/**
 * The one path a reading takes, from HTTP and MQTT alike (style.md §5):
 *
 *   authorizeDevice → parsePayload → validateData → checkSchema → store → afterStore
 *
 * Authorization comes first so that a refused payload is counted against the device that
 * sent it (decisions.md §4 "rejected MQTT messages").
 *
 * Each step is a named function; transports only adapt their input and map the AppError
 * that comes out (src/http/errors.ts, src/mqtt/broker.ts).
 */
import sjson from 'secure-json-parse';
import { AppError, badRequest, payloadTooLarge } from '../../errors.js';
import type { Clock } from '../../time.js';
import type { PendingReading } from '../../storage/repos/readings.js';
import type { DeviceService } from '../devices.js';
import type { DomainEvents, Transport } from '../events.js';
import type { Account, Device, StoredReading } from '../types.js';

/** Largest HTTP body / MQTT payload accepted (decisions.md §4). */
export const MAX_INGEST_BYTES = 65_536;

export interface ReadingSink {
  append(reading: PendingReading): Promise<number>;
}

/** Called with each committed reading; the alerts issue plugs evaluation in here. */
export type AlertEvaluator = (device: Device, account: Account, reading: StoredReading, data: Record<string, unknown>) => void;

export interface IngestRequest {
  transport: Transport;
  deviceId: unknown;
  /** Access token; omitted when the transport authenticated the session (MQTT CONNECT). */
  token?: unknown;
  /** The reading: a parsed value (HTTP) or the raw payload bytes (MQTT). */
  data: unknown;
}

export function parsePayload(payload: Buffer): unknown {
  if (payload.length > MAX_INGEST_BYTES) throw payloadTooLarge(`payload is ${payload.length} bytes; the limit is ${MAX_INGEST_BYTES}`);
  try {
    // secure-json-parse refuses __proto__ / constructor.prototype keys, as fastify does for HTTP.
    return sjson.parse(payload.toString('utf8'));
  } catch {
    throw badRequest('payload is not valid JSON');
  }
}

/** Deepest nesting of objects/arrays accepted in a reading (docs/reliability.md). */
export const MAX_DATA_DEPTH = 32;

/**
 * Bounds what a reading may hold before it is serialized and stored: nesting deeper than
 * MAX_DATA_DEPTH (JSON.stringify would overflow the stack on thousands of levels: a 500)
 * and numbers that JSON cannot carry back out (1e400 parses to Infinity and would be
 * stored as null) are refused with 400. Iterative, so the check itself cannot overflow.
 */
function checkShape(data: Record<string, unknown>): void {
  const stack: [unknown, number][] = [[data, 1]];
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!;
    if (typeof value === 'number') {
      if (!Number.isFinite(value)) throw badRequest('data holds a number too large to store');
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (depth > MAX_DATA_DEPTH) throw badRequest(`data is nested deeper than ${MAX_DATA_DEPTH} levels`);
    for (const child of Array.isArray(value) ? value : Object.values(value)) stack.push([child, depth + 1]);
  }
}

export function validateData(data: unknown): Record<string, unknown> {
  if (data === undefined) throw badRequest('data is required');
  if (data === null || typeof data !== 'object' || Array.isArray(data)) throw badRequest('data must be a JSON object');
  checkShape(data as Record<string, unknown>);
  return data as Record<string, unknown>;
}

/**
 * Strict mode: every top-level key must be a declared field. Flexible mode: at most the
 * plan's field limit of top-level keys (decisions.md §3-§4).
 */
export function checkSchema(device: Device, account: Account, data: Record<string, unknown>): void {
  const keys = Object.keys(data);
  if (device.schemaMode === 'strict') {
    const declared = new Set(device.fields.map((f) => f.name));
    const unknown = keys.filter((k) => !declared.has(k));
    if (unknown.length > 0) throw badRequest(`unknown fields for strict schema: ${unknown.join(', ')}`);
  } else if (keys.length > account.limits.fieldLimit) {
    throw badRequest(`reading has ${keys.length} fields; the plan allows ${account.limits.fieldLimit}`);
  }
}

export function ingestPipeline(deps: {
  devices: DeviceService;
  sink: ReadingSink;
  events: DomainEvents;
  clock: Clock;
  evaluateAlerts?: AlertEvaluator;
}) {
  const { devices, sink, events, clock } = deps;
  let evaluateAlerts: AlertEvaluator = deps.evaluateAlerts ?? (() => {});

  function authorizeDevice(req: IngestRequest) {
    // A session authenticated at CONNECT (token undefined) is still re-checked, so a pause,
    // suspension or deletion made elsewhere stops data at once, before the connection closes.
    return req.token === undefined ? devices.authorizeSession(req.deviceId) : devices.authenticate(req.deviceId, req.token);
  }

  async function store(device: Device, data: Record<string, unknown>): Promise<StoredReading> {
    const reading = { deviceSeq: device.seq, time: clock.now(), data: JSON.stringify(data) };
    const seq = await sink.append(reading);
    return { seq, ...reading };
  }

  function afterStore(device: Device, account: Account, reading: StoredReading, data: Record<string, unknown>, transport: Transport) {
    try {
      evaluateAlerts(device, account, reading, data);
    } catch {
      // Alert evaluation must never turn a committed reading into an error.
    }
    events.emit('reading.stored', { device, reading, parsed: data, transport });
  }

  return {
    /** Stores one reading and resolves once it is committed; throws an AppError otherwise. */
    async ingestReading(req: IngestRequest): Promise<StoredReading> {
      const { device, account } = authorizeDevice(req);
      let data: Record<string, unknown>;
      try {
        data = validateData(Buffer.isBuffer(req.data) ? parsePayload(req.data) : req.data);
        checkSchema(device, account, data);
      } catch (err) {
        if (err instanceof AppError && err.permanent) {
          devices.recordRejection(device, err.message);
          events.emit('reading.rejected', { device, reason: err.message, transport: req.transport });
        }
        throw err;
      }
      const reading = await store(device, data);
      afterStore(device, account, reading, data, req.transport);
      return reading;
    },

    /** A permanent rejection seen by a transport before the pipeline (e.g. unparsable MQTT payload). */
    recordRejection(device: Device, reason: string, transport: Transport) {
      devices.recordRejection(device, reason);
      events.emit('reading.rejected', { device, reason, transport });
    },

    setAlertEvaluator(fn: AlertEvaluator) {
      evaluateAlerts = fn;
    },
  };
}

export type IngestPipeline = ReturnType<typeof ingestPipeline>;
