/**
 * aedes hooks: thin adapters between MQTT packets and the domain. Every
 * decision about a device or a reading is made by services.devices / services.ingest; this
 * file only maps their answers onto MQTT (CONNACK codes, PUBACK or disconnect, SUBACK 0x80).
 */
import { randomUUID } from 'node:crypto';
import type { Aedes, AedesOptions, AuthenticateError, Client } from 'aedes';
import type { Services } from '../composition.js';
import type { Authenticated } from '../domain/devices.js';
import { AppError } from '../errors.js';
import { isStoredQos2Duplicate, remoteAddressOf } from './aedesInternals.js';
import { AuthThrottle } from './authThrottle.js';
import type { SessionRegistry } from './sessions.js';

/** MQTT 3.1.1 CONNACK return codes (§3.2.2.3) used here. */
const CONNACK = {
  IDENTIFIER_REJECTED: 2,
  SERVER_UNAVAILABLE: 3,
  BAD_USERNAME_OR_PASSWORD: 4,
  NOT_AUTHORIZED: 5,
} as const;

/**
 * The one place an AppError becomes a CONNACK code: 401 (unknown device, wrong token) →
 * 4, 403 (paused device, suspended account) → 5 (docs/mqtt.md, "Connecting and publishing"),
 * anything else (the database failed) → 3, server unavailable, so the device retries.
 */
function connackReturnCode(err: unknown): 3 | 4 | 5 {
  if (err instanceof AppError) {
    if (err.status === 401) return CONNACK.BAD_USERNAME_OR_PASSWORD;
    if (err.status < 500) return CONNACK.NOT_AUTHORIZED;
  }
  return CONNACK.SERVER_UNAVAILABLE;
}

/**
 * A permanent refusal of the reading itself (400 not JSON / not an object / schema / field
 * limit, 413 too large), already counted by the pipeline; not a refusal of the device
 * (401/403), nor a failure to commit (5xx or not an AppError).
 */
function isRejectedReading(err: unknown): boolean {
  return err instanceof AppError && err.permanent && err.status !== 401 && err.status !== 403;
}

/** The only topic a device publishes to (docs/api.md, "MQTT"). */
const telemetryTopic = (deviceId: string) => `d/${deviceId}/t`;
const TELEMETRY_TOPIC = /^d\/[^/]+\/t$/;
export const isTelemetryTopic = (topic: string) => TELEMETRY_TOPIC.test(topic);

interface Log {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/**
 * Publishes whose reading is being ingested (authorizePublish called, not answered yet). The
 * broker's shutdown waits for them before it closes the connections, so a reading committed
 * during the shutdown is acknowledged rather than sent again by its device after the restart
 * (and stored twice); publishes that arrive once it began are refused (`closing`).
 */
export class PublishesInFlight {
  closing = false;
  private count = 0;
  private idle: (() => void)[] = [];

  started(): void {
    this.count++;
  }

  ended(): void {
    if (--this.count === 0) for (const resolve of this.idle.splice(0)) resolve();
  }

