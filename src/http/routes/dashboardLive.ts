import { once } from 'node:events';
import { PassThrough, Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Services } from '../../composition.js';
import { presentAlertEvent, presentReading } from '../../domain/presenters.js';
import { capRangeToRetention, rangeMs } from '../../domain/telemetry.js';
import type { Account, Device, StoredReading } from '../../domain/types.js';
import { badRequest } from '../../errors.js';
import { iso } from '../../time.js';
import { parseCookies, SESSION_COOKIE } from '../dashboardSession.js';
import { parseRange } from './dashboardApi.js';

const CHUNK = 1000;
const HEARTBEAT_MS = 15_000;

/**
 * Readings of [since, until) oldest first, in chunks. Each chunk is read with its own
 * statement that is closed before the chunk is handed out: a better-sqlite3 iterator keeps
 * the connection busy, so one must never stay open across event-loop turns (ingest commits
 * in between). The next chunk resumes at the last time seen, skipping rows already sent.
 */
export async function* readingChunks(
  services: Services,
  account: Account,
  device: Device,
  since: number,
  until: number,
): AsyncGenerator<StoredReading[]> {
  let cursor = since;
  let sentAtCursor = new Set<number>();
  for (;;) {
    const chunk: StoredReading[] = [];
    /** Takes a row unless it was sent already; false once the chunk is full. */
    const take = (r: StoredReading) => {
      if (!(r.time === cursor && sentAtCursor.has(r.seq))) chunk.push(r);
      return chunk.length < CHUNK;
    };
    const rows = services.telemetry.iterateRange(account, device, cursor, until);
    // A synchronous iterator (SQLite) is read without an await per row; leaving the loop closes the statement.
    if (Symbol.iterator in rows) {
      for (const r of rows) if (!take(r)) break;
    } else {
      for await (const r of rows) if (!take(r)) break;
    }
    if (chunk.length === 0) return;
    yield chunk;
    if (chunk.length < CHUNK) return;
    const last = chunk[chunk.length - 1]!.time;
    if (last !== cursor) {
      cursor = last;
      sentAtCursor = new Set();
    }
    for (const r of chunk) if (r.time === cursor) sentAtCursor.add(r.seq);
  }
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * A reading's values by dotted path: nested objects are walked (`{"env":{"humidity":39}}`
 * gives the column `env.humidity`), arrays and empty objects stay whole (written as JSON
 * text). A key that itself holds a dot shares its column with the nested path it spells.
 */
function flattenReading(data: Record<string, unknown>, prefix = '', out = new Map<string, unknown>()): Map<string, unknown> {
  for (const key of Object.keys(data)) {
    const v = data[key];
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length > 0)
      flattenReading(v as Record<string, unknown>, `${prefix}${key}.`, out);
    else out.set(prefix + key, v);
  }
  return out;
}

/** Export columns: declared fields first (an object-valued one by its nested paths), then the rest in order seen. */
function exportColumns(declared: string[], seen: Iterable<string>): string[] {
  const paths = [...seen];
  const all = [...new Set([...declared.filter((name) => !paths.some((p) => p.startsWith(`${name}.`))), ...paths])];
  const rank = (p: string) => {
    const i = declared.findIndex((name) => p === name || p.startsWith(`${name}.`));
    return i < 0 ? declared.length : i;
  };
  return all
    .map((p, i) => [p, i] as const)
    .sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1])
    .map(([p]) => p);
}

