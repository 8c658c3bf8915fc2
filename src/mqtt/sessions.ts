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
  private readonly byClientId = new Map<string, Session>();

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

  add(session: Session): void {
    // A socket that closed while CONNECT was being checked never emits 'close' again.
    if (session.client.closed || session.client.conn.destroyed) return;
    this.byClient.set(session.client, session);
    let set = this.byDevice.get(session.deviceId);
    if (!set) {
      set = new Set();
      this.byDevice.set(session.deviceId, set);
    }
    set.add(session);
    this.byClientId.set(session.client.id, session);
    // The socket's close is the one event every ending goes through (DISCONNECT, error,
    // keep-alive timeout, takeover, broker shutdown), registered or not.
    session.client.conn.once('close', () => this.remove(session));
  }

  private remove(session: Session): void {
    const set = this.byDevice.get(session.deviceId);
    set?.delete(session);
    if (set && set.size === 0) this.byDevice.delete(session.deviceId);
    // aedes's own takeover on this node registers the newer session under the same id first.
    if (this.byClientId.get(session.client.id) === session) this.byClientId.delete(session.client.id);
  }

  /**
   * Another node accepted a connection with this client id: the older session here ends, as
   * aedes ends it when both connect to the same node ([MQTT-3.1.4-2]).
   */
  takenOverElsewhere(clientId: string): void {
    const session = this.byClientId.get(clientId);
    if (!session) return;
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
      this.services.cluster.onMqttClientElsewhere((clientId) => this.takenOverElsewhere(clientId)),
    ];
    return () => {
      for (const off of offs) off();
    };
  }
}
