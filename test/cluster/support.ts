import mqtt, { type MqttClient } from 'mqtt';
import type { Cluster } from '../helpers/cluster.js';
import { psql } from '../helpers/postgres.js';

export interface ClusterSeed {
  accountId: string;
  email: string;
  key: string;
  deviceId: string;
  token: string;
}

/** An account (business plan), an API key and a device, created with the admin CLI on the cluster's database. */
export async function seedViaCli(cluster: Cluster, deviceArgs: string[] = []): Promise<ClusterSeed> {
  const email = `cluster-${Math.random().toString(36).slice(2)}@example.com`;
  const acc = await cluster.cli(['accounts', 'create', '--email', email, '--plan', 'business', '--json']);
  if (acc.status !== 0) throw new Error(acc.stderr);
  const key = await cluster.cli(['keys', 'create', '--account', acc.json.id, '--name', 'cluster test', '--json']);
  if (key.status !== 0) throw new Error(key.stderr);
  const dev = await cluster.cli(['devices', 'create', '--account', acc.json.id, '--name', 'cluster device', '--json', ...deviceArgs]);
  if (dev.status !== 0) throw new Error(dev.stderr);
  return { accountId: acc.json.id, email, key: key.json.key, deviceId: dev.json.id, token: dev.json.access_token };
}

export async function ingestVia(url: string, seed: ClusterSeed, data: Record<string, unknown>): Promise<number> {
  const res = await fetch(`${url}/api/devices/ingest`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ device_id: seed.deviceId, access_token: seed.token, data }),
  });
  await res.arrayBuffer();
  return res.status;
}

/** A device's MQTT connection through haproxy's plain MQTT frontend. */
export function connectViaHaproxy(cluster: Cluster, seed: ClusterSeed, clientId?: string): Promise<MqttClient> {
  return mqtt.connectAsync(
    `mqtt://127.0.0.1:${cluster.mqttPlainPort}`,
    { username: seed.deviceId, password: seed.token, clientId, reconnectPeriod: 0, connectTimeout: 5_000 },
    false,
  );
}