/** A cell value: numbers, strings and booleans as they are, arrays (and empty objects) as JSON text. */
function cellValue(v: unknown): string | number | boolean | null {
  if (v === undefined || v === null) return null;
  if (typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean') return v;
  return JSON.stringify(v);
}

function csvCell(v: unknown): string {
  const value = cellValue(v);
  if (value === null) return '';
  let text = String(value);
  // A text cell starting with = + - @ would run as a formula in a spreadsheet (CSV injection).
  if (typeof value === 'string' && /^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/**
 * Exports of a device's readings over a range (docs/dashboard.md): one column per field path,
 * time in ISO 8601. A first pass collects the column names (only the key set is held), the
 * second streams rows, so a 30-day export never holds the readings in memory.
 */
export async function dashboardLiveRoutes(app: FastifyInstance, { services }: { services: Services }) {
  const streams = new Set<() => void>();
  app.addHook('preClose', async () => {
    for (const end of [...streams]) end();
  });

  app.get<{ Params: { id: string }; Querystring: { range?: string; format?: string } }>('/devices/:id/export', async (request, reply) => {
    const account = request.dashboard!.account;
    const device = await services.devices.getOwnedForReading(account, request.params.id);
    const format = request.query.format ?? 'csv';
    if (format !== 'csv' && format !== 'xlsx') throw badRequest('format must be csv or xlsx');
    const range = capRangeToRetention(parseRange(request.query.range), account.limits.retentionDays);
    const until = services.clock.now() + 1;
    const since = until - 1 - rangeMs(range);

    const seen = new Set<string>();
    for await (const chunk of readingChunks(services, account, device, since, until)) {
      for (const r of chunk) for (const path of flattenReading(JSON.parse(r.data) as Record<string, unknown>).keys()) seen.add(path);
    }
    const columns = exportColumns(
      device.fields.map((f) => f.name),
      seen,
    );
    const rows = async function* () {
      for await (const chunk of readingChunks(services, account, device, since, until)) {
        yield chunk.map((r) => {
          const data = flattenReading(JSON.parse(r.data) as Record<string, unknown>);
          return [iso(r.time), ...columns.map((c) => data.get(c))] as unknown[];
        });
        await nextTurn();
      }
    };
    const filename = `${device.id}-${range}`;
    reply.header('Cache-Control', 'no-store');

    if (format === 'csv') {
      reply.header('Content-Type', 'text/csv; charset=utf-8').header('Content-Disposition', `attachment; filename="${filename}.csv"`);
      const lines = async function* () {
        yield `${['time', ...columns].map(csvCell).join(',')}\r\n`;
        for await (const batch of rows()) yield `${batch.map((row) => row.map(csvCell).join(',')).join('\r\n')}\r\n`;
      };
      return reply.send(Readable.from(lines()));
    }

    reply
      .header('Content-Type', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet')
      .header('Content-Disposition', `attachment; filename="${filename}.xlsx"`);
    const out = new PassThrough();
    // Loaded on first export: exceljs is the heaviest module, and start-up time and idle
    // memory matter more on a Pi than the first export's few milliseconds.
    const { default: ExcelJS } = await import('exceljs');
    const workbook = new ExcelJS.stream.xlsx.WorkbookWriter({ stream: out, useStyles: false, useSharedStrings: false });
    const sheet = workbook.addWorksheet('readings');
    sheet.columns = [
      { header: 'time', key: 'time', width: 26 },
      ...columns.map((c) => ({ header: c, key: c, width: Math.max(10, c.length + 2) })),
    ];
    void (async () => {
      try {
        for await (const batch of rows()) {
          for (const row of batch) sheet.addRow(row.map((v, i) => (i === 0 ? v : cellValue(v)))).commit();
          if (out.writableNeedDrain) await once(out, 'drain');
        }
        sheet.commit();
        await workbook.commit();
      } catch (err) {
        request.log.error({ err }, 'xlsx export failed');
        out.destroy(err as Error);
      }
    })();
    return reply.send(out);
  });

  /**
   * Live updates for the signed-in account (docs/dashboard.md): server-sent events on every stored
   * or rejected reading of its devices, device changes and alert triggers. The page also polls
   * every 15 s, so a dropped stream only delays updates.
   */
  app.get('/events', async (request: FastifyRequest, reply: FastifyReply) => {
    const account = request.dashboard!.account;
    const sessionId = parseCookies(request.headers.cookie)[SESSION_COOKIE];
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
      'X-Content-Type-Options': 'nosniff',
      'X-Accel-Buffering': 'no',
    });
    res.write('retry: 5000\n\n');
    const send = (event: string, data: unknown) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    /**
     * The account's device ids as of the last look, to tell which ones another process
     * deleted: its commits reach this process only as 'external.change' (SQLite's
     * data_version, PostgreSQL's notifications), which says nothing of what changed. One look
     * at a time; changes during a look are covered by one more look after it. A device
     * created here after the last look and deleted elsewhere before the next change is only
     * noticed by the page's 15 s poll.
     */
    let known: Set<string> | null = null;
    let looking = false;
    let lookAgain = false;
    async function checkRemovedElsewhere(): Promise<void> {
      if (looking) {
        lookAgain = true;
        return;
      }
      looking = true;
      try {
        do {
          lookAgain = false;
          const { devices } = await services.devices.list(account, { limit: 100_000, offset: 0 });
          const ids = new Set(devices.map((d) => d.id));
          if (res.writableEnded) return;
          for (const id of known ?? []) if (!ids.has(id)) send('device', { device_id: id, change: 'deleted' });
          known = ids;
        } while (lookAgain);
      } catch {
        // The next change looks again; the page's poll notices meanwhile.
      } finally {
        looking = false;
      }
    }
    void checkRemovedElsewhere();
    const unsubscribe = [
      services.events.on('reading.stored', ({ device, reading }) => {
        if (device.accountSeq === account.seq) send('reading', { device_id: device.id, reading: presentReading(reading) });
      }),
      // Readings committed by other nodes of a cluster (docs/cluster.md), fetched while this view is open.
      services.cluster.followReadings(account.seq),
      services.events.on('reading.storedElsewhere', ({ deviceId, accountSeq, reading }) => {
        if (accountSeq === account.seq) send('reading', { device_id: deviceId, reading: presentReading(reading) });
      }),
      services.events.on('reading.rejected', ({ device, reason }) => {
        if (device.accountSeq === account.seq) send('rejected', { device_id: device.id, reason });
      }),
      // A deletion is told once the row is gone (device.removed), so a page that reloads on it
      // no longer finds the device; its 'deleted' change comes while the data is still going.
      services.events.on('device.changed', ({ deviceId, change }) => {
        if (change === 'deleted') return;
        services.devices.isOwnedBy(account, deviceId).then(
          (owned) => {
            if (owned && !res.writableEnded) send('device', { device_id: deviceId, change });
          },
          () => {},
        );
      }),
      services.events.on('device.removed', ({ deviceId, accountSeq }) => {
        if (accountSeq !== account.seq) return;
        known?.delete(deviceId);
        send('device', { device_id: deviceId, change: 'deleted' });
      }),
      // Deleted by another process (the admin CLI; on PostgreSQL also another node).
      services.events.on('external.change', () => checkRemovedElsewhere()),
      services.events.on('alert.triggered', ({ alert, event }) => {
        if (alert.accountSeq === account.seq) send('alert', { alert_id: alert.id, event: presentAlertEvent(event) });
      }),
      services.events.on('alert.resolved', ({ alert, event }) => {
        if (alert.accountSeq === account.seq) send('alert', { alert_id: alert.id, event: presentAlertEvent(event) });
      }),
    ];
    // The heartbeat also re-checks the session: a signed-out session stops receiving data.
    // A database error here must not escape the timer (an uncaught exception ends the
    // process): the stream ends and the browser's EventSource reconnects.
    const heartbeat = setInterval(() => {
      services.sessions.resolve(sessionId).then(
        (resolved) => {
          if (resolved === null) end();
          else if (!res.writableEnded) res.write(': ping\n\n');
        },
        () => end(),
      );
    }, HEARTBEAT_MS);
    function end() {
      clearInterval(heartbeat);
      for (const off of unsubscribe) off();
      streams.delete(end);
      if (!res.writableEnded) res.end();
    }
    streams.add(end);
    request.raw.on('close', end);
  });
}
