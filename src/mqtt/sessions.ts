import type { Client } from 'aedes';
import type { Services } from '../composition.js';
import { AppError } from '../errors.js';

/** What CONNECT established for one MQTT connection. */
export interface Session {
  deviceId: string;
  accountId: string;
  /** Hash of the token the device presented at CONNECT: a regenerated token changes the row's hash. */
  tokenHash: string;
  client: Client;
}

/**
 * A session whose own announcement has not come back this long after it was added (the
 * notification was lost: database unreachable) counts as announced before any other.
 */
const UNHEARD_AFTER_MS = 2_000;

/** A session by its client id, and where its announcement to the other nodes stands. */
interface Announced {
  session: Session;
  /** This registry's number for it, in the announcement. */
  no: number;
  addedAt: number;
  /** Its own announcement came back: any other node's announcement heard after it is newer. */
  heard: boolean;
}

interface Log {
  info(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/**
 * The authenticated MQTT sessions, by client and by device, so a change to a device or an
 * account closes exactly the connections it affects (pausing, token regeneration, deletion
 * and suspension close open connections: docs/mqtt.md, "What closes a connection"). Re-checks touch only
 * connected devices: one primary-key lookup each.
 */
export class SessionRegistry {
  private readonly byClient = new WeakMap<Client, Session>();
  private readonly byDevice = new Map<string, Set<Session>>();
  /** By MQTT client id (namespaced by the device: hooks.ts preConnect), for takeovers by another node. */
  private readonly byClientId = new Map<string, Announced>();
  private announcements = 0;

  constructor(
    private readonly services: Services,
    private readonly log: Log,
  ) {}

  get(client: Client | null): Session | undefined {
    return client ? this.byClient.get(client) : undefined;
  }

  get size(): number {
    let n = 0;
    for (const set of this.byDevice.values()) n += set.size;
    return n;
  }

  /**
   * Registers an authenticated session and, on PostgreSQL, announces its client id to every
   * node: the promise settles once the announcement is committed, and the CONNACK waits for
   * it, so a device's next connection (to any node) is announced after this one and ends it.
   * Null when there is nothing to wait for.
   */
  add(session: Session): Promise<void> | null {
    // A socket that closed while CONNECT was being checked never emits 'close' again.
    if (session.client.closed || session.client.conn.destroyed) return null;
    this.byClient.set(session.client, session);
    let set = this.byDevice.get(session.deviceId);
    if (!set) {
      set = new Set();
      this.byDevice.set(session.deviceId, set);
    }
    set.add(session);
    const no = ++this.announcements;
    this.byClientId.set(session.client.id, { session, no, addedAt: performance.now(), heard: false });
    // The socket's close is the one event every ending goes through (DISCONNECT, error,
    // keep-alive timeout, takeover, broker shutdown), registered or not.
    session.client.conn.once('close', () => this.remove(session));
    // Another node holding a session with this client id closes it (docs/cluster.md).
    return this.services.cluster.announceMqttClient(no, session.client.id);
  }

  private remove(session: Session): void {
    const set = this.byDevice.get(session.deviceId);
    set?.delete(session);
    if (set && set.size === 0) this.byDevice.delete(session.deviceId);
    // aedes's own takeover on this node registers the newer session under the same id first.
    if (this.byClientId.get(session.client.id)?.session === session) this.byClientId.delete(session.client.id);
  }

  /**
   * A node (this one too) accepted a connection with this client id. PostgreSQL delivers the
   * announcements in commit order, the same order on every node: another node's heard after
   * this session's own is newer, and the session here ends, as aedes ends the older one when
   * both connect to the same node ([MQTT-3.1.4-2]); one heard before it is older and ignored.
   */
  private announced({ session: no, clientId, own }: { session: number; clientId: string; own: boolean }): void {
    const entry = this.byClientId.get(clientId);
    if (!entry) return;
    if (own) {
      if (entry.no === no) entry.heard = true;
      return;
    }
    if (!entry.heard && performance.now() - entry.addedAt < UNHEARD_AFTER_MS) return;
    const { session } = entry;
    this.log.info({ deviceId: session.deviceId, reason: 'client id connected to another node' }, 'closing MQTT session');
    this.remove(session);
    session.client.close();
  }

  /**
   * Closes the device's sessions that its current row no longer allows: at once when the
   * lookup answers synchronously, else once it has answered.
   */
  recheckDevice(deviceId: string): void {
    const set = this.byDevice.get(deviceId);
    if (!set || set.size === 0) return;
    try {
      const authorized = this.services.devices.authorizeSession(deviceId);
      if (authorized instanceof Promise) {
        authorized.then(
          ({ device }) => this.closeRefused(deviceId, null, device.tokenHash),
          (err: unknown) => this.recheckFailed(deviceId, err),
        );
      } else this.closeRefused(deviceId, null, authorized.device.tokenHash);
    } catch (err) {
      this.recheckFailed(deviceId, err);
    }
  }

  private recheckFailed(deviceId: string, err: unknown): void {
    // A transient failure (database busy) keeps the sessions; the next change re-checks.
    if (!(err instanceof AppError)) {
      this.log.error({ err, deviceId }, 'MQTT session re-check failed');
      return;
    }
    this.closeRefused(deviceId, err.message, null);
  }

  /** Closes the device's sessions: all of them for a `reason`, else those of another token. */
  private closeRefused(deviceId: string, reason: string | null, currentTokenHash: string | null): void {
    const set = this.byDevice.get(deviceId);
    if (!set) return;
    for (const session of [...set]) {
      const why = reason ?? (session.tokenHash !== currentTokenHash ? 'access token was regenerated' : null);
      if (why) {
        this.log.info({ deviceId, reason: why }, 'closing MQTT session');
        this.remove(session);
        session.client.close();
      }
    }
  }

  recheckAccount(accountId: string): void {
    for (const [deviceId, set] of [...this.byDevice]) {
      if ([...set].some((s) => s.accountId === accountId)) this.recheckDevice(deviceId);
    }
  }

  /** After another process (the admin CLI) committed: anything may have changed. */
  recheckAll(): void {
    for (const deviceId of [...this.byDevice.keys()]) this.recheckDevice(deviceId);
  }

  /** Subscribes the re-checks to the domain events; returns the unsubscribe function. */
  watch(): () => void {
    const { events } = this.services;
    const offs = [
      events.on('device.changed', ({ deviceId }) => this.recheckDevice(deviceId)),
      events.on('account.changed', ({ accountId }) => this.recheckAccount(accountId)),
      events.on('external.change', () => this.recheckAll()),
      this.services.cluster.onMqttClientAnnounced((announcement) => this.announced(announcement)),
    ];
    return () => {
      for (const off of offs) off();
    };
  }
}
