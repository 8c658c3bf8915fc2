/**
 * What happens once per cluster (docs/cluster.md, "Once per cluster"): several real servers on
 * one throwaway PostgreSQL database. The background jobs run on the node holding the leader
 * lock and go on elsewhere when it dies; an alert triggers once per cooldown however many
 * nodes see matching readings; rollups equal the readings when two nodes write one minute.
 */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectPostgres } from '../../src/storage/postgres/connect.js';
import { LEADER_LOCK } from '../../src/storage/postgres/leadership.js';
import { eventsOf, send, sleep, startHttpReceiver, waitFor } from '../alerts/helpers.js';
import { createDatabase, type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { seedAccount, startTestServer, type TestServer, tempDir } from '../helpers/server.js';
import { type Bucket, expectedBuckets, expectSameBuckets, seededRandom, telemetryAll } from '../http/aggregateHelpers.js';
import { type ChildServer, startChildServer, stopChild } from '../reliability/helpers.js';

let pg: PostgresServer;
const observers: Pool[] = [];
const servers: TestServer[] = [];
const children: ChildServer[] = [];
let receiver: Awaited<ReturnType<typeof startHttpReceiver>>;

beforeAll(async () => {
  pg = await startPostgres();
  receiver = await startHttpReceiver();
});
afterAll(async () => {
  for (const child of children) await stopChild(child, 'SIGKILL');
  for (const server of servers) await server.stop();
  for (const observer of observers) await observer.end();
  await receiver?.close();
  await pg?.stop();
});

async function node(url: string, options: Parameters<typeof startTestServer>[1] = {}): Promise<TestServer> {
  const server = await startTestServer({ 'database-url': url }, options);
  servers.push(server);
  return server;
}

/** Stops one in-process node (its lock goes with its connection). */
async function stopNode(server: TestServer): Promise<void> {
  servers.splice(servers.indexOf(server), 1);
  await server.stop();
}

/** Another connection to the database, to see what is committed and locked. */
async function observe(url: string): Promise<Pool> {
  const pool = await connectPostgres(url, { max: 2 });
  observers.push(pool);
  return pool;
}

/** Sessions holding the leader lock, seen from another connection. */
async function leaderLocks(observer: Pool): Promise<number> {
  const { rows } = await observer.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    [LEADER_LOCK],
  );
  return rows[0]!.n;
}

const triggeredHooks = (alertId: string) =>
  receiver.received.filter((r) => {
    const body = JSON.parse(r.body) as { type: string; alert: { id: string } };
    return body.type === 'triggered' && body.alert.id === alertId;
  });

describe('background jobs once per cluster', () => {
  it('run on one node; killed (kill -9), another takes over within seconds and a no_data alert fires once, from it', async () => {
    const url = await createDatabase(pg);
    const observer = await observe(url);
    // The built bundle first: it takes the lead.
    const child = await startChildServer(tempDir(), ['--database-url', url]);
    children.push(child);
    await waitFor(async () => (await leaderLocks(observer)) === 1, 'the child to lead', 10_000);
    const survivor = await node(url);
    await sleep(2_500);
    expect(survivor.leadsJobs()).toBe(false);
    expect(await leaderLocks(observer)).toBe(1);

    const s = await seedAccount(survivor);
    const alert = await survivor.services.alerts.create(s.device, {
      name: 'silent',
      kind: 'no_data',
      value: 10,
      severity: 'critical',
      actions: ['webhook'],
      webhookUrl: `${receiver.base}/hook`,
    });
    // Readings through the node that does not lead, for longer than the silence: the leader
    // (the child) sees none of them in its own process and still fires nothing.
    for (let i = 0; i < 13; i++) {
      await send(survivor, s.device, s.token, { t: i });
      await sleep(1_000);
    }
    expect(await eventsOf(survivor, alert.id)).toEqual([]);

    const killedAt = Date.now();
    await stopChild(child, 'SIGKILL');
    await waitFor(() => survivor.leadsJobs(), 'the survivor to lead', 10_000);
    const tookOverMs = Date.now() - killedAt;
    expect(tookOverMs).toBeLessThan(5_000);

    // Silent from the last reading on: the survivor's silence checks fire it, once.
    const [event] = await waitFor(
      async () => {
        const events = await eventsOf(survivor, alert.id);
        return events.length > 0 ? events : null;
      },
      'the no_data event',
      20_000,
    );
    await waitFor(() => triggeredHooks(alert.id).length > 0, 'the webhook');
    await sleep(2_500);
    expect(await eventsOf(survivor, alert.id)).toHaveLength(1);
    expect(triggeredHooks(alert.id)).toHaveLength(1);
    expect(JSON.parse(triggeredHooks(alert.id)[0]!.body).event.id).toBe(event!.id);
    expect(await leaderLocks(observer)).toBe(1);
  });

  it('a closed leader hands over too, and a node that starts later only follows', async () => {
    const url = await createDatabase(pg);
    const first = await node(url);
    await waitFor(() => first.leadsJobs(), 'the first node to lead', 5_000);
    const second = await node(url);
    const third = await node(url);
    await sleep(2_000);
    expect([first.leadsJobs(), second.leadsJobs(), third.leadsJobs()]).toEqual([true, false, false]);
    const leaderGauge = async (server: TestServer) =>
      /^telemetryd_background_jobs_leader (\d)$/m.exec(await (await server.request('/metrics')).text())?.[1];
    expect([await leaderGauge(first), await leaderGauge(second), await leaderGauge(third)]).toEqual(['1', '0', '0']);
    await stopNode(first);
    await waitFor(() => second.leadsJobs() || third.leadsJobs(), 'another node to lead', 5_000);
    await sleep(1_500);
    expect([second.leadsJobs(), third.leadsJobs()].filter(Boolean)).toHaveLength(1);
  });
});

