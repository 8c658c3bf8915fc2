import { type JsonScan, parseJsonRefusingProto, scanJson } from '../jsonText.js';

/**
 * Deepest nesting accepted in any JSON request body. JSON.parse copes with any depth, but
 * code that walks the result recursively (JSON.stringify, String(), template literals on
 * arrays) overflows the stack on thousands of levels: a 500 from one small request. Bodies
 * are refused at parse time instead (docs/reliability.md "Bad input").
 */
const MAX_BODY_DEPTH = 64;

/** How every error about a request body that is not acceptable JSON begins. */
const JSON_BODY_ERROR = 'invalid JSON body: ';

/**
 * Parses a request body: refuses `__proto__` / `constructor.prototype` keys (prototype
 * poisoning, as fastify's own parser does) and nesting deeper than MAX_BODY_DEPTH. Errors
 * carry statusCode 400 for the error handler.
 */
export function parseJsonBody(text: string): unknown {
  return parseScanned(text, scanJson(text));
}

/** An HTTP ingest body: its parsed value, and the text its `data` member was spelled with. */
export interface IngestBody {
  value: unknown;
  /** See JsonScan.memberText; the pipeline stores it as sent when it holds the parsed data. */
  dataText: string | undefined;
}

/** parseJsonBody for the ingest route, which also keeps the `data` member's text (one scan for both). */
export function parseIngestBody(text: string): IngestBody {
  const scan = scanJson(text, 'data');
  return { value: parseScanned(text, scan), dataText: scan.memberText };
}

function parseScanned(text: string, scan: JsonScan): unknown {
  if (scan.depth > MAX_BODY_DEPTH)
    throw Object.assign(new Error(`${JSON_BODY_ERROR}nested deeper than ${MAX_BODY_DEPTH} levels`), { statusCode: 400 });
  try {
    return parseJsonRefusingProto(text);
  } catch (err) {
    throw Object.assign(new Error(`${JSON_BODY_ERROR}${(err as Error).message}`), { statusCode: 400 });
  }
}
