/**
 * Log lines for a person at a terminal. The server logs JSON lines (pino, through fastify),
 * which is what log collectors want; on a terminal each line is rewritten as
 * `HH:MM:SS.mmm LEVEL message method url status time key=value…`, with an error's stack
 * indented below it. A line that is not JSON passes through unchanged.
 */
const LEVEL_NAMES: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
/** pino's bookkeeping fields, said once per process or not at all on a terminal. */
const OMITTED = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'err', 'req', 'res', 'responseTime', 'reqId']);

const text = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));

function readableLogLine(line: string): string {
  let entry: Record<string, unknown>;
  try {
    entry = JSON.parse(line);
  } catch {
    return line;
  }
  if (!entry || typeof entry !== 'object') return line;
  const time = typeof entry.time === 'number' ? new Date(entry.time).toISOString().slice(11, 23) : '';
  const level = LEVEL_NAMES[entry.level as number] ?? String(entry.level ?? '');
  const parts = [time, level.padEnd(5), text(entry.msg ?? '')];
  const req = entry.req as { method?: string; url?: string } | undefined;
  if (req?.method) parts.push(`${req.method} ${req.url ?? ''}`);
  const res = entry.res as { statusCode?: number } | undefined;
  if (res?.statusCode !== undefined) parts.push(String(res.statusCode));
  if (typeof entry.responseTime === 'number') parts.push(`${entry.responseTime.toFixed(1)} ms`);
  for (const [key, value] of Object.entries(entry)) if (!OMITTED.has(key)) parts.push(`${key}=${text(value)}`);
  const err = entry.err as { stack?: string; message?: string } | undefined;
  const stack = err ? `\n    ${(err.stack ?? err.message ?? text(err)).split('\n').join('\n    ')}` : '';
  return `${parts.join(' ')}${stack}\n`;
}

/** A pino destination that writes readable lines to `out`. */
export function readableLogStream(out: { write(chunk: string): unknown }) {
  return { write: (line: string) => out.write(readableLogLine(line)) };
}
