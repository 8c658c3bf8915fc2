import type { Client, Pool } from 'pg';
import type { Leadership } from '../repositories.js';
import { connectLike } from './connect.js';

/** Session-level advisory lock of the node that runs the background jobs: 'tlmj'. */
export const LEADER_LOCK = 0x746c6d6a;

/** How often a node that does not lead tries the lock, and the leader checks its connection. */
const POLL_MS = 1_000;

/**
 * Leadership of a cluster's background jobs on PostgreSQL: a session-level advisory lock
 * held on one connection of its own, outside the pool. PostgreSQL releases it the moment that
 * connection ends: a node killed (its socket closed by the kernel), a network cut (keepalive),
 * or a close. Every other node tries the lock every POLL_MS, so one of them leads within
 * about a second of the leader's connection ending. The leader runs a trivial query on the
 * same connection every POLL_MS: a connection lost without an error event is found out there
 * and its jobs stop.
 *
 * One lock for every job rather than one per job: the jobs are light (most passes read little),
 * one connection per node, and a node that leads has every job's state in one place (the
 * silence checks' latest matches, the rollups' marks) instead of several partial ones.
 */
export class PostgresLeadership implements Leadership {
  readonly soleWriter = false;

  constructor(
    private readonly pool: Pool,
    private readonly pollMs = POLL_MS,
  ) {}

  follow(onChange: (leading: boolean) => void, onError: (err: unknown) => void = () => {}): () => Promise<void> {
    let client: Client | null = null;
    let leading = false;
    let stopped = false;
    let failing = false;
    let timer: NodeJS.Timeout | null = null;
    let polling: Promise<void> = Promise.resolve();

    const lose = (lost: Client, err: unknown) => {
      if (client !== lost) return;
      client = null;
      lost.end().catch(() => {});
      if (leading) {
        leading = false;
        onChange(false);
      }
      if (!stopped && !failing) {
        failing = true;
        onError(err);
      }
    };

    const poll = async () => {
      try {
        if (!client) {
          const opened = await connectLike(this.pool);
          opened.on('error', (err) => lose(opened, err));
          opened.on('end', () => lose(opened, new Error('leadership: connection ended')));
          if (stopped) {
            await opened.end().catch(() => {});
            return;
          }
          client = opened;
        }
        const current = client;
        if (leading) {
          await current.query('SELECT 1');
        } else {
          const { rows } = await current.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [LEADER_LOCK]);
          if (rows[0]?.ok && !stopped && client === current) {
            leading = true;
            onChange(true);
          }
        }
        failing = false;
      } catch (err) {
        if (client) lose(client, err);
        else if (!failing) {
          failing = true;
          onError(err);
        }
      }
    };

    const schedule = () => {
      timer = setTimeout(() => {
        polling = poll().finally(() => {
          if (!stopped) schedule();
        });
      }, this.pollMs);
      timer.unref();
    };
    polling = poll().finally(() => {
      if (!stopped) schedule();
    });

    return async () => {
      stopped = true;
      if (timer) clearTimeout(timer);
      await polling;
      const held = client;
      client = null;
      if (leading) {
        leading = false;
        onChange(false);
      }
      // Ending the session releases the lock: another node leads within POLL_MS.
      await held?.end().catch(() => {});
    };
  }
}