describe('alerts on several nodes', () => {
  it('trigger once per cooldown, with one delivery, when matching readings reach two nodes at once', async () => {
    const url = await createDatabase(pg);
    const a = await node(url);
    const b = await node(url);
    const s = await seedAccount(a, { plan: 'enterprise' });
    const alert = await a.services.alerts.create(s.device, {
      name: 'hot',
      field: 'temp',
      operator: '>',
      value: 50,
      cooldown: 2,
      severity: 'warning',
      actions: ['webhook'],
      webhookUrl: `${receiver.base}/hook`,
    });
    const rounds = 5;
    for (let round = 0; round < rounds; round++) {
      await Promise.all(Array.from({ length: 6 }, (_, i) => send(i % 2 === 0 ? a : b, s.device, s.token, { temp: 60 + round * 10 + i })));
      await sleep(2_600);
    }
    const events = (await eventsOf(b, alert.id)).reverse();
    expect(events).toHaveLength(rounds);
    const times = events.map((e) => Date.parse(e.triggered_at as string));
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(2_000);
    await waitFor(() => triggeredHooks(alert.id).length >= rounds, 'the webhooks');
    await sleep(500);
    const hooks = triggeredHooks(alert.id).map((r) => JSON.parse(r.body).event.id as string);
    expect(hooks.sort()).toEqual(events.map((e) => e.id as string).sort());
    // Both nodes see the stored state.
    expect((await a.services.alerts.getAny(alert.id)).state).toBe('firing');
    expect((await b.services.alerts.getAny(alert.id)).state).toBe('firing');

    // Readings that clear it, on both nodes at once: one resolution, one notice.
    await Promise.all(Array.from({ length: 6 }, (_, i) => send(i % 2 === 0 ? a : b, s.device, s.token, { temp: 10 + i })));
    const resolvedHooks = () =>
      receiver.received.filter((r) => {
        const body = JSON.parse(r.body) as { type: string; alert: { id: string } };
        return body.type === 'resolved' && body.alert.id === alert.id;
      });
    await waitFor(() => resolvedHooks().length > 0, 'the resolution webhook');
    await sleep(1_000);
    expect(resolvedHooks()).toHaveLength(1);
    const after = (await eventsOf(a, alert.id)).reverse();
    expect(after).toHaveLength(rounds);
    expect(after.filter((e) => e.resolved_at !== null).map((e) => e.id)).toEqual([events.at(-1)!.id]);
    expect(JSON.parse(resolvedHooks()[0]!.body).event.id).toBe(events.at(-1)!.id);
    expect((await a.services.alerts.getAny(alert.id)).state).toBe('ok');
    expect((await b.services.alerts.getAny(alert.id)).state).toBe('ok');
  });
});

