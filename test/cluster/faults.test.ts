/**
 * A cluster under HTTP and MQTT QoS 1 load through haproxy loses nothing it acknowledged when
 * a node is killed with SIGKILL or PostgreSQL stops and starts again (docs/cluster.md): devices
 * resend what was not acknowledged, and every acknowledged reading is in PostgreSQL exactly
 * once. During a database outage every node refuses writes (503, no PUBACK) and takes them
 * again by itself once PostgreSQL is back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, startCluster } from '../helpers/cluster.js';
import {
  type ClusterSeed,
  checkAcknowledged,
  ingestVia,
  mqttConnectionsOn,
  progress,
  seedViaCli,
  startLoad,
  underLoad,
} from './support.js';

describe('a cluster of three nodes under load', () => {
  let cluster: Cluster;

  beforeAll(async () => {
    cluster = await startCluster({ nodes: 3 });
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  it('keeps every acknowledged reading, exactly once, when a node is killed with SIGKILL and restarted', async () => {
    const seed: ClusterSeed = await seedViaCli(cluster);
    // Three MQTT devices: least-connections puts one on each node, so the killed node holds one.
    const load = startLoad(cluster, seed, { httpWorkers: 6, mqttClients: 3 });
    let victim = -1;
    await underLoad(load, async () => {
      await progress(load, 150);
      // A node that holds an MQTT device, so its devices have to move.
      const held = await Promise.all(cluster.nodes.map((n) => mqttConnectionsOn(n.url)));
      victim = held.findIndex((c) => c > 0);
      expect(victim, JSON.stringify(held)).toBeGreaterThanOrEqual(0);
      const connectsBefore = load.mqttConnects;
      await cluster.kill(victim);
      // The two other nodes go on taking readings, and the moved device is among them.
      await progress(load, 200);
      await expect.poll(() => load.mqttConnects, { timeout: 10_000 }).toBeGreaterThan(connectsBefore);
      await cluster.restart(victim);
      await cluster.waitHealthy();
      await progress(load, 150);
    });
    const check = await checkAcknowledged(cluster, seed, load);
    expect(check.missing).toEqual([]);
    expect(check.doubled).toEqual([]);
    expect(check.unknown).toEqual([]);
    // The restarted node takes readings again.
    expect(await ingestVia(cluster.nodes[victim]!.url, seed, { n: -1, a: 0 })).toBe(200);
  });

  it('refuses writes on every node while PostgreSQL is down and recovers by itself, keeping every acknowledged reading', async () => {
    const seed = await seedViaCli(cluster);
    const pids = cluster.nodes.map((n) => n.proc.pid);
    const load = startLoad(cluster, seed, { httpWorkers: 4, mqttClients: 3 });
    await underLoad(load, async () => {
      await progress(load, 100);
      await cluster.stopPostgres();
      // Every node, asked directly: 503 with Retry-After, and /healthz degraded.
      for (const [i, node] of cluster.nodes.entries()) {
        const res = await fetchNode(node, '/api/devices/ingest', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ device_id: seed.deviceId, access_token: seed.token, data: { n: -100 - i, a: 0 } }),
        });
        expect(res.status, node.url).toBe(503);
        expect(res.headers.get('retry-after')).toMatch(/^\d+$/);
        expect(((await res.json()) as { error: string }).error).toMatch(/^storage unavailable: /);
        expect((await fetchNode(node, '/healthz')).status, node.url).toBe(503);
      }
      const ackedDuringOutage = load.acked.length;
      await new Promise((r) => setTimeout(r, 1_000));
      expect(load.acked.length, 'nothing acknowledged while PostgreSQL is down').toBe(ackedDuringOutage);
      const failuresDuringOutage = { ...load.failures };
      expect(failuresDuringOutage.mqtt, 'MQTT devices got no PUBACK').toBeGreaterThan(0);
      await cluster.startPostgres();
      // No node restarted: each takes writes again on its own.
      await progress(load, 150);
      for (const [i, node] of cluster.nodes.entries()) {
        expect(await ingestVia(node.url, seed, { n: -200 - i, a: 0 }), node.url).toBe(200);
        expect((await fetchNode(node, '/healthz')).status).toBe(200);
      }
    });
    expect(cluster.nodes.map((n) => n.proc.pid)).toEqual(pids);
    const check = await checkAcknowledged(cluster, seed, load);
    expect(check.missing).toEqual([]);
    expect(check.doubled).toEqual([]);
    expect(check.unknown).toEqual([]);
    // The readings refused with 503 are not stored; those taken after the outage are.
    for (let i = 0; i < 3; i++) {
      expect(check.markers.has(`${-100 - i}.0`)).toBe(false);
      expect(check.markers.has(`${-200 - i}.0`)).toBe(true);
    }
  });
});

/** A request to one node; a node that cannot be reached fails the test with its state and last output. */
function fetchNode(node: Cluster['nodes'][number], pathname: string, init?: RequestInit): Promise<Response> {
  return fetch(`${node.url}${pathname}`, init).catch((err: unknown) => {
    const state = `exit code ${node.proc.exitCode}, signal ${node.proc.signalCode}`;
    throw new Error(`node${node.index + 1} (${node.url}) unreachable, ${state}; its last output:\n${node.output().slice(-3000)}`, {
      cause: err,
    });
  });
}
