/**
 * What the nodes of a cluster share beyond the tables (docs/cluster.md, "What every node
 * sees"): notifications between nodes, values generated once per cluster, and the Public
 * API's rate limit counts.
 */
import type { Pool } from 'pg';
import type { ClusterSettings, PeerChannel, PeerReading, PeerReadingsNotice, SharedRateCounts } from '../repositories.js';
import type { ChangeListener } from './changeListener.js';
import { MQTT_CLIENTS_CHANNEL, READINGS_CHANNEL } from './migrations.js';

/** Parses '<min time> <max time> <min seq> <max seq> <device seqs or *>' (the writer's notification after its node name). */
function parseReadingsNotice(payload: string): PeerReadingsNotice | null {
  const [minTime, maxTime, minSeq, maxSeq, devices] = payload.split(' ');
  const numbers = [minTime, maxTime, minSeq, maxSeq].map(Number);
  if (devices === undefined || numbers.some((n) => !Number.isSafeInteger(n))) return null;
  const deviceSeqs = devices === '*' ? null : devices.split(',').map(Number);
  return { minTime: numbers[0]!, maxTime: numbers[1]!, minSeq: numbers[2]!, maxSeq: numbers[3]!, deviceSeqs };
}

export function postgresPeerChannel(pool: Pool, node: string, listener: ChangeListener): PeerChannel {
  return {
    async announceMqttClient(session, clientId) {
      await pool.query('SELECT pg_notify($1, $2)', [MQTT_CLIENTS_CHANNEL, `${node} ${session} ${clientId}`]);
    },
    onMqttClientAnnounced: (handler) =>
      listener.onPeer(MQTT_CLIENTS_CHANNEL, (payload, own) => {
        const space = payload.indexOf(' ');
        const session = Number(payload.slice(0, space));
        if (space > 0 && Number.isSafeInteger(session)) handler({ session, clientId: payload.slice(space + 1), own });
      }),
    onReadingsElsewhere: (handler) =>
      listener.onPeer(READINGS_CHANNEL, (payload, own) => {
        const notice = own ? null : parseReadingsNotice(payload);
        if (notice) handler(notice);
      }),
    async readingsElsewhere(notices, accountSeqs) {
      const devices = new Set<number>();
      let anyDevice = false;
      for (const n of notices) {
        if (n.deviceSeqs === null) anyDevice = true;
        else for (const seq of n.deviceSeqs) devices.add(seq);
      }
      // The time bounds let the (device_seq, time) index and partition pruning do the work;
      // the batches' id ranges keep out readings of other batches in that time (this node's
      // own, shown to its views already, among them).
      const { rows } = await pool.query<{
        device_id: string;
        account_seq: number;
        seq: number;
        device_seq: number;
        time: number;
        data: string;
      }>(
        `SELECT d.id AS device_id, d.account_seq, r.seq, r.device_seq, r.time, r.data
         FROM readings r JOIN devices d ON d.seq = r.device_seq
         WHERE r.time BETWEEN $1 AND $2 AND d.account_seq = ANY($3::bigint[])
           AND ($4::bigint[] IS NULL OR r.device_seq = ANY($4::bigint[]))
           AND EXISTS (SELECT 1 FROM unnest($5::bigint[], $6::bigint[]) AS b(lo, hi) WHERE r.seq BETWEEN b.lo AND b.hi)
         ORDER BY r.seq`,
        [
          Math.min(...notices.map((n) => n.minTime)),
          Math.max(...notices.map((n) => n.maxTime)),
          accountSeqs,
          anyDevice ? null : [...devices],
          notices.map((n) => n.minSeq),
          notices.map((n) => n.maxSeq),
        ],
      );
      return rows.map(
        (r): PeerReading => ({
          deviceId: r.device_id,
          accountSeq: r.account_seq,
          reading: { seq: r.seq, deviceSeq: r.device_seq, time: r.time, data: r.data },
        }),
      );
    },
  };
}

/** Transaction-level advisory lock taken while a cluster setting is created: 'tlcs'. */
const SETTINGS_LOCK = 0x746c6373;

export function postgresClusterSettings(pool: Pool): ClusterSettings {
  const read = async (name: string) =>
    (await pool.query<{ value: string }>('SELECT value FROM cluster_settings WHERE name = $1', [name])).rows[0]?.value;
  return {
    async getOrCreate(name, create) {
      const existing = await read(name);
      if (existing !== undefined) return existing;
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        // Nodes starting together: the first creates, the others wait here and find its value.
        await client.query('SELECT pg_advisory_xact_lock($1)', [SETTINGS_LOCK]);
        const { rows } = await client.query<{ value: string }>('SELECT value FROM cluster_settings WHERE name = $1', [name]);
        let value = rows[0]?.value;
        if (value === undefined) {
          value = await create();
          await client.query('INSERT INTO cluster_settings (name, value, updated_at) VALUES ($1, $2, $3)', [name, value, Date.now()]);
        }
        await client.query('COMMIT');
        return value;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        client.release();
      }
    },
    async remove(name) {
      await pool.query('DELETE FROM cluster_settings WHERE name = $1', [name]);
    },
  };
}

export function postgresRateCounts(pool: Pool): SharedRateCounts {
  return {
    async consume(accountSeq, minute, day, perMinute, perDay) {
      const { rows } = await pool.query<{ minute_count: number; day_count: number; allowed: boolean }>({
        name: 'telemetryd-rate-limit-consume',
        text: 'SELECT minute_count, day_count, allowed FROM rate_limit_consume($1, $2, $3, $4, $5)',
        values: [accountSeq, minute, day, perMinute, perDay],
      });
      const r = rows[0]!;
      return { minuteCount: r.minute_count, dayCount: r.day_count, allowed: r.allowed };
    },
  };
}