/** The readings of a device in the last hour as one node's Public API answers them. */
export async function historyOn(nodeUrl: string, seed: ClusterSeed): Promise<Record<string, unknown>[]> {
  const res = await fetch(`${nodeUrl}/v1/devices/${seed.deviceId}/telemetry?range=1h&limit=1000`, {
    headers: { authorization: `Bearer ${seed.key}` },
  });
  if (res.status !== 200) throw new Error(`history on ${nodeUrl}: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: { data: Record<string, unknown> }[] }).data.map((r) => r.data);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Devices under load, as real ones behave: each reading carries a unique `n` and the attempt
 * `a`; an HTTP error or a closed MQTT connection means "not stored as far as I know", so the
 * device sends the same reading again (a + 1) until one attempt is acknowledged. `acked`
 * holds the acknowledged "n.a" pairs, each n once.
 */
export interface Load {
  acked: string[];
  /** Attempts that were not acknowledged (HTTP status other than 200, error, closed or refused MQTT connection). */
  failures: { http: number; mqtt: number };
  /** MQTT connections opened (the first ones and reconnections). */
  mqttConnects: number;
  /** Highest n handed out + 1. */
  sent: () => number;
  /** Stops taking new readings; resolves once every reading in flight is acknowledged. */
  stop(): Promise<void>;
  /** Gives up at once (a test failed): readings in flight are dropped. */
  abort(): Promise<void>;
}

export function startLoad(
  cluster: Cluster,
  seed: ClusterSeed,
  opts: { httpWorkers: number; mqttClients: number; deadlineMs?: number },
): Load {
  let next = 0;
  let stopping = false;
  let aborted = false;
  const deadline = Date.now() + (opts.deadlineMs ?? 60_000);
  const load: Load = {
    acked: [],
    failures: { http: 0, mqtt: 0 },
    mqttConnects: 0,
    sent: () => next,
    stop: async () => {
      stopping = true;
      await done;
    },
    abort: async () => {
      stopping = true;
      aborted = true;
      await done.catch(() => {});
    },
  };
  const giveUp = (what: string) => {
    if (aborted) throw new Error('aborted');
    if (Date.now() > deadline) throw new Error(`${what}: a reading still not acknowledged after the deadline`);
  };
  const httpWorker = async () => {
    while (!stopping) {
      const n = next++;
      for (let a = 0; ; a++) {
        giveUp('HTTP');
        const status = await ingestVia(cluster.url, seed, { n, a }).catch(() => 0);
        if (status === 200) {
          load.acked.push(`${n}.${a}`);
          break;
        }
        load.failures.http++;
        await sleep(50);
      }
    }
  };
  const mqttDevice = async (id: number) => {
    let client: MqttClient | null = null;
    const topic = `d/${seed.deviceId}/t`;
    try {
      while (!stopping) {
        const n = next++;
        for (let a = 0; ; a++) {
          giveUp('MQTT');
          try {
            if (!client) {
              client = await connectViaHaproxy(cluster, seed, `load-${id}-${a}-${n}`);
              load.mqttConnects++;
            }
            await publishQos1(client, topic, JSON.stringify({ n, a }));
            load.acked.push(`${n}.${a}`);
            break;
          } catch {
            load.failures.mqtt++;
            client?.end(true);
            client = null;
            await sleep(50);
          }
        }
      }
    } finally {
      await client?.endAsync();
    }
  };
  const done = Promise.all([
    ...Array.from({ length: opts.httpWorkers }, httpWorker),
    ...Array.from({ length: opts.mqttClients }, (_, i) => mqttDevice(i)),
  ]).then(() => undefined);
  return load;
}

/** Resolves on the PUBACK; rejects when the connection closes first or no PUBACK comes within 5 s. */
function publishQos1(client: MqttClient, topic: string, payload: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => finish(new Error('no PUBACK within 5 s')), 5_000);
    const onClose = () => finish(new Error('connection closed before the PUBACK'));
    const finish = (err?: Error) => {
      clearTimeout(timer);
      client.off('close', onClose);
      if (err) reject(err);
      else resolve();
    };
    client.once('close', onClose);
    client.publish(topic, payload, { qos: 1 }, (err) => finish(err ?? undefined));
  });
}

/** Waits until `load` has `count` more acknowledgements than now. */
export async function progress(load: Load, count: number, timeoutMs = 20_000): Promise<void> {
  const target = load.acked.length + count;
  const end = Date.now() + timeoutMs;
  while (load.acked.length < target) {
    if (Date.now() > end) throw new Error(`load stalled at ${load.acked.length} acknowledgements (wanted ${target})`);
    await sleep(20);
  }
}

/**
 * Compares what the devices were told with what PostgreSQL holds: every acknowledged attempt
 * stored exactly once, no attempt stored twice, nothing stored that was never sent. Returns
 * the readings stored although their attempt was not acknowledged (the device sent them
 * again: at least once, as QoS 1 promises).
 */
export async function checkAcknowledged(cluster: Cluster, seed: ClusterSeed, load: Load) {
  const db = new URL(cluster.databaseUrl).pathname.slice(1);
  const out = await psql(
    cluster.pg,
    db,
    `SELECT (r.data::jsonb->>'n') || '.' || (r.data::jsonb->>'a') FROM readings r JOIN devices d ON d.seq = r.device_seq WHERE d.id = '${seed.deviceId}'`,
  );
  const stored = out === '' ? [] : out.split('\n');
  const counts = new Map<string, number>();
  for (const s of stored) counts.set(s, (counts.get(s) ?? 0) + 1);
  const missing = load.acked.filter((m) => counts.get(m) !== 1);
  const doubled = [...counts].filter(([, c]) => c > 1).map(([m]) => m);
  const unknown = stored.filter((m) => Number(m.split('.')[0]) >= load.sent());
  const ackedSet = new Set(load.acked);
  const storedUnacknowledged = stored.filter((m) => !ackedSet.has(m)).length;
  return { stored: stored.length, markers: new Set(stored), missing, doubled, unknown, storedUnacknowledged };
}

/** Open MQTT connections of one node, from its own /metrics. */
export async function mqttConnectionsOn(nodeUrl: string): Promise<number> {
  const text = await (await fetch(`${nodeUrl}/metrics`)).text();
  return Number(/^telemetryd_mqtt_connections (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
}

/** Runs `body` under `load`; on success waits for every reading in flight, on failure drops them. */
export async function underLoad(load: Load, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (err) {
    await load.abort();
    throw err;
  }
  await load.stop();
}
