import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Counter, Gauge, type Metric, Registry } from 'prom-client';
import type { Services } from '../composition.js';
import { STORAGE_FAILURE_KINDS } from '../domain/storageStatus.js';

/**
 * Prometheus metrics (docs/operations.md, "Metrics"). One registry per server (tests run
 * several servers in one process; prom-client's global registry would mix them).
 * Counters follow the domain events, so HTTP and MQTT ingest are counted at the one place a
 * reading is stored or refused (the ingest pipeline); gauges are read at scrape time.
 */
export interface MetricsSources {
  /** Open MQTT connections; absent while no broker runs. */
  mqttConnections?: () => number;
  /** Whether this process runs the background jobs (docs/cluster.md, "Once per cluster"). */
  leadsJobs?: () => boolean;
}

export function createMetrics(services: Services, sources: MetricsSources = {}) {
  const registry = new Registry();
  // Counted per reading in plain numbers and handed to prom-client at scrape: its inc()
  // hashes and validates the label object on every call.
  const stored: Record<'http' | 'mqtt', number> = { http: 0, mqtt: 0 };
  new Counter({
    name: 'telemetryd_ingest_readings_total',
    help: 'Readings stored, by transport',
    labelNames: ['transport'],
    registers: [registry],
    collect() {
      this.reset();
      for (const transport of ['http', 'mqtt'] as const) this.inc({ transport }, stored[transport]);
    },
  });
  const rejected = new Counter({
    name: 'telemetryd_ingest_rejected_total',
    help: 'Readings refused for good (not JSON, not an object, schema, too large), by transport',
    labelNames: ['transport'],
    registers: [registry],
  });
  const latency = new RequestLatency(
    'telemetryd_http_request_duration_seconds',
    'HTTP request latency, by method, route pattern and status class',
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  );
  registry.registerMetric(latency as unknown as Metric);
  // Both transports show up from the first scrape, at 0.
  for (const t of ['http', 'mqtt']) rejected.inc({ transport: t }, 0);
  const storage = services.storageStatus;
  new Gauge({
    name: 'telemetryd_database_size_bytes',
    help: 'Size of the database (SQLite: pages in use times page size, the WAL not counted; PostgreSQL: pg_database_size, read every 10 s)',
    registers: [registry],
    collect() {
      this.set(storage.databaseSizeBytes());
    },
  });
  new Gauge({
    name: 'telemetryd_writer_queue_depth',
    help: 'Readings waiting for the next group commit',
    registers: [registry],
    collect() {
      this.set(storage.writerQueue().depth);
    },
  });
  new Gauge({
    name: 'telemetryd_writer_max_batch',
    help: 'Largest group commit so far (readings in one transaction)',
    registers: [registry],
    collect() {
      this.set(storage.writerQueue().maxBatch);
    },
  });
  new Counter({
    name: 'telemetryd_writer_commits_total',
    help: 'Group commits of readings; telemetryd_ingest_readings_total divided by it is the readings per commit',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(storage.writerQueue().commits);
    },
  });
  new Gauge({
    name: 'telemetryd_storage_free_bytes',
    help: 'Free disk space as last checked (once a second), by directory: data (the database) and snapshots',
    labelNames: ['dir'],
    registers: [registry],
    collect() {
      const { freeBytes } = storage.report();
      if (freeBytes.database !== null) this.set({ dir: 'data' }, freeBytes.database);
      if (freeBytes.snapshots !== null) this.set({ dir: 'snapshots' }, freeBytes.snapshots);
    },
  });
  new Gauge({
    name: 'telemetryd_storage_writable',
    help: '1 while storage takes writes, 0 while they are refused (see /healthz for the reason)',
    registers: [registry],
    collect() {
      this.set(storage.report().writable ? 1 : 0);
    },
  });
  const refusedWrites = new Counter({
    name: 'telemetryd_storage_refused_writes_total',
    help: `Readings and snapshots refused because storage could not take them, by reason (${STORAGE_FAILURE_KINDS.join(', ')})`,
    labelNames: ['reason'],
    registers: [registry],
  });
  for (const reason of STORAGE_FAILURE_KINDS) refusedWrites.inc({ reason }, 0);
  new Gauge({
    name: 'telemetryd_mqtt_connections',
    help: 'Open MQTT client connections (TLS and plain)',
    registers: [registry],
    collect() {
      this.set(sources.mqttConnections?.() ?? 0);
    },
  });
  new Gauge({
    name: 'telemetryd_background_jobs_leader',
    help: '1 while this node runs the background jobs (retention, rollups, silence checks); always 1 on SQLite',
    registers: [registry],
    collect() {
      this.set(sources.leadsJobs?.() ? 1 : 0);
    },
  });

  const unsubscribe = [
    services.events.on('reading.stored', ({ transport }) => {
      stored[transport ?? 'http']++;
    }),
    services.events.on('reading.rejected', ({ transport }) => rejected.inc({ transport })),
    services.events.on('storage.refused', ({ kind, count }) => refusedWrites.inc({ reason: kind }, count)),
  ];

  return {
    registry,
    sources,
    observeRequest(method: string, route: string, statusCode: number, seconds: number) {
      latency.observe(method, route, statusCode, seconds);
    },
    close: () => {
      for (const off of unsubscribe) off();
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

interface LatencySeries {
  labels: { method: string; route: string; status: string };
  /** Observations per bucket (not cumulative); the last slot is above the largest bound. */
  counts: number[];
  sum: number;
  count: number;
}

/**
 * The request-latency histogram, recorded on every HTTP request. prom-client's Histogram
 * builds, validates and hashes a label object per observation, a measurable share of HTTP
 * ingest CPU (BENCHMARKS.md, "Design decisions"); this keeps one series per method/route/status class
 * under a string key and renders the same exposition (cumulative `_bucket` with `le`,
 * `+Inf`, `_sum`, `_count`) only when scraped, through prom-client's registry.
 */
class RequestLatency {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, LatencySeries>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly bounds: number[],
  ) {}

  observe(method: string, route: string, statusCode: number, seconds: number): void {
    const status = `${Math.floor(statusCode / 100)}xx`;
    const key = `${method} ${status} ${route}`;
    let s = this.series.get(key);
    if (s === undefined) {
      s = { labels: { method, route, status }, counts: new Array<number>(this.bounds.length + 1).fill(0), sum: 0, count: 0 };
      this.series.set(key, s);
    }
    let i = 0;
    while (i < this.bounds.length && seconds > this.bounds[i]) i++;
    s.counts[i]++;
    s.sum += seconds;
    s.count++;
  }

  /** prom-client's metric interface: what the registry renders. */
  async get() {
    const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
    for (const s of this.series.values()) {
      let acc = 0;
      this.bounds.forEach((le, i) => {
        acc += s.counts[i];
        values.push({ metricName: `${this.name}_bucket`, labels: { ...s.labels, le }, value: acc });
      });
      values.push({ metricName: `${this.name}_bucket`, labels: { ...s.labels, le: '+Inf' }, value: s.count });
      values.push({ metricName: `${this.name}_sum`, labels: s.labels, value: s.sum });
      values.push({ metricName: `${this.name}_count`, labels: s.labels, value: s.count });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset(): void {
    this.series.clear();
  }
}

/** Loopback peers only: 127.0.0.0/8, ::1 and their IPv4-mapped forms. */
export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  const a = address.startsWith('::ffff:') ? address.slice(7) : address;
  return a === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(a);
}

/**
 * Who may scrape: a direct connection from this machine. A request that came through a
 * reverse proxy (Forwarded / X-Forwarded-For / X-Real-IP present) is refused even though
 * the proxy connects from loopback, so publishing the dashboard through nginx does not
 * publish /metrics. Anyone else gets the same 404 as an unknown route.
 */
function mayScrape(request: FastifyRequest): boolean {
  const h = request.headers;
  if (h.forwarded !== undefined || h['x-forwarded-for'] !== undefined || h['x-real-ip'] !== undefined) return false;
  return isLoopback(request.socket.remoteAddress);
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The server's metrics; server.ts plugs in sources that exist outside HTTP (MQTT). */
    metrics: Metrics;
  }
}

/**
 * GET /metrics plus the latency hook. Called on the root instance before any route plugin
 * is registered (not registered as a plugin itself), so the hook sees every route.
 */
export function installMetrics(app: FastifyInstance, metrics: Metrics): void {
  app.decorate('metrics', metrics);
  // A callback hook, not an async one: no promise per request on the ingest path.
  app.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    if (route !== '/metrics') metrics.observeRequest(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
  app.get('/metrics', { schema: { hide: true } }, async (request, reply) => {
    if (!mayScrape(request)) return reply.code(404).type('application/json').send({ error: 'not found' });
    const text = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(text);
  });
  app.addHook('onClose', async () => metrics.close());
}
