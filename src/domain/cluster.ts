/**
 * What a node of a cluster hears from the others and shares with them (docs/cluster.md,
 * "What every node sees"): MQTT client ids taken over on another node, readings committed
 * by other nodes for the live views of this one, and values generated once per cluster.
 * On SQLite (one process) there are no peers: nothing is sent, nothing arrives, and shared
 * values are this process's own.
 */
import type { ClusterSettings, PeerChannel, PeerReadingsNotice } from '../storage/repositories.js';
import type { DomainEvents } from './events.js';

/** Names of the values generated once per cluster (sharedValue). */
export const SHARED_VALUES = {
  /** The first-run setup token, until the first account exists (server.ts). */
  setupToken: 'setup_token',
  /** The generated MQTT certificate and its private key, as JSON (mqtt/tls.ts). */
  mqttTls: 'mqtt_tls',
} as const;

export interface ClusterParts {
  peers: PeerChannel;
  settings: ClusterSettings;
}

export function clusterService(parts: ClusterParts | null, events: DomainEvents, onError: (err: unknown, what: string) => void) {
  /** Accounts with a live view open on this node, by how many. */
  const followed = new Map<number, number>();
  let stopHearingReadings: (() => void) | null = null;
  /** Batches heard while a fetch was running: the next fetch takes them all, in one query. */
  let pending: PeerReadingsNotice[] = [];
  let fetching = false;

  /**
   * One fetch in flight per node: batches heard meanwhile wait and go together into the next
   * one, so a busy cluster makes fetches larger, not more numerous; readings reach a view in
   * commit order.
   */
  const fetchPending = async () => {
    fetching = true;
    while (pending.length > 0 && parts && followed.size > 0) {
      const notices = pending;
      pending = [];
      try {
        const readings = await parts.peers.readingsElsewhere(notices, [...followed.keys()]);
        for (const r of readings) events.emit('reading.storedElsewhere', r);
      } catch (err) {
        onError(err, 'reading the readings another node committed');
      }
    }
    pending = [];
    fetching = false;
  };

  const readingsElsewhere = (notice: PeerReadingsNotice) => {
    if (followed.size === 0) return;
    pending.push(notice);
    if (!fetching) void fetchPending();
  };

  return {
    /**
     * Tells every node that this one accepted the MQTT client id for its `session` (a number
     * unique in this process). Resolves once sent, never rejects (a failure is reported: the
     * connection stands, only the takeover is missed); null on SQLite, where there is no one to tell.
     */
    announceMqttClient(session: number, clientId: string): Promise<void> | null {
      return parts
        ? parts.peers.announceMqttClient(session, clientId).catch((err: unknown) => onError(err, 'announcing an MQTT client id'))
        : null;
    },

    /**
     * Calls `handler` with each announcement of an MQTT client id, this node's included, in
     * the order they were committed; returns the function that stops it.
     */
    onMqttClientAnnounced(handler: (announcement: { session: number; clientId: string; own: boolean }) => void): () => void {
      return parts ? parts.peers.onMqttClientAnnounced(handler) : () => {};
    },

    /**
     * A live view of the account opened on this node: readings other nodes commit for its
     * devices are emitted as 'reading.storedElsewhere' until the returned function is called.
     * Nothing is fetched while no view is open.
     */
    followReadings(accountSeq: number): () => void {
      if (!parts) return () => {};
      followed.set(accountSeq, (followed.get(accountSeq) ?? 0) + 1);
      stopHearingReadings ??= parts.peers.onReadingsElsewhere(readingsElsewhere);
      let done = false;
      return () => {
        if (done) return;
        done = true;
        const n = (followed.get(accountSeq) ?? 1) - 1;
        if (n > 0) followed.set(accountSeq, n);
        else followed.delete(accountSeq);
        if (followed.size === 0) {
          stopHearingReadings?.();
          stopHearingReadings = null;
        }
      };
    },

    /**
     * The cluster's value of `name`, created once (by `create`) for every node; null on
     * SQLite, where the caller keeps its own.
     */
    sharedValue(name: string, create: () => Promise<string>): Promise<string> | null {
      return parts ? parts.settings.getOrCreate(name, create) : null;
    },

    /** Forgets a shared value (nothing on SQLite). */
    async forgetSharedValue(name: string): Promise<void> {
      await parts?.settings.remove(name);
    },
  };
}
