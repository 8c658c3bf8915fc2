/**
 * The one path a reading takes, from HTTP and MQTT alike (docs/architecture.md, "The path of a reading"):
 *
 *   authorizeDevice → data → checkSchema → (storage gate) → store → afterStore
 *
 * where the data step is, for a raw payload (MQTT), payloadText → parsePayloadText →
 * requireObject → checkShape, and for data already parsed (the HTTP body), requireObject →
 * checkShape.
 *
 * Authorization comes first so that a refused payload is counted against the device that
 * sent it (its rejected count and last reason, shown by `devices list` and the dashboard).
 *
 * Each step is a named function; transports only adapt their input and map the AppError
 * that comes out (src/http/errors.ts, src/mqtt/broker.ts).
 */
import { AppError, badRequest, payloadTooLarge } from '../../errors.js';
import { parseJsonRefusingProto } from '../../jsonText.js';
import { isPromise, type PendingReading } from '../../storage/repositories.js';
import type { Clock } from '../../time.js';
import type { Authenticated, DeviceService } from '../devices.js';
import type { DomainEvents, Transport } from '../events.js';
import type { StorageFailure } from '../storageStatus.js';
import type { Account, Device, StoredReading } from '../types.js';

/** Largest HTTP body / MQTT payload accepted (docs/api.md, "Payload limits"). */
export const MAX_INGEST_BYTES = 65_536;

export interface ReadingSink {
  append(reading: PendingReading): Promise<number>;
}

/** Refuses readings while storage cannot take them (../storageStatus.ts). */
export interface WriteGate {
  /** Non-null while new readings are refused; read once per reading. */
  readonly readingsRefusal: StorageFailure | null;
  /** The refusal to answer with (counted and logged by the gate). */
  refuseReading(): Error;
}

/**
 * Called with each committed reading; alert evaluation plugs in here. A promise only while
 * it reads from an asynchronous backend; its failure never reaches the reading's caller.
 */
export type AlertEvaluator = (
  device: Device,
  account: Account,
  reading: StoredReading,
  data: Record<string, unknown>,
) => void | Promise<void>;

export interface IngestRequest {
  transport: Transport;
  deviceId: unknown;
  /** Access token; omitted when the transport authenticated the session (MQTT CONNECT). */
  token?: unknown;
  /** The reading: a parsed value (HTTP) or the raw payload bytes (MQTT). */
  data: unknown;
  /**
   * The JSON text a parsed `data` was read from, when the transport kept it (the HTTP body's
   * `data` member): stored as sent, like an MQTT payload, when it spells each key once.
   */
  dataText?: string;
  /** Hash of the token the session authenticated with (MQTT CONNECT): the device must still have it. */
  sessionTokenHash?: string;
}

/** The payload as text, refused when larger than MAX_INGEST_BYTES. */
function payloadText(payload: Buffer): string {
  if (payload.length > MAX_INGEST_BYTES) throw payloadTooLarge(`payload is ${payload.length} bytes; the limit is ${MAX_INGEST_BYTES}`);
  return payload.toString('utf8');
}

function parsePayloadText(text: string): unknown {
  try {
    // __proto__ / constructor.prototype keys are refused, as fastify does for HTTP.
    return parseJsonRefusingProto(text);
  } catch {
    throw badRequest('payload is not valid JSON');
  }
}

/** Deepest nesting of objects/arrays accepted in a reading (docs/api.md, "Payload limits"). */
const MAX_DATA_DEPTH = 32;

/**
 * Bounds what a reading may hold before it is serialized and stored: nesting deeper than
 * MAX_DATA_DEPTH (JSON.stringify would overflow the stack on thousands of levels: a 500)
 * and numbers that JSON cannot carry back out (1e400 parses to Infinity and would be
 * stored as null) are refused with 400. Iterative, so the check itself cannot overflow.
 * Returns the number of object keys at all levels (see store()).
 */
function checkShape(data: Record<string, unknown>): number {
  let keys = 0;
  // Two parallel stacks of containers still to look into (no tuple per value: the common
  // reading is a flat object of numbers, checked without allocating).
  const containers: object[] = [data];
  const depths: number[] = [1];
  while (containers.length > 0) {
    const container = containers.pop() as Record<string, unknown>;
    const depth = depths.pop()!;
    if (depth > MAX_DATA_DEPTH) throw badRequest(`data is nested deeper than ${MAX_DATA_DEPTH} levels`);
    const values = Array.isArray(container) ? container : Object.values(container);
    if (!Array.isArray(container)) keys += values.length;
    for (let i = 0; i < values.length; i++) {
      const value = values[i];
      if (typeof value === 'number') {
        if (!Number.isFinite(value)) throw badRequest('data holds a number too large to store');
      } else if (value !== null && typeof value === 'object') {
        containers.push(value);
        depths.push(depth + 1);
      }
    }
  }
  return keys;
}

