/**
 * Live updates: one EventSource on /ui/api/events for the whole app; pages subscribe per
 * event type. Pages also poll every 15 s (docs/dashboard.md), so a
 * proxy that buffers or drops the stream only delays updates.
 */
type Handler = (data: any) => void;

export class Live {
  private source: EventSource | null = null;
  private handlers = new Map<string, Set<Handler>>();
  connected = false;

  start(): void {
    if (this.source) return;
    const source = new EventSource('/ui/api/events');
    this.source = source;
    for (const type of ['reading', 'rejected', 'device', 'alert']) {
      source.addEventListener(type, (e) => {
        const data = JSON.parse((e as MessageEvent).data);
        for (const fn of this.handlers.get(type) ?? []) fn(data);
      });
    }
    source.onopen = () => (this.connected = true);
    source.onerror = () => (this.connected = false);
  }

  stop(): void {
    this.source?.close();
    this.source = null;
    this.connected = false;
  }

  on(type: string, fn: Handler): () => void {
    const set = this.handlers.get(type) ?? new Set();
    set.add(fn);
    this.handlers.set(type, set);
    return () => set.delete(fn);
  }
}

/** Calls fn at most once per `ms` (trailing), for bursts of readings. */
export function debounce(fn: () => void, ms: number): () => void {
  let timer: number | undefined;
  return () => {
    window.clearTimeout(timer);
    timer = window.setTimeout(fn, ms);
  };
}

export const POLL_MS = 15_000;