describe('deliveries on several nodes', () => {
  it('a retry left by a node that stopped is sent once, by another node', async () => {
    const url = await createDatabase(pg);
    const observer = await observe(url);
    const options = { webhookRetryDelaysMs: [3_000, 3_000] };
    const first = await node(url, options);
    await waitFor(() => first.leadsJobs(), 'the first node to lead', 5_000);
    const second = await node(url, options);
    // Its own receiver: the first attempt fails, every later one succeeds.
    const flaky = await startHttpReceiver((n) => (n === 1 ? 500 : 200));
    try {
      const s = await seedAccount(first, { plan: 'enterprise' });
      const alert = await first.services.alerts.create(s.device, {
        name: 'hot',
        field: 'temp',
        operator: '>',
        value: 50,
        severity: 'warning',
        actions: ['webhook'],
        webhookUrl: `${flaky.base}/hook`,
      });
      await send(first, s.device, s.token, { temp: 70 });
      await waitFor(() => flaky.received.length === 1, 'the first attempt');
      const [event] = await eventsOf(first, alert.id);
      const owners = await observer.query(
        'SELECT notice FROM delivery_owners WHERE event_seq = (SELECT seq FROM alert_events WHERE id = $1)',
        [event!.id],
      );
      expect(owners.rows).toEqual([{ notice: 'triggered' }]);
      // Stopped before its retry (3 s after the first attempt) is due.
      await stopNode(first);
      const stoppedAt = Date.now();
      expect(flaky.received).toHaveLength(1);

      await waitFor(() => flaky.received.length >= 2, 'the retry from the other node', 20_000);
      const retry = flaky.received[1]!;
      expect(retry.at).toBeGreaterThanOrEqual(stoppedAt);
      expect(JSON.parse(retry.body).event.id).toBe(event!.id);
      const delivered = await waitFor(async () => {
        const [e] = await second.services.alerts.history(await second.services.alerts.getAny(alert.id), 10);
        return e!.deliveries[0]!.status === 'sent' ? e : null;
      }, 'the delivery recorded as sent');
      expect(delivered.id).toBe(event!.id);
      // Nothing more: not sent twice, nothing left to adopt.
      await sleep(7_000);
      expect(flaky.received).toHaveLength(2);
      expect((await observer.query('SELECT * FROM delivery_owners')).rows).toEqual([]);
    } finally {
      await flaky.close();
    }
  });
});

describe('rollups with two writers', () => {
  it('equal the readings when two nodes ingest into the same device and minute', async () => {
    const url = await createDatabase(pg);
    const observer = await observe(url);
    const start = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
    const clock = { t: start, now: () => clock.t };
    const a = await node(url, { clock });
    const b = await node(url, { clock });
    // A third node, started before the pass, whose clock is set back below.
    const lateClock = { t: start, now: () => lateClock.t };
    const late = await node(url, { clock: lateClock });
    await waitFor(() => a.leadsJobs(), 'the first node to lead', 5_000);
    // The leader's first pass rolls up to `start`.
    await a.services.rollups.runOnce();
    const s = await seedAccount(a, { plan: 'enterprise' });
    const rnd = seededRandom(7);
    // A minute after the nodes started: on one node alone, its commits would be all there is.
    clock.t = start + 65_000;
    for (let i = 0; i < 40; i++) {
      await Promise.all([
        send(a, s.device, s.token, { v: Math.round(rnd() * 1000) / 10, n: i }),
        send(b, s.device, s.token, { v: Math.round(rnd() * 1000) / 10, m: -i }),
      ]);
      clock.t += 500;
    }
    clock.t = start + 4 * 60_000;
    await a.services.rollups.runOnce();
    const rolled = await observer.query<{ rolled_until: number }>('SELECT rolled_until FROM rollup_state');
    expect(rolled.rows[0]!.rolled_until).toBeGreaterThan(start + 2 * 60_000);
    // The minute's rollup row holds both nodes' readings.
    const { rows } = await observer.query<{ stats: string }>('SELECT stats FROM rollups WHERE device_seq = $1 AND level = 0', [
      s.device.seq,
    ]);
    expect(rows).toHaveLength(1);

    const expectAggregatesEqualReadings = async (count: number) => {
      const readings = await telemetryAll(b, s.key, s.device.id, '1h');
      expect(readings).toHaveLength(count);
      for (const [server, interval] of [
        [b, '1m'],
        [a, '5m'],
        [b, '1h'],
      ] as const) {
        const res = await server.request(`/v1/devices/${s.device.id}/telemetry/aggregate?range=1h&interval=${interval}`, { key: s.key });
        expect(res.status).toBe(200);
        const got = ((await res.json()) as { data: Bucket[] }).data;
        expectSameBuckets(got, expectedBuckets(readings, clock.t, '1h', interval, null).buckets);
      }
    };
    await expectAggregatesEqualReadings(80);

    // Late readings through the node that did not roll up (its clock behind: stamped inside
    // the minute already rolled): they mark their hour dirty through the shared mark, and the
    // aggregates of both nodes count them.
    lateClock.t = start + 70_000;
    for (let i = 0; i < 5; i++) await send(late, s.device, s.token, { v: 1_000 + i });
    const dirty = await observer.query('SELECT hour FROM rollup_dirty WHERE device_seq = $1', [s.device.seq]);
    expect(dirty.rows).toEqual([{ hour: start }]);
    await expectAggregatesEqualReadings(85);
  });
});