  /** Resolves once none is in flight, or after `timeoutMs` (a commit that hangs). */
  settled(timeoutMs: number): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      timer.unref();
      this.idle.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

export function brokerHooks(deps: {
  services: Services;
  sessions: SessionRegistry;
  log: Log;
  broker: () => Aedes;
  /** Per-address throttle of failed CONNECTs (./authThrottle.ts); one per broker by default. */
  throttle?: AuthThrottle;
  /** The publishes being ingested, which a shutdown lets finish (./broker.ts, close). */
  publishes: PublishesInFlight;
}): Pick<AedesOptions, 'preConnect' | 'authenticate' | 'authorizePublish' | 'authorizeSubscribe' | 'authorizeForward'> {
  const { services, sessions, log, publishes } = deps;
  const throttle = deps.throttle ?? new AuthThrottle(services.clock);
  /**
   * Connections whose CONNECT had an empty client id and clean session 0. Only preConnect sees
   * the packet as sent (it rewrites both fields), and only a refusal from authenticate becomes
   * a CONNACK with a chosen code (aedes ends a refused preConnect without any CONNACK), so
   * preConnect marks them here and authenticate refuses them.
   */
  const identifierRejected = new WeakSet<Client>();
  /** QoS 2 publishes not answered yet, by connection and message id (authorizePublish). */
  const qos2InFlight = new WeakMap<Client, Map<number, Promise<Error | null>>>();

  return {
    preConnect(client, packet, callback) {
      // Clean session 0 asks to resume a session, which only a client id can name: with an
      // empty one it is refused with CONNACK 2 ([MQTT-3.1.3-8]; MQTT 3.1 alike), where aedes
      // would assign an id and serve it.
      if (!packet.clientId && !packet.clean) identifierRejected.add(client);
      // No persistent sessions: they would hold subscriptions and queued QoS 1 messages for
      // devices that may never come back. clean=false is served as a clean session and the
      // CONNACK says so (session present = 0), which MQTT 3.1.1 §3.2.2.2 allows.
      packet.clean = true;
      // Client ids live in the device's own namespace: a device reusing another device's
      // client id must not take over ([MQTT-3.1.4-2]) that device's connection. An empty id
      // gets a unique one, as MQTT 3.1.1 asks of a server (§3.1.3.1).
      packet.clientId = `${packet.username ?? ''}/${packet.clientId || randomUUID()}`;
      callback(null, true);
    },

    authenticate(client, username, password, callback) {
      // Before the credentials: the refusal is about the CONNECT itself, says nothing about
      // them, and does not count towards the address's lockout.
      if (identifierRejected.has(client)) {
        const refusal = new Error('an empty client id needs clean session 1') as AuthenticateError;
        refusal.returnCode = CONNACK.IDENTIFIER_REJECTED;
        return callback(refusal, false);
      }
      const address = remoteAddressOf(client);
      if (throttle.lockedFor(address) > 0) {
        // Too many failures from this address: refused unchecked, as "server unavailable" so
        // the answer reveals nothing about these credentials and the device retries later.
        const refusal = new Error('too many failed connection attempts; try again later') as AuthenticateError;
        refusal.returnCode = CONNACK.SERVER_UNAVAILABLE;
        return callback(refusal, false);
      }
      const accept = ({ device, account }: Authenticated) => {
        const announced = sessions.add({ deviceId: device.id, accountId: account.id, tokenHash: device.tokenHash, client });
        throttle.recordSuccess(address);
        if (announced) announced.then(() => callback(null, true));
        else callback(null, true);
      };
      const refuse = (err: unknown) => {
        // Only wrong credentials count (401); a paused device (403) knew its token.
        if (err instanceof AppError && err.status === 401) throttle.recordFailure(address);
        if (!(err instanceof AppError)) log.error({ err }, 'MQTT authentication failed');
        const refusal = new Error(err instanceof AppError ? err.message : 'server unavailable') as AuthenticateError;
        refusal.returnCode = connackReturnCode(err);
        callback(refusal, false);
      };
      try {
        // Username = device id, password = access token (docs/api.md, "Authentication").
        // Answered from the cache without a promise but on an asynchronous backend's miss.
        const authenticated = services.devices.authenticate(username, password?.toString('utf8'));
        if (authenticated instanceof Promise) authenticated.then(accept).catch(refuse);
        else accept(authenticated);
      } catch (err) {
        refuse(err);
      }
    },

    /**
     * A PUBLISH, before aedes acknowledges it. aedes (lib/handlers/publish.js) runs this hook
     * and only when it calls back without an error writes the PUBACK (QoS 1) or PUBREC
     * (QoS 2) and hands the packet on; an error ends the connection without any
     * acknowledgement (lib/client.js nextBatch → _onError), for QoS 0, 1 and 2 alike.
     * That gives the QoS rules of docs/mqtt.md ("QoS", "Rejections") exactly:
     *  - stored: call back once the pipeline resolved, i.e. after the group commit → PUBACK
     *    follows the commit;
     *  - permanent rejection (not JSON, not an object, > 65,536 bytes, schema, field limit):
     *    the pipeline has counted it against the device; call back without error → PUBACK,
     *    the client stays connected and does not resend it forever;
     *  - the device lost its right to publish (paused, deleted, suspended: 401/403), a topic
     *    other than its own, or a transient failure (database cannot commit): call back with
     *    the error → no PUBACK, disconnected; a QoS 1 client resends after reconnecting.
     * Nothing is forwarded either way (authorizeForward below).
     */
    authorizePublish(client, packet, done) {
      // aedes publishes a will from here too, once the client is closed: wills are not
      // readings (nobody can tell when it would be stored) and are dropped (docs/mqtt.md).
      if (!client || client.closed) return done(new Error('will messages are not stored'));
      const session = sessions.get(client);
      if (!session) return done(new Error('not an authenticated MQTT session'));
      if (packet.topic !== telemetryTopic(session.deviceId)) {
        // Another topic is refused and the client disconnected (docs/mqtt.md, "What closes a connection").
        log.warn({ deviceId: session.deviceId, topic: packet.topic.slice(0, 200) }, 'MQTT publish outside the device topic; disconnecting');
        return done(new Error(`device ${session.deviceId} may publish only to ${telemetryTopic(session.deviceId)}`));
      }
      // Shutting down: not stored and not acknowledged, so sent again after the restart.
      if (publishes.closing) return done(new Error('the server is shutting down'));
      publishes.started();
      const callback = (err: Error | null) => {
        publishes.ended();
        done(err);
      };
      // Nothing is retained: the store is the history, and a retained store would grow.
      packet.retain = false;
      const ingest = (answer: (err: Error | null) => void) =>
        services.ingest
          .ingestReading({ transport: 'mqtt', deviceId: session.deviceId, sessionTokenHash: session.tokenHash, data: packet.payload })
          .then(
            () => answer(null),
            (err: unknown) => {
              if (isRejectedReading(err)) return answer(null);
              if (!(err instanceof AppError))
                log.error({ err, deviceId: session.deviceId }, 'MQTT reading not committed; disconnecting without PUBACK');
              answer(err instanceof Error ? err : new Error(String(err)));
            },
          );
      if (packet.qos !== 2) return void ingest(callback);
      // Until its PUBREL, a QoS 2 publish with the same packet id is the same message, DUP flag
      // or not (MQTT 3.1.1, 4.3.3: some clients re-send without it): answered with PUBREC
      // again, never stored twice. aedes handles every packet of one socket read at once, and
      // puts a QoS 2 publish into its inbound store only after this hook answered: a re-send
      // read together with its original (a client resending while the server was busy) is not
      // in the store yet. It waits for the original here and is answered as it was.
      const messageId = packet.messageId!;
      let inFlight = qos2InFlight.get(client);
      const original = inFlight?.get(messageId);
      if (original) {
        original.then((err) => callback(err));
        return;
      }
      if (!inFlight) {
        inFlight = new Map();
        qos2InFlight.set(client, inFlight);
      }
      const pending = inFlight;
      let answered!: (err: Error | null) => void;
      pending.set(
        messageId,
        new Promise<Error | null>((resolve) => {
          answered = (err) => {
            // From this answer on aedes stores the packet before it reads more: its store tells.
            pending.delete(messageId);
            resolve(err);
            callback(err);
          };
        }),
      );
      isStoredQos2Duplicate(deps.broker(), client, packet).then(
        (duplicate) => (duplicate ? answered(null) : ingest(answered)),
        (err: Error) => answered(err),
      );
    },

    authorizeSubscribe(client, subscription, callback) {
      // A device may subscribe only below its own d/{id}/; anything else
      // (other devices, wildcards over d/+, $SYS) gets SUBACK 0x80 and the connection stays.
      const session = sessions.get(client);
      const allowed = session !== undefined && subscription.topic.startsWith(`d/${session.deviceId}/`);
      callback(null, allowed ? subscription : null);
    },

    authorizeForward(_client, packet) {
      // Telemetry goes to the store, not to other MQTT clients: readings are read back through
      // /v1, and a rejected reading must not reach anyone.
      return TELEMETRY_TOPIC.test(packet.topic) ? null : packet;
    },
  };
}
