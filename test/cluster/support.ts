import mqtt, { type MqttClient } from 'mqtt';
import type { Cluster } from '../helpers/cluster.js';

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