/**
 * Whether `text`, which parsed to an object with `keys` keys at all levels, spells each key
 * exactly once. The text's keys are at least `keys` (a duplicate collapses when parsed) and
 * each is followed by its own colon, so a text with exactly `keys` colons anywhere has no
 * duplicate key (and no colon inside a string): it holds the parsed object and nothing else.
 * Counted with native indexOf; any other text is re-serialized, the safe direction.
 */
function spellsEachKeyOnce(text: string, keys: number): boolean {
  let colons = 0;
  for (let i = text.indexOf(':'); i !== -1; i = text.indexOf(':', i + 1)) if (++colons > keys) return false;
  return colons === keys;
}

function requireObject(data: unknown): Record<string, unknown> {
  if (data === undefined) throw badRequest('data is required');
  if (data === null || typeof data !== 'object' || Array.isArray(data)) throw badRequest('data must be a JSON object');
  return data as Record<string, unknown>;
}

interface StrictSchema {
  declared: ReadonlySet<string>;
  /** The leading parts of the dotted names (`env` of `env.humidity`): objects to look into. */
  parents: ReadonlySet<string>;
}

const strictSchemas = new WeakMap<readonly { name: string }[], StrictSchema>();

/** A device's declared names as the strict check reads them, made once per fields list. */
function strictSchemaOf(fields: readonly { name: string }[]): StrictSchema {
  let schema = strictSchemas.get(fields);
  if (schema === undefined) {
    const parents = new Set<string>();
    for (const { name } of fields) for (let i = name.indexOf('.'); i > 0; i = name.indexOf('.', i + 1)) parents.add(name.slice(0, i));
    schema = { declared: new Set(fields.map((f) => f.name)), parents };
    strictSchemas.set(fields, schema);
  }
  return schema;
}

/**
 * The paths of `data` a strict device did not declare. A key passes when it is a declared
 * name (whatever it holds), or when it holds an object and leads a declared dotted name:
 * `{"env": {"humidity": 40}}` for a declared `env.humidity`, whose other keys are checked the
 * same way. A literal `"env.humidity"` key is a declared name too.
 */
function undeclaredPaths(data: Record<string, unknown>, schema: StrictSchema, prefix = '', out: string[] = []): string[] {
  for (const key of Object.keys(data)) {
    const path = prefix + key;
    if (schema.declared.has(path)) continue;
    const value = data[key];
    if (schema.parents.has(path) && value !== null && typeof value === 'object' && !Array.isArray(value)) {
      undeclaredPaths(value as Record<string, unknown>, schema, `${path}.`, out);
    } else out.push(path);
  }
  return out;
}

/**
 * Strict mode: every key must be a declared field, or lead to one (undeclaredPaths). Flexible
 * mode: at most the plan's field limit of top-level keys (docs/api.md, "Schema modes").
 */
function checkSchema(device: Device, account: Account, data: Record<string, unknown>): void {
  if (device.schemaMode === 'strict') {
    const unknown = undeclaredPaths(data, strictSchemaOf(device.fields));
    if (unknown.length > 0) throw badRequest(`unknown fields for strict schema: ${unknown.join(', ')}`);
    return;
  }
  const keys = Object.keys(data).length;
  if (keys > account.limits.fieldLimit) throw badRequest(`reading has ${keys} fields; the plan allows ${account.limits.fieldLimit}`);
}

