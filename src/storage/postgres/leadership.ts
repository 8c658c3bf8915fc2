import type { Client, Pool } from 'pg';
import type { Leadership } from '../repositories.js';
import { connectLike } from './connect.js';

/** Session-level advisory lock of the node that runs the background jobs: 'tlmj'. */
export const LEADER_LOCK = 0x746c6d6a;
/**
 * First key of the two-key advisory lock each node holds while it runs ('tlmn'); the second
 * is the node's key. Pending deliveries name their node by it (repos/alerts.ts).
 */
export const NODE_LOCK_CLASS = 0x746c6d6e;

/** How often a node that does not lead tries the lock, and the leader checks its connection. */
const POLL_MS = 1_000;

/** A node's key: a positive 31-bit number, drawn once per process. */
export const newNodeKey = (): number => 1 + Math.floor(Math.random() * 0x7ffffffe);

/**
 * Leadership of a cluster's background jobs on PostgreSQL: a session-level advisory lock
 * held on one connection of its own, outside the pool. PostgreSQL releases it the moment that
 * connection ends: a node killed (its socket closed by the kernel), a network cut (keepalive),
 * or a close. Every other node tries the lock every POLL_MS, so one of them leads within
 * about a second of the leader's connection ending. The leader runs a trivial query on the
 * same connection every POLL_MS: a connection lost without an error event is found out there
 * and its jobs stop.
 *
 * The same connection holds the node's own lock (NODE_LOCK_CLASS, nodeKey) from the moment
 * it opens until close(): deliveries this node sends are marked with its key, and are
 * adopted by the leader only once that lock is gone. Giving up the lead (unfollow) keeps the
 * connection, so a node shutting down keeps its deliveries until it has closed.
 *
 * One lock for every job rather than one per job: the jobs are light (most passes read little),
 * one connection per node, and a node that leads has every job's state in one place (the
 * silence checks' latest matches, the rollups' marks) instead of several partial ones.
 */
export class PostgresLeadership implements Leadership {
  readonly soleWriter = false;
  private client: Client | null = null;
  private opening: Promise<Client> | null = null;
  private closed = false;
  private onLost: ((err: unknown) => void) | null = null;

  constructor(
    private readonly pool: Pool,
    readonly nodeKey: number,
    private readonly pollMs = POLL_MS,
  ) {}

  /** The connection, opened (with the node lock taken) if need be. */
  private connection(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    this.opening ??= (async () => {
      try {
        const opened = await connectLike(this.pool);
        const lost = (err: unknown) => {
          if (this.client !== opened) return;
          this.client = null;
          opened.end().catch(() => {});
          this.onLost?.(err);
        };
        opened.on('error', lost);
        opened.on('end', () => lost(new Error('leadership: connection ended')));
        await opened.query('SELECT pg_advisory_lock($1, $2)', [NODE_LOCK_CLASS, this.nodeKey]);
        if (this.closed) {
          await opened.end().catch(() => {});
          throw new Error('leadership: closed');
        }
        this.client = opened;
        return opened;
      } finally {
        this.opening = null;
      }
    })();
    return this.opening;
  }

  follow(onChange: (leading: boolean) => void, onError: (err: unknown) => void = () => {}): () => Promise<void> {
    let leading = false;
    let stopped = false;
    let failing = false;
    let timer: NodeJS.Timeout | null = null;
    let polling: Promise<void> = Promise.resolve();

    const fail = (err: unknown) => {
      if (leading) {
        leading = false;
        onChange(false);
      }
      if (!stopped && !failing) {
        failing = true;
        onError(err);
      }
    };
    this.onLost = fail;

    const poll = async () => {
      let current: Client | null = null;
      try {
        current = await this.connection();
        if (leading) {
          await current.query('SELECT 1');
        } else {
          const { rows } = await current.query<{ ok: boolean }>('SELECT pg_try_advisory_lock($1) AS ok', [LEADER_LOCK]);
          if (rows[0]?.ok && !stopped && this.client === current) {
            leading = true;
            onChange(true);
          } else if (rows[0]?.ok) await current.query('SELECT pg_advisory_unlock($1)', [LEADER_LOCK]);
        }
        failing = false;
      } catch (err) {
        if (current && this.client === current) {
          // A failed query on a connection that is still there: start again on a new one.
          this.client = null;
          current.end().catch(() => {});
        }
        fail(err);
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
      this.onLost = null;
      if (leading) {
        leading = false;
        onChange(false);
        // Another node leads within POLL_MS; this one keeps its node lock until close().
        await this.client?.query('SELECT pg_advisory_unlock($1)', [LEADER_LOCK]).catch(() => {});
      }
    };
  }

  /** Ends the connection: the node's lock goes, and with it, its pending deliveries (adopted by the leader). */
  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = null;
    await this.opening?.catch(() => {});
    await client?.end().catch(() => {});
  }
}