export function ingestPipeline(deps: {
  devices: DeviceService;
  sink: ReadingSink;
  events: DomainEvents;
  clock: Clock;
  evaluateAlerts?: AlertEvaluator;
  gate?: WriteGate;
}) {
  const { devices, sink, events, clock } = deps;
  const gate: WriteGate = deps.gate ?? { readingsRefusal: null, refuseReading: () => new Error('unreachable') };
  const evaluateAlerts: AlertEvaluator = deps.evaluateAlerts ?? (() => {});

  function authorizeDevice(req: IngestRequest) {
    // A session authenticated at CONNECT (token undefined) is still re-checked, so a pause,
    // suspension, deletion or new token made elsewhere stops data at once, before the
    // connection closes.
    return req.token === undefined
      ? devices.authorizeSession(req.deviceId, req.sessionTokenHash)
      : devices.authenticate(req.deviceId, req.token);
  }

  /**
   * Appends the reading to the writer and, once committed, runs afterStore.
   * `text`, when given, is the JSON text `data` was parsed from (an MQTT payload, or the
   * `data` member of an HTTP body): it is stored as sent instead of re-serializing the parsed
   * object, whose JSON.stringify was a measurable share of ingest CPU (BENCHMARKS.md, "Design
   * decisions"). It is valid JSON of the same object (it
   * parsed to `data`, which requireObject and checkShape accepted); only whitespace, number
   * spelling (1.50 vs 1.5) and escapes may differ, and every reader JSON.parses it.
   * Duplicate keys are the one way the text could hold more than the object (JSON.parse
   * keeps the last, and the hidden value escaped checkShape): such a text is re-serialized
   * (spellsEachKeyOnce), so what is stored, and spliced into history responses, is the
   * object that was validated.
   */
  function store(
    device: Device,
    account: Account,
    data: Record<string, unknown>,
    transport: Transport,
    text?: string,
  ): Promise<StoredReading> {
    const time = clock.now();
    const json = text ?? JSON.stringify(data);
    // One continuation for the commit and what follows it: each further .then is a promise
    // and a closure more per reading on the MQTT hot path.
    return sink.append({ deviceSeq: device.seq, accountSeq: device.accountSeq, time, data: json, parsed: data }).then((seq) => {
      const reading: StoredReading = { seq, deviceSeq: device.seq, time, data: json };
      const evaluated = afterStore(device, account, reading, data, transport);
      return evaluated === undefined ? reading : evaluated.then(() => reading);
    });
  }

  /**
   * Alert evaluation and the stored event. A promise only when the answer must wait: the
   * reading changed an alert whose trigger or resolution is still being recorded, or an
   * asynchronous backend is reading the device's alerts; the reading is answered after that,
   * so its alert history is there when it is. Evaluation never turns a committed reading
   * into an error.
   */
  function afterStore(
    device: Device,
    account: Account,
    reading: StoredReading,
    data: Record<string, unknown>,
    transport: Transport,
  ): Promise<unknown> | undefined {
    let evaluating: void | Promise<void>;
    try {
      evaluating = evaluateAlerts(device, account, reading, data);
    } catch {
      evaluating = undefined;
    }
    events.emit('reading.stored', { device, reading, parsed: data, transport });
    return evaluating === undefined ? undefined : evaluating.catch(() => {});
  }

  /**
   * ingestReading's steps; the checks before the commit throw. The device and its account
   * come from the cache, synchronously on SQLite and on any hit: only a lookup that is a
   * promise (an asynchronous backend's miss) is waited for, so the writer's append stays the
   * one promise per reading.
   */
  function ingestNow(req: IngestRequest): Promise<StoredReading> {
    const authorized = authorizeDevice(req);
    if (isPromise(authorized)) return authorized.then((a) => ingestAuthorized(req, a));
    return ingestAuthorized(req, authorized);
  }

  function ingestAuthorized(req: IngestRequest, { device, account }: Authenticated): Promise<StoredReading> {
    let data: Record<string, unknown>;
    let text: string | undefined;
    try {
      if (Buffer.isBuffer(req.data)) {
        const payload = payloadText(req.data);
        data = requireObject(parsePayloadText(payload));
        if (spellsEachKeyOnce(payload, checkShape(data))) text = payload;
      } else {
        data = requireObject(req.data);
        const keys = checkShape(data);
        if (req.dataText !== undefined && spellsEachKeyOnce(req.dataText, keys)) text = req.dataText;
      }
      checkSchema(device, account, data);
    } catch (err) {
      if (err instanceof AppError && err.permanent) {
        // Counted off the answer's path; a failure to count changes nothing for the device.
        devices.recordRejection(device, err.message).catch(() => {});
        events.emit('reading.rejected', { device, reason: err.message, transport: req.transport });
      }
      throw err;
    }
    // Low disk space: refused before the database is touched. A bad reading was refused for
    // good above, so the device does not resend it.
    if (gate.readingsRefusal !== null) throw gate.refuseReading();
    return store(device, account, data, req.transport, text);
  }

  return {
    /**
     * Stores one reading and resolves once it is committed; rejects with an AppError otherwise,
     * never throws (the MQTT hook chains on the promise). Not an async function: its own
     * promise and the await's extra turn would be one more promise per reading than the
     * writer's, on the MQTT hot path.
     */
    ingestReading(req: IngestRequest): Promise<StoredReading> {
      try {
        return ingestNow(req);
      } catch (err) {
        return Promise.reject(err);
      }
    },

    /**
     * A permanent rejection a transport saw before the pipeline could (an MQTT packet too
     * large to buffer), counted against the device like any other. A device that is gone or
     * no longer allowed, or a database that cannot write, is ignored: the connection ends
     * all the same.
     */
    async recordTransportRejection(deviceId: string, reason: string, transport: Transport): Promise<void> {
      try {
        const { device } = await devices.authorizeSession(deviceId);
        await devices.recordRejection(device, reason);
        events.emit('reading.rejected', { device, reason, transport });
      } catch {
        // nothing to count against
      }
    },
  };
}
